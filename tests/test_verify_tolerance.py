"""Verification tolerances widen to the precision a model actually computes in, never narrow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.inputs import random_inputs
from onnxsat.verification import Tolerance, compare_outputs, verify


def model_with(nodes: list[onnx.NodeProto], in_type: int, out_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", in_type, [2, 3])],
        [helper.make_tensor_value_info("y", out_type, [2, 3])],
    )
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def test_float32_model_keeps_the_given_tolerance() -> None:
    model = model_with([helper.make_node("Relu", ["x"], ["y"])], TensorProto.FLOAT, TensorProto.FLOAT)
    assert Tolerance().for_model(model) == Tolerance()


def test_float16_inside_a_float32_model_widens_every_output() -> None:
    """A float32 output computed through float16 has float16 accuracy."""
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT),
    ]
    model = model_with(nodes, TensorProto.FLOAT, TensorProto.FLOAT)
    assert Tolerance().for_model(model) == Tolerance(1e-2, 1e-3)


def test_bfloat16_floor_is_wider_and_user_tolerance_is_never_narrowed() -> None:
    model = model_with([helper.make_node("Relu", ["x"], ["y"])], TensorProto.BFLOAT16, TensorProto.BFLOAT16)
    assert Tolerance().for_model(model) == Tolerance(5e-2, 1e-2)
    assert Tolerance(0.5, 0.5).for_model(model) == Tolerance(0.5, 0.5)


def test_zero_dimensional_inputs_are_arrays_of_every_type() -> None:
    """ONNX Runtime refuses numpy scalars; a 0-D input must be an ndarray whatever its type."""
    types = (TensorProto.BOOL, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8)
    for elem_type in types:
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", elem_type, [])],
            [helper.make_tensor_value_info("y", elem_type, [])],
        )
        feeds = random_inputs(helper.make_model(graph, ir_version=9))
        assert isinstance(feeds["x"], np.ndarray) and feeds["x"].shape == ()
        assert feeds["x"].dtype == helper.tensor_dtype_to_np_dtype(elem_type)


def conv_bn_model() -> onnx.ModelProto:
    """Conv then BatchNormalization with wide-ranging statistics: folding the BN reorders float32 rounding."""
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 10,
        "scale": rng.uniform(0.1, 30, 8).astype(np.float32),
        "bias": rng.standard_normal(8).astype(np.float32),
        "mean": rng.standard_normal(8).astype(np.float32) * 50,
        "var": rng.uniform(1e-3, 2, 8).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(value, name) for name, value in tensors.items()],
    )
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def ort_folded(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """The model as ONNX Runtime's own basic optimizations rewrite it (the BatchNormalization folded)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(path))


def test_a_difference_as_small_as_ort_own_rounding_passes_and_says_so(tmp_path: Path) -> None:
    original = conv_bn_model()
    folded = ort_folded(original, tmp_path / "folded.onnx")
    assert "BatchNormalization" not in [node.op_type for node in folded.graph.node]
    strict = Tolerance(rtol=0.0, atol=0.0)
    result = verify(original, folded, tolerance=strict)
    assert result.ok
    (output,) = result.outputs
    assert output.max_abs_diff > 0 and output.note.startswith("within ONNX Runtime's own rounding")


def test_a_larger_difference_stays_a_mismatch(tmp_path: Path) -> None:
    original = conv_bn_model()
    folded = ort_folded(original, tmp_path / "folded.onnx")
    bias = next(t for t in folded.graph.initializer if numpy_helper.to_array(t).shape == (8,))
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + np.float32(1e-2), bias.name))
    result = verify(original, folded, tolerance=Tolerance(rtol=0.0, atol=0.0))
    assert not result.ok and result.outputs[0].note == ""


def test_an_empty_output_is_said_to_compare_nothing() -> None:
    (comparison,) = compare_outputs(["y"], [np.zeros((0, 3), np.float32)], [np.zeros((0, 3), np.float32)], Tolerance())
    assert comparison.ok and "no element to compare" in comparison.note


def test_a_zipmap_output_is_compared_as_numbers_within_the_tolerance() -> None:
    """A scikit-learn ZipMap output (one {class: probability} map per sample) was compared as Python
    objects: a last-bit difference failed as 'max abs inf'. Its probabilities now get the tolerance, and
    maps of other classes still fail."""
    want = [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]
    near = [{0: 0.25 + 2.6e-9, 1: 0.75}, {0: 0.5, 1: 0.5}]
    far = [{0: 0.35, 1: 0.65}, {0: 0.5, 1: 0.5}]
    other = [{0: 0.25, 2: 0.75}, {0: 0.5, 2: 0.5}]
    near_result, far_result, other_result = (
        compare_outputs(["p"], [want], [got], Tolerance())[0] for got in (near, far, other)
    )
    assert near_result.ok and 0 < near_result.max_abs_diff < 1e-8
    assert not far_result.ok and abs(far_result.max_abs_diff - 0.1) < 1e-12
    assert not other_result.ok and other_result.note == "the maps' keys differ"


def test_outputs_with_no_finite_value_say_nothing_was_compared() -> None:
    """All-NaN inputs gave "verification PASSED ... max abs 0": NaN matched NaN, nothing was checked."""
    nan = np.full((2, 3), np.nan)
    (compared,) = compare_outputs(["y"], [nan], [nan.copy()], Tolerance())
    assert compared.ok and compared.note.startswith("no finite value on these inputs")
    (plain,) = compare_outputs(["y"], [np.ones((2, 3))], [np.ones((2, 3))], Tolerance())
    assert plain.note == ""
