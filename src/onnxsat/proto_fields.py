"""Protobuf fields of ONNX messages: a message rebuilt around the fields that change, a node's graph attributes."""

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
