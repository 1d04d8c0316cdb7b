"""The check of a result that differs on purpose (prune, sparsify, quantize): every output keeps its type and
its declared shape, but a size the model computes from its data may change with the weights."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.inputs import InputSpec
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


def test_a_single_value_is_shown_as_it_moved_not_by_a_cosine_of_one() -> None:
    """The cosine of one value is 1 whatever the change ("relative L2 error 0.414, cosine 1.000")."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1), helper.make_node("Mul", ["y", "scale"], ["z"])],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 1])],
    )

    def scaled(scale: float) -> onnx.ModelProto:
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        model.graph.initializer.append(numpy_helper.from_array(np.array(scale, np.float32), "scale"))
        return model

    original = reference_run(scaled(1.0), InputSpec(given={"x": np.ones((1, 4), np.float32)}))
    _, result = check_lossy(original, scaled(1.5), ["z"], "sparsity")
    assert result.outputs[0].note == "changed by sparsity: relative L2 error 0.5 (4 -> 6)"
