"""Small, shared graph-editing helpers on ``onnx`` protobuf models, so surgeons and the surgery API
read like the edit they make rather than like protobuf bookkeeping.

Everything works on the main graph; subgraphs (If/Loop bodies) are searched only where said.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy: surgeons edit the copy and never the caller's model."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    return result


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """Tensor name -> the node that outputs it."""
    return {name: node for node in graph.node for name in node.output if name}


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name -> the nodes that read it (a node reading it twice is listed once)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):
            if name:
                readers.setdefault(name, []).append(node)
    return readers


def used_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor, node and initializer name in the graph."""
    names = {node.name for node in graph.node}
    names.update(name for node in graph.node for name in [*node.input, *node.output])
    names.update(item.name for item in [*graph.input, *graph.output, *graph.value_info, *graph.initializer])
    return names


def unique_name(graph: onnx.GraphProto, base: str, taken: set[str] | None = None) -> str:
    """``base``, or ``base_1``, ``base_2``... whichever no tensor, node or initializer uses yet.

    Pass ``taken`` (and keep it) when minting several names before adding them to the graph.
    """
    names = used_names(graph) if taken is None else taken
    name, suffix = base, 0
    while name in names:
        suffix += 1
        name = f"{base}_{suffix}"
    names.add(name)
    return name


def initializers(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Initializer name -> TensorProto."""
    return {tensor.name: tensor for tensor in graph.initializer}


def constant_value(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    """The value of ``name`` if it is an initializer or a ``Constant`` node's tensor output, else None."""
    for tensor in graph.initializer:
        if tensor.name == name:
            return numpy_helper.to_array(tensor)
    node = producers(graph).get(name)
    if node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        for attribute in node.attribute:
            if attribute.name == "value":
                return numpy_helper.to_array(attribute.t)
    return None


def rename_tensor(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` everywhere in ``graph`` (nodes, inputs, outputs, value_info,
    initializers, and subgraphs that read it from the outer scope)."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
        for attribute in node.attribute:
            for subgraph in [attribute.g, *attribute.graphs] if attribute.type in _GRAPH_TYPES else []:
                rename_tensor(subgraph, old, new)
    for item in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]:
        if item.name == old:
            item.name = new


_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def remove_dead(graph: onnx.GraphProto, keep: Iterable[str] = ()) -> tuple[int, int]:
    """Drop nodes no graph output depends on and initializers nobody reads (``keep`` names stay).

    Returns (nodes removed, initializers removed). Nodes with subgraphs count their outer-scope reads.
    """
    needed = {output.name for output in graph.output} | set(keep)
    alive: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            alive.append(node)
            needed.update(name for name in node.input if name)
            needed.update(_outer_reads(node))
    removed_nodes = len(graph.node) - len(alive)
    alive.reverse()
    del graph.node[:]
    graph.node.extend(alive)
    kept_initializers = [tensor for tensor in graph.initializer if tensor.name in needed]
    removed_initializers = len(graph.initializer) - len(kept_initializers)
    del graph.initializer[:]
    graph.initializer.extend(kept_initializers)
    graph_inputs = {item.name for item in graph.input}
    remove_where(graph.value_info, lambda item: item.name not in needed and item.name not in graph_inputs)
    return removed_nodes, removed_initializers


def remove_where(field: Any, drop: Callable[[Any], bool]) -> None:
    """Delete the items of a repeated protobuf field for which ``drop`` holds (upb, the protobuf
    runtime onnx ships with, refuses slice assignment on repeated message fields)."""
    for index in reversed(range(len(field))):
        if drop(field[index]):
            del field[index]


def drop_unused_initializers(graph: onnx.GraphProto, among: Iterable[str] | None = None) -> None:
    """Remove initializers no node, subgraph (at any depth) or graph output reads any more; only those named in
    ``among`` when given (the weights an edit replaced, leaving any other the model carries as it is)."""
    read = {name for node in graph.node for name in node.input} | {item.name for item in graph.output}
    for node in graph.node:
        read.update(_outer_reads(node))
    names = None if among is None else set(among)
    remove_where(graph.initializer, lambda tensor: tensor.name not in read and (names is None or tensor.name in names))


def _outer_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read (a superset of the outer-scope reads: good enough to keep them)."""
    names: set[str] = set()
    for attribute in node.attribute:
        for subgraph in [attribute.g, *attribute.graphs] if attribute.type in _GRAPH_TYPES else []:
            for inner in subgraph.node:
                names.update(name for name in inner.input if name)
                names.update(_outer_reads(inner))
    return names


def clear_shapes(model: onnx.ModelProto) -> None:
    """Remove inferred intermediate shapes (``value_info``): stale after an edit, re-infer afterwards."""
    del model.graph.value_info[:]
