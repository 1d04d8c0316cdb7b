"""Sizes an exporter reads from a shape that are known, folded to constants before encoding.

    Gather(Shape(x), i)             with dim i of x static        ==>  that size, as a constant
    Slice(Shape(x), starts, ends…)  with every sliced dim static  ==>  those sizes, as a constant

Exporters test sizes this way (``x.size(0) == 1`` before a Squeeze, behind an If), and a shape is
rarely static as a whole: the batch or the time axis stays dynamic while the channels are fixed. The
rules fold ``Shape`` only when all of it is static; the part that is known folds here, so the tests
above fold with it and the If they decide settles. Only sizes the declared or inferred types fix are
used, so the result holds for every input the model accepts.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_DEFAULT_DOMAINS = ("", "ai.onnx")


def fold_partial_shapes(model: onnx.ModelProto, typed: onnx.ModelProto | None) -> tuple[onnx.ModelProto, int]:
    """``model`` with such Gathers and Slices replaced by initializers (a copy when any was); how many."""
    graph = model.graph
    dims = _known_dims(typed or model)
    constants = _small_int_constants(graph)
    shapes = {
        node.output[0]: _shape_vector(node, dims.get(node.input[0]))
        for node in graph.node
        if node.op_type == "Shape" and node.domain in _DEFAULT_DOMAINS and node.input and node.output
    }
    shapes = {name: vector for name, vector in shapes.items() if vector is not None}
    folded: dict[int, onnx.TensorProto] = {}
    for position, node in enumerate(graph.node):
        if node.domain not in _DEFAULT_DOMAINS or not node.input or node.input[0] not in shapes or not node.output:
            continue
        value = _fold(node, shapes[node.input[0]], constants)
        if value is not None:
            folded[position] = numpy_helper.from_array(value, node.output[0])
    if not folded:
        return model, 0
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [node for position, node in enumerate(result.graph.node) if position not in folded]
    del result.graph.node[:]
    result.graph.node.extend(kept)
    result.graph.initializer.extend(folded.values())
    if result.ir_version < 4:
        result.graph.input.extend(
            onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in folded.values()
        )
    return result, len(folded)


def _fold(node: onnx.NodeProto, vector: list[int], constants: dict[str, np.ndarray]) -> np.ndarray | None:
    """The value ``node`` computes from the shape ``vector`` (-1 for an unknown size), or None."""
    if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in constants:
        if any(a.name == "axis" and a.i != 0 for a in node.attribute):
            return None
        indices = constants[node.input[1]]
        if np.any(indices < -len(vector)) or np.any(indices >= len(vector)):
            return None
        picked = np.asarray(vector, dtype=np.int64)[indices]
    elif node.op_type == "Slice" and len(node.input) >= 3 and all(name in constants for name in node.input[1:] if name):
        starts, ends = constants[node.input[1]], constants[node.input[2]]
        axes = constants[node.input[3]] if len(node.input) > 3 and node.input[3] else np.zeros_like(starts)
        steps = constants[node.input[4]] if len(node.input) > 4 and node.input[4] else np.ones_like(starts)
        if starts.shape != (1,) or ends.shape != (1,) or axes.reshape(-1).tolist() not in ([0], [-1]):
            return None
        if steps.reshape(-1)[0] == 0:
            return None
        start, end, step = (int(np.clip(v.reshape(-1)[0], -(2**62), 2**62)) for v in (starts, ends, steps))
        picked = np.asarray(vector, dtype=np.int64)[slice(start, end, step)]
    else:
        return None
    return None if np.any(picked < 0) else picked.astype(np.int64)


def static_shape_reads(model: onnx.ModelProto, typed: onnx.ModelProto | None) -> set[str]:
    """Outputs of the Shape nodes whose read dims are all known now: a rewrite folds them. Inference stops
    at an op whose output size depends on a run-time value (a Pad whose pads a chain of Shape, Gather and Ceil
    computes, as TF's "same" padding exports); once a round folds that chain, the next op's sizes become
    known, and the chain after it folds in the next round (tf_efficientnet has five such chains in a row)."""
    if typed is None:
        return set()
    dims = _known_dims(typed)
    found = set()
    for node in model.graph.node:
        if node.op_type == "Shape" and node.domain in _DEFAULT_DOMAINS and node.input:
            vector = _shape_vector(node, dims.get(node.input[0]))
            if vector is not None and all(d >= 0 for d in vector):
                found.add(node.output[0])
    return found


def _shape_vector(node: onnx.NodeProto, dims: list[int] | None) -> list[int] | None:
    """What ``Shape`` returns for an input of ``dims`` (-1 where unknown), its start and end applied."""
    if dims is None:
        return None
    start = next((int(a.i) for a in node.attribute if a.name == "start"), 0)
    end = next((int(a.i) for a in node.attribute if a.name == "end"), None)
    vector = dims[slice(start, end)]
    return vector if any(d >= 0 for d in vector) else None


def _known_dims(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Each tensor's declared or inferred dims, -1 where a size is not fixed; tensors of unknown rank left out."""
    dims: dict[str, list[int]] = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            dims[value.name] = [
                int(d.dim_value) if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim
            ]
    inputs = {value.name for value in model.graph.input}
    for tensor in model.graph.initializer:
        if tensor.name not in inputs:
            dims[tensor.name] = [int(d) for d in tensor.dims]
    return dims


def _small_int_constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Integer constants of at most 8 elements: the indices, starts and ends these patterns use."""
    inputs = {value.name for value in graph.input}
    pairs = [(t.name, t) for t in graph.initializer if t.name not in inputs]
    pairs += [
        (n.output[0], n.attribute[0].t)
        for n in graph.node
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"
    ]
    return {
        name: numpy_helper.to_array(tensor).astype(np.int64)
        for name, tensor in pairs
        if tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
        and np.prod(tensor.dims) <= 8
        and tensor.data_location != onnx.TensorProto.EXTERNAL
    }
