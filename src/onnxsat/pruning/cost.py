"""What a pruned model costs: parameters and multiply-accumulates, read off its shapes.

MACs count Conv, ConvTranspose, Gemm and MatMul only (everything else is a rounding error next to
them on CNNs), per inference at the input shapes given (dynamic dims otherwise 1), so that a before /
after ratio says how much arithmetic pruning removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from onnxsat.pruning.graph import attr, infer_shapes
from onnxsat.verify import DEFAULT_DYNAMIC_DIM


def parameter_count(model: onnx.ModelProto) -> int:
    """Elements in the initializers (weights, biases, and the few small constants)."""
    return sum(int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer)


def mac_count(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> int | None:
    """MACs of the Conv/ConvTranspose/Gemm/MatMul nodes, or None when a shape they need is unknown."""
    fixed = _with_fixed_inputs(model, input_shapes or {})
    shapes = infer_shapes(fixed)
    for tensor in fixed.graph.initializer:
        shapes[tensor.name] = list(tensor.dims)
    total = 0
    for node in fixed.graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul") or node.domain not in ("", "ai.onnx"):
            continue
        data, weight = shapes.get(node.input[0]), shapes.get(node.input[1])
        out = shapes.get(node.output[0])
        if data is None or weight is None or out is None or not all(isinstance(d, int) for d in (*data, *out)):
            return None
        if node.op_type == "Conv":
            total += int(np.prod(out)) * int(np.prod(weight[1:]))
        elif node.op_type == "ConvTranspose":
            total += int(np.prod(data)) * int(np.prod(weight[1:]))
        elif node.op_type == "Gemm":
            total += int(np.prod(out)) * int(data[0] if attr(node, "transA", 0) else data[1])
        else:
            total += int(np.prod(out)) * int(data[-1])
    return total


def _with_fixed_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy whose graph inputs have fixed dims: the given shapes, else symbolic dims set to 1."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    del fixed.graph.value_info[:]
    for value in fixed.graph.input:
        if not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        given = input_shapes.get(value.name)
        for position, dim in enumerate(dims):
            size = given[position] if given is not None and position < len(given) else None
            if size is None and dim.HasField("dim_value"):
                continue
            dim.Clear()
            dim.dim_value = size if size is not None else DEFAULT_DYNAMIC_DIM
    return fixed
