"""Weights moved into the bodies that read them.

An exporter often keeps a branch's weights as initializers of the main graph, which the branch reads from
the enclosing scope: for ONNX Runtime, values handed to the body on every run rather than constants of the
body. Held by the body instead, they are constants there. On a Silero VAD export whose branches read 68
such weights, ORT-all ran the result 1.11x faster than the original, against 1.04x with the weights left
outside (one run, side by side). Nothing computed changes.

A weight several bodies read is copied into each (sibling branches may use the same name) while the
copies stay small: a small model pays little for them (Silero's nested branches read half a megabyte of
LSTM weights twice, and their copies bought 4-7% of its speed), a large one much (a merged KV-cache
decoder's two branches read every weight of the model: a copy in each doubled its file and its memory).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from onnxsat.external_data import expected_nbytes
from onnxsat.proto_fields import all_graphs, bodies_of, free_names

COPY_SHARE = 0.5
"""Copies of weights that several bodies read add at most this share of the model's weight bytes..."""
COPY_BYTES = 16 * 2**20
"""...and at most these many bytes."""


@dataclass
class _Allowance:
    bytes_left: float

    def take(self, extra: int) -> bool:
        if extra > self.bytes_left:
            return False
        self.bytes_left -= extra
        return True


def localize_constants(model: onnx.ModelProto) -> int:
    """Move every constant of the main graph (and, in turn, of each body) that only bodies read into those
    bodies, copying one several read while the copies' bytes stay inside ``COPY_SHARE`` and ``COPY_BYTES``;
    returns how many were moved (a constant copied into two branches counts once)."""
    if model.ir_version < 4:  # initializers must also be graph inputs there: they cannot move
        return 0
    total = sum(_bytes(tensor) for graph in all_graphs(model.graph) for tensor in graph.initializer)
    return _localize(model.graph, _Allowance(min(COPY_SHARE * total, COPY_BYTES)))


def _bytes(tensor: onnx.TensorProto) -> int:
    return expected_nbytes(tensor) or tensor.ByteSize()


def _localize(graph: onnx.GraphProto, allowance: _Allowance) -> int:
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
        if len(bodies) > 1 and not allowance.take(_bytes(tensor) * (len(bodies) - 1)):
            kept.append(tensor)  # shared where it is: copies would grow the model too much
            continue
        for body in bodies:
            body.initializer.append(tensor)
        moved += 1
    if moved:
        del graph.initializer[:]
        graph.initializer.extend(kept)
    for node in graph.node:
        for body in bodies_of(node):
            moved += _localize(body, allowance)
    return moved
