"""The check of a result that differs on purpose (prune, sparsify, quantize): every output keeps its type and
its declared shape, but a size the model computes from its data may change with the weights."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.verification import check_lossy, reference_run


def finder(scale: float, count_dim: str | int = "K") -> onnx.ModelProto:
    """The positions where ``x * scale`` passes 0.5: how many depends on the weight."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "scale"], ["s"]),
            helper.make_node("Greater", ["s", "half"], ["mask"]),
            helper.make_node("NonZero", ["mask"], ["found"]),
        ],
        "finder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("found", TensorProto.INT64, [2, count_dim])],
        [
            numpy_helper.from_array(np.array(scale, np.float32), "scale"),
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_data_dependent_count_may_change_and_a_fixed_one_may_not() -> None:
    original = reference_run(finder(1.0), None)
    count = original.outputs[0].shape[1]
    _, result = check_lossy(original, finder(0.5), ["found"], "pruning")
    assert result.ok
    note = result.outputs[0].note
    assert note.startswith(f"changed by pruning: shape [2, {count}] -> [2, ") and "computes from its data" in note
    _, fixed = check_lossy(original, finder(0.5, count_dim=count), ["found"], "pruning")
    assert not fixed.ok and fixed.error.startswith("output 'found': shape/dtype")
