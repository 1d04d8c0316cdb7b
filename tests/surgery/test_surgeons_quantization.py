"""RemoveQDQ, QDQToClip and RemoveDeqLin: the document's examples and their numerical effect."""

from __future__ import annotations

import numpy as np
import onnx
from catalogue_checks import applied, assert_same_values, feeds, initializer, make_model, op_types, run
from onnx import helper

from onnxsat.surgery.surgeons.quantization import QDQToClip, RemoveDeqLin, RemoveQDQ

SCALE, ZERO = np.float32(0.1), np.uint8(128)
WEIGHT = np.random.default_rng(0).normal(size=(2, 3, 1, 1)).astype(np.float32)


def qdq_conv() -> onnx.ModelProto:
    """The RemoveQDQ example: input1 -> Q -> DQ -> Conv."""
    return make_model(
        [
            helper.make_node("QuantizeLinear", ["input1", "scale", "zero_point"], ["quantized"]),
            helper.make_node("DequantizeLinear", ["quantized", "scale", "zero_point"], ["dequantized"]),
            helper.make_node("Conv", ["dequantized", "weight"], ["output"]),
        ],
        {"input1": [1, 3, 4, 4]},
        {"output": None},
        {"scale": SCALE, "zero_point": ZERO, "weight": WEIGHT},
    )


def test_remove_qdq_document_example() -> None:
    model = qdq_conv()
    result = applied(RemoveQDQ(), model).model
    assert op_types(result) == ["Conv"] and list(result.graph.node[0].input) == ["input1", "weight"]
    assert {t.name for t in result.graph.initializer} == {"weight"}
    inputs = feeds(model)
    float_model = make_model(
        [helper.make_node("Conv", ["input1", "weight"], ["output"])],
        {"input1": [1, 3, 4, 4]},
        {"output": None},
        {"weight": WEIGHT},
    )
    np.testing.assert_allclose(run(result, inputs)[0], run(float_model, inputs)[0], rtol=1e-6)
    # the QDQ model rounded its input to the grid: the difference is bounded by half a step per input
    bound = SCALE / 2 * np.abs(WEIGHT).sum(axis=(1, 2, 3)).max() + 1e-5
    assert np.abs(run(result, inputs)[0] - run(model, inputs)[0]).max() <= bound


def test_remove_qdq_can_keep_a_clip_after_inputs() -> None:
    result = applied(RemoveQDQ(keep_clip_after_inputs=True), qdq_conv()).model
    assert op_types(result) == ["Clip", "Conv"]


def test_remove_qdq_chain_ending_in_a_graph_output() -> None:
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            *[
                node
                for i, source in enumerate(["r", "d0"])
                for node in (
                    helper.make_node("QuantizeLinear", [source, "scale", "zero_point"], [f"q{i}"]),
                    helper.make_node("DequantizeLinear", [f"q{i}", "scale", "zero_point"], [f"d{i}"]),
                )
            ],
        ],
        {"x": [4]},
        {"d1": [4]},
        {"scale": SCALE, "zero_point": ZERO},
    )
    result = applied(RemoveQDQ(), model).model
    assert op_types(result) == ["Relu"] and list(result.graph.node[0].output) == ["d1"]
    inputs = feeds(model)
    np.testing.assert_array_equal(run(result, inputs)[0], np.maximum(inputs["x"], 0))


def test_qdq_to_clip_document_example_within_one_step() -> None:
    model = make_model(
        [
            helper.make_node("QuantizeLinear", ["input", "scale", "zero_point"], ["quantized"]),
            helper.make_node("DequantizeLinear", ["quantized", "scale", "zero_point"], ["output"]),
        ],
        {"input": [64]},
        {"output": [64]},
        {"scale": SCALE, "zero_point": ZERO},
    )
    result = applied(QDQToClip(), model).model
    assert op_types(result) == ["Clip"] and result.graph.node[0].output[0] == "output"
    low, high = (initializer(result, name) for name in result.graph.node[0].input[1:])
    np.testing.assert_allclose([low, high], [-12.8, 12.7], rtol=1e-6)
    inputs = {"input": np.linspace(-20, 20, 64, dtype=np.float32)}
    clipped, quantized = run(result, inputs)[0], run(model, inputs)[0]
    assert np.abs(clipped - quantized).max() <= SCALE / 2 + 1e-6
    np.testing.assert_array_equal(clipped, np.clip(inputs["input"], low, high))


def test_qdq_to_clip_leaves_per_channel_pairs() -> None:
    model = make_model(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0),
        ],
        {"x": [2, 3]},
        {"y": [2, 3]},
        {"s": np.array([0.1, 0.2], dtype=np.float32), "z": np.array([0, 5], dtype=np.uint8)},
    )
    outcome = QDQToClip().apply(model)
    assert not outcome.changed and "nothing" in outcome.notice
    assert not QDQToClip().apply(make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": [2]}, {"y": [2]})).changed


def test_remove_deqlin_folds_constant_weights_exactly() -> None:
    quantized = np.random.default_rng(1).integers(0, 255, size=(2, 3, 1, 1)).astype(np.uint8)
    model = make_model(
        [
            helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
            helper.make_node("Conv", ["x", "w"], ["y"]),
        ],
        {"x": [1, 3, 4, 4]},
        {"y": None},
        {"wq": quantized, "ws": np.array([0.01, 0.02], dtype=np.float32), "wz": np.array([100, 120], dtype=np.uint8)},
    )
    result = applied(RemoveDeqLin(), model).model
    assert op_types(result) == ["Conv"]
    assert initializer(result, "w").dtype == np.float32 and {t.name for t in result.graph.initializer} == {"w"}
    assert_same_values(model, result, atol=0)
