"""Protobuf fields of ONNX messages: a message rebuilt around the fields that change, a node's graph attributes
and the outer names those graphs read."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import onnx
from google.protobuf.message import Message


def copy_fields(source: Message, target: Message, skip: set[str]) -> None:
    """Copy every set field of ``source`` into ``target`` except those named in ``skip``.

    ``CopyFrom`` and then clearing would copy a model's weights only to drop them: hundreds of MB.
    """
    for descriptor, value in source.ListFields():
        if descriptor.name in skip:
            continue
        field_value = getattr(target, descriptor.name)
        if descriptor.is_repeated:
            field_value.extend(value)
        elif descriptor.message_type is not None:
            field_value.CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)


def with_initializers_replaced(
    model: onnx.ModelProto, replace: Callable[[onnx.TensorProto], onnx.TensorProto | None]
) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph initializers are ``replace(tensor)``, or the tensor itself
    where that is None: stand-ins for large weights without copying the weights first."""
    view = onnx.ModelProto()
    copy_fields(model, view, skip={"graph"})
    copy_fields(model.graph, view.graph, skip={"initializer"})
    for tensor in model.graph.initializer:
        stand_in = replace(tensor)
        view.graph.initializer.append(tensor if stand_in is None else stand_in)
    return view


def bodies_of(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs a node holds in its attributes (If branches, Loop and Scan bodies), not nested ones."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def subgraph_captures(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensor names read by the node's subgraphs (If/Loop/Scan bodies), in first-use order.

    These are real inputs of the node even though ONNX does not list them: their producers must be
    kept and their names must survive decoding, since the opaque subgraph refers to them by name.
    """
    captured: dict[str, None] = {}
    for graph in bodies_of(node):
        for name in free_names(graph):
            captured.setdefault(name, None)
    return list(captured)


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and its bodies at any depth, each graph before its bodies (read after it is yielded, so
    a caller may replace a graph's nodes before its bodies are reached)."""
    yield graph
    for node in graph.node:
        for body in bodies_of(node):
            yield from all_graphs(body)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The graph's nodes and those of its bodies at any depth, each node before its bodies' nodes."""
    for node in graph.node:
        yield node
        for body in bodies_of(node):
            yield from all_nodes(body)


def free_names(graph: onnx.GraphProto) -> list[str]:
    """Outer names ``graph`` (a body) reads, its nested bodies' reads included, in first-use order."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in [*node.input, *subgraph_captures(node)]:
            if name and name not in defined:
                free.setdefault(name, None)
        defined.update(o for o in node.output if o)
    return list(free)


def drop_unused_domains(model: onnx.ModelProto) -> None:
    """In place: keep the opset imports of the default domain and of the domains nodes use (in any graph,
    or inside a function) or functions are defined in."""
    used = {"", "ai.onnx"} | {node.domain for node in all_nodes(model.graph)}
    used |= {node.domain for function in model.functions for node in function.node}
    used |= {function.domain for function in model.functions}
    kept = [opset for opset in model.opset_import if opset.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(kept)
