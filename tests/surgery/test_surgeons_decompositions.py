"""Decomposition surgeons: the Olive document's patterns rewritten, checked against ONNX Runtime running the
original (contrib ops included), exact to float rounding or within the stated bound."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from interface_models import checked, make_model, run, value
from onnx import TensorProto, helper, numpy_helper

from onnxsat.surgery.surgeon import SurgeryError, build_surgeon
from onnxsat.surgery.surgeons.decompositions import (
    ERF_TANH_SCALE,
    DecomposeQuickGelu,
    DecomposeRotaryEmbedding,
    ReplaceErfWithTanh,
    RMSNormToL2Norm,
    SimplifiedLayerNormToL2Norm,
)

RNG = np.random.default_rng(11)


def op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def erf_model(elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """The document's example: erf_output = Erf(input)."""
    node = helper.make_node("Erf", ["input"], ["erf_output"])
    return make_model([node], [value("input", ["N"], elem)], [value("erf_output", ["N"], elem)])


def test_replace_erf_with_tanh_document_example_within_its_bound() -> None:
    model = erf_model()
    outcome = build_surgeon({"surgeon": "ReplaceErfWithTanh"}).apply(model)
    result = checked(outcome.model)
    assert not ReplaceErfWithTanh.exact
    assert [(n.op_type, n.name, list(n.input), list(n.output)) for n in result.graph.node] == [
        ("Mul", "Sub_Mul_0", ["input", "scale_0"], ["mul_0"]),
        ("Tanh", "Sub_Tanh_0", ["mul_0"], ["erf_output"]),
    ]
    assert numpy_helper.to_array(result.graph.initializer[0]) == np.float32(605 / 503)
    assert op_types(model) == ["Erf"], "the input model was modified"
    x = np.concatenate([np.linspace(-6, 6, 4001), RNG.standard_normal(1000) * 3]).astype(np.float32)
    error = np.abs(run(result, {"input": x})[0] - run(model, {"input": x})[0]).max()
    assert 0.018 < error <= ReplaceErfWithTanh.ERF_BOUND  # the bound holds and is nearly reached


def test_replace_erf_with_tanh_gelu_error_bound() -> None:
    """GELU(x) = x * (1 + Erf(x / sqrt 2)) / 2, as exporters write it."""
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["scaled"]),
        helper.make_node("Erf", ["scaled"], ["erf"]),
        helper.make_node("Add", ["erf", "one"], ["shifted"]),
        helper.make_node("Mul", ["x", "shifted"], ["doubled"]),
        helper.make_node("Mul", ["doubled", "half"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in [("sqrt2", math.sqrt(2)), ("one", 1), ("half", 0.5)]
    ]
    model = make_model(nodes, [value("x", ["N"])], [value("y", ["N"])], constants)
    result = checked(ReplaceErfWithTanh().apply(model).model)
    x = np.concatenate([np.linspace(-8, 8, 8001), RNG.standard_normal(1000) * 4]).astype(np.float32)
    error = np.abs(run(result, {"x": x})[0] - run(model, {"x": x})[0])
    assert 0.02 < error.max() <= ReplaceErfWithTanh.GELU_BOUND
    assert error[np.abs(x) > 5.01].max() < 1e-3


def test_replace_erf_with_tanh_keeps_float16() -> None:
    result = checked(ReplaceErfWithTanh().apply(erf_model(TensorProto.FLOAT16)).model)
    assert result.graph.initializer[0].data_type == TensorProto.FLOAT16
    x = np.linspace(-3, 3, 101).astype(np.float16)
    expected = np.tanh(np.float32(ERF_TANH_SCALE) * x.astype(np.float32))
    np.testing.assert_allclose(run(result, {"input": x})[0].astype(np.float32), expected, atol=2e-3)


def test_replace_erf_with_tanh_without_erf_is_a_no_op() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [2])], [value("y", [2])])
    outcome = ReplaceErfWithTanh().apply(model)
    assert not outcome.changed
    assert outcome.notice == "no Erf node: nothing to replace"


@pytest.mark.parametrize("alpha", [None, 1.25])
def test_decompose_quick_gelu_document_example(alpha: float | None) -> None:
    attributes = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node(
        "QuickGelu", ["input"], ["quickgelu_output"], "QuickGeluNode", domain="com.microsoft", **attributes
    )
    model = make_model([node], [value("input", [4, 8])], [value("quickgelu_output", [4, 8])])
    outcome = build_surgeon({"surgeon": "DecomposeQuickGelu"}).apply(model)
    result = checked(outcome.model)
    assert [(n.op_type, n.name, list(n.input)) for n in result.graph.node] == [
        ("Mul", "QuickGeluNode_mul1", ["input", "QuickGeluNode_alpha"]),
        ("Sigmoid", "QuickGeluNode_sigmoid", ["QuickGeluNode_mul1_output"]),
        ("Mul", "QuickGeluNode_mul2", ["input", "QuickGeluNode_sigmoid_output"]),
    ]
    assert list(result.graph.node[-1].output) == ["quickgelu_output"]
    assert numpy_helper.to_array(result.graph.initializer[0]) == np.float32(alpha or 1.702)
    x = (RNG.standard_normal((4, 8)) * 3).astype(np.float32)
    np.testing.assert_allclose(run(result, {"input": x})[0], run(model, {"input": x})[0], rtol=1e-6, atol=1e-6)


def test_decompose_quick_gelu_without_quick_gelu_is_a_no_op() -> None:
    outcome = DecomposeQuickGelu().apply(erf_model())
    assert not outcome.changed
    assert outcome.notice == "no QuickGelu node of known float type: nothing to decompose"


def rotary_model(
    x_shape: list[int], cache_width: int, position_shape: list[int] = (2, 5), **attributes: int
) -> onnx.ModelProto:
    """The document's example: rotaryembedding_output = RotaryEmbedding(input, position_ids, cos_cache, sin_cache)."""
    node = helper.make_node(
        "RotaryEmbedding",
        ["input", "position_ids", "cos_cache", "sin_cache"],
        ["rotaryembedding_output"],
        "RotaryEmbeddingNode",
        domain="com.microsoft",
        **attributes,
    )
    inputs = [
        value("input", x_shape),
        value("position_ids", list(position_shape), TensorProto.INT64),
        value("cos_cache", [16, cache_width]),
        value("sin_cache", [16, cache_width]),
    ]
    return make_model([node], inputs, [value("rotaryembedding_output", x_shape)])


def rotary_feeds(x_shape: list[int], cache_width: int) -> dict[str, np.ndarray]:
    angles = RNG.uniform(0, 2 * np.pi, (16, cache_width))
    return {
        "input": RNG.standard_normal(x_shape).astype(np.float32),
        "position_ids": RNG.integers(0, 16, (2, 5)).astype(np.int64),
        "cos_cache": np.cos(angles).astype(np.float32),
        "sin_cache": np.sin(angles).astype(np.float32),
    }


@pytest.mark.parametrize(
    ("x_shape", "cache_width", "attributes"),
    [
        ([2, 5, 8], 4, {}),  # the document's case: one head, all of it rotated
        ([2, 5, 12], 3, {"num_heads": 2}),
        ([2, 5, 12], 2, {"num_heads": 2, "rotary_embedding_dim": 4}),
        ([2, 3, 5, 6], 3, {"interleaved": 1}),
        ([2, 5, 16], 2, {"num_heads": 2, "rotary_embedding_dim": 4, "interleaved": 1}),
    ],
)
def test_decompose_rotary_embedding_matches_onnx_runtime(
    x_shape: list[int], cache_width: int, attributes: dict[str, int]
) -> None:
    model = rotary_model(x_shape, cache_width, **attributes)
    outcome = build_surgeon({"surgeon": "DecomposeRotaryEmbedding"}).apply(model)
    result = checked(outcome.model)
    assert outcome.changed
    assert "RotaryEmbedding" not in op_types(result)
    assert {"Gather", "Slice", "Mul", "Sub", "Add", "Concat"} <= set(op_types(result))
    assert result.graph.node[-1].output[0] == "rotaryembedding_output"
    feeds = rotary_feeds(x_shape, cache_width)
    np.testing.assert_allclose(run(result, feeds)[0], run(model, feeds)[0], rtol=1e-6, atol=1e-6)


def test_decompose_rotary_embedding_leaves_a_scalar_position_offset() -> None:
    outcome = DecomposeRotaryEmbedding().apply(rotary_model([2, 5, 8], 4, position_shape=[1]))
    assert not outcome.changed
    assert outcome.notice == (
        "no RotaryEmbedding node decomposed; left 1: RotaryEmbeddingNode: position_ids is not (batch, sequence)"
    )


def rms_model(
    opset: int = 17, reciprocal: bool = False, weight: np.ndarray | None = None, cast: bool = False
) -> onnx.ModelProto:
    """The document's RMSNorm: x / Sqrt(ReduceMean(Pow(x, 2), -1) + 1e-6) * w over x (2, 5, 8)."""
    axes_inputs, axes_attributes = (["axes"], {}) if opset >= 18 else ([], {"axes": [-1]})
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["squared"], name="Pow"),
        helper.make_node("ReduceMean", ["squared", *axes_inputs], ["mean"], **axes_attributes),
        helper.make_node("Add", ["mean", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["rms"]),
    ]
    if reciprocal:
        nodes += [
            helper.make_node("Div", ["one", "rms"], ["inverse"]),
            helper.make_node("Mul", ["x", "inverse"], ["normed"]),
        ]
    else:
        nodes.append(helper.make_node("Div", ["x", "rms"], ["normed"]))
    if cast:  # as exporters write an RMSNorm computed in float32 for a float16 model (here float32 to float32)
        nodes.append(helper.make_node("Cast", ["normed"], ["cast_normed"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Mul", ["cast_normed" if cast else "normed", "weight"], ["y"]))
    weight = RNG.uniform(0.5, 1.5, 8).astype(np.float32) if weight is None else weight
    constants = {"two": np.float32(2), "eps": np.float32(1e-6), "weight": weight}
    constants.update({"one": np.float32(1)} if reciprocal else {})
    constants.update({"axes": np.array([-1], np.int64)} if opset >= 18 else {})
    tensors = [numpy_helper.from_array(np.asarray(v), n) for n, v in constants.items()]
    return make_model(nodes, [value("x", [2, 5, 8])], [value("y", [2, 5, 8])], tensors, opset)


def assert_within_l2norm_bound(after: np.ndarray, before: np.ndarray, normalized: np.ndarray, eps: float) -> None:
    """Relative error <= eps / (2 mean(x^2)) on each row x that was normalized, plus float32 rounding."""
    bound = eps / (2 * np.mean(normalized.astype(np.float64) ** 2, axis=-1, keepdims=True)) + 1e-6
    assert np.all(np.abs(after - before) <= bound * np.abs(before) + 1e-7)


@pytest.mark.parametrize(("opset", "reciprocal", "cast"), [(17, False, False), (18, False, False), (18, True, True)])
def test_rms_norm_to_l2_norm_document_example(opset: int, reciprocal: bool, cast: bool) -> None:
    model = rms_model(opset, reciprocal, cast=cast)
    outcome = build_surgeon({"surgeon": "RMSNormToL2Norm"}).apply(model)
    result = checked(outcome.model)
    assert outcome.notice == "replaced 1 RMSNorm subgraphs with LpNormalization"
    assert op_types(result) == ["LpNormalization", "Cast", "Mul"] if cast else ["LpNormalization", "Mul"]
    l2norm = result.graph.node[0]
    assert list(l2norm.input) == ["x"]
    assert {a.name: a.i for a in l2norm.attribute} == {"axis": -1, "p": 2}
    (scaled,) = result.graph.initializer  # Pow's 2, eps, axes and the unscaled weight are gone
    original = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "weight"))
    np.testing.assert_allclose(numpy_helper.to_array(scaled), original * np.sqrt(8), rtol=1e-6)
    for x in (RNG.standard_normal((2, 5, 8)), RNG.standard_normal((2, 5, 8)) * 1e-3):  # tiny rows: eps shows
        x = x.astype(np.float32)
        assert_within_l2norm_bound(run(result, {"x": x})[0], run(model, {"x": x})[0], x, eps=1e-6)


def test_rms_norm_to_l2_norm_all_ones_weight_becomes_one_element() -> None:
    result = checked(RMSNormToL2Norm().apply(rms_model(weight=np.ones(8, np.float32))).model)
    (scaled,) = result.graph.initializer
    np.testing.assert_allclose(numpy_helper.to_array(scaled), [np.sqrt(8)], rtol=1e-7)


def test_rms_norm_to_l2_norm_without_the_pattern_is_a_no_op() -> None:
    model = rms_model()
    model.graph.node[1].attribute[0].ints[:] = [1]  # a mean over another axis is not an RMSNorm over the last
    outcome = RMSNormToL2Norm().apply(model)
    assert not outcome.changed
    assert outcome.notice.startswith("no RMSNorm subgraph")


def layer_norm_model(op_type: str) -> onnx.ModelProto:
    """SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization (sum exposed) or RMSNormalization."""
    weight = numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "gamma")
    if op_type == "SkipSimplifiedLayerNormalization":
        node = helper.make_node(
            op_type, ["x", "skip", "gamma"], ["y", "", "", "sum"], domain="com.microsoft", epsilon=1e-6
        )
        inputs, outputs = (
            [value("x", [2, 5, 8]), value("skip", [2, 5, 8])],
            [value("y", [2, 5, 8]), value("sum", [2, 5, 8])],
        )
        return make_model([node], inputs, outputs, [weight])
    node = helper.make_node(op_type, ["x", "gamma"], ["y"], axis=-1, epsilon=1e-6)
    opset = 23 if op_type == "RMSNormalization" else 17
    return make_model([node], [value("x", [2, 5, 8])], [value("y", [2, 5, 8])], [weight], opset)


@pytest.mark.parametrize(
    "op_type", ["SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "RMSNormalization"]
)
def test_simplified_layer_norm_to_l2_norm_document_example(op_type: str) -> None:
    model = layer_norm_model(op_type)
    outcome = build_surgeon({"surgeon": "SimplifiedLayerNormToL2Norm"}).apply(model)
    result = checked(outcome.model)
    skip = op_type.startswith("Skip")
    assert op_types(result) == ["Add", "LpNormalization", "Mul"] if skip else ["LpNormalization", "Mul"]
    assert result.graph.node[-1].output[0] == "y"
    if skip:
        assert list(result.graph.node[0].output) == ["sum"]
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    feeds = {"x": x, "skip": RNG.standard_normal((2, 5, 8)).astype(np.float32)} if skip else {"x": x}
    after, before = run(result, feeds), run(model, feeds)
    normalized = x + feeds["skip"] if skip else x
    assert_within_l2norm_bound(after[0], before[0], normalized, eps=1e-6)
    if skip:
        np.testing.assert_array_equal(after[1], before[1])


def test_simplified_layer_norm_to_l2_norm_op_types_restricts_and_is_checked() -> None:
    outcome = SimplifiedLayerNormToL2Norm(["RMSNormalization"]).apply(layer_norm_model("SimplifiedLayerNormalization"))
    assert not outcome.changed
    assert outcome.notice == "no convertible RMSNormalization node: nothing to replace"
    with pytest.raises(SurgeryError, match="cannot convert 'LayerNormalization'"):
        build_surgeon({"surgeon": "SimplifiedLayerNormToL2Norm", "op_types": ["LayerNormalization"]})
