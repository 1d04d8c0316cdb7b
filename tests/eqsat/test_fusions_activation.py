"""Activation fusion into com.microsoft FusedConv/FusedGemm, and BatchNormalization folding edge cases.

Positive cases check the op types of the result, the fusion labels, the fused node's attributes and
that ONNX Runtime (graph optimizations off) computes the same outputs as on the original (rtol 1e-4,
atol 1e-5). Negative cases check that nothing fires (same op multiset, no labels) and that the
result still computes the same outputs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import (
    MS_DOMAIN,
    assert_same_outputs,
    check_and_compare,
    op_types,
    random_feeds,
    roundtrip,
    run,
    session,
)
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxsat.eqsat.optimizer import optimize_model
from test_fusions import (
    FLOAT32_MAX,
    FLOAT32_MIN,
    FOLD,
    FUSED_CONV,
    FUSED_GEMM,
    Graph,
    assert_microsoft_opset,
    assert_unchanged,
    constant_node,
    fused_attrs,
    vi,
)

from onnxsat.zoo.synthetic import demo_cnn

CONV_RELU = "Conv+Relu -> com.microsoft::FusedConv"
CONV_CLIP = "Conv+Clip -> com.microsoft::FusedConv"
GEMM_RELU = "Gemm+Relu -> com.microsoft::FusedGemm"
CONV_BN_RELU = "Conv+BatchNormalization+Relu -> com.microsoft::FusedConv"
CONV_BN_CLIP = "Conv+BatchNormalization+Clip -> com.microsoft::FusedConv"
ACTIVATION_ATTRS = {"activation", "activation_params"}


def serialized_attrs(node: onnx.NodeProto, skip: set[str] = ACTIVATION_ATTRS) -> list[bytes]:
    return [a.SerializeToString() for a in node.attribute if a.name not in skip]


def node_named(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    return node


def f32(value: float) -> float:
    """``value`` as a float32 attribute stores it."""
    return float(np.float32(value))


def initializer_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def bn_scale(values: dict[str, np.ndarray], prefix: str, epsilon: float = 1e-5) -> np.ndarray:
    gamma, var = (values[f"{prefix}_{k}"].astype(np.float64) for k in ("gamma", "var"))
    return gamma / np.sqrt(var + epsilon)


def assert_no_microsoft(model: onnx.ModelProto) -> None:
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
    assert all(o.domain != MS_DOMAIN for o in model.opset_import)


def assert_unchanged_reference(model: onnx.ModelProto, target: str = "ort") -> None:
    """Like ``assert_unchanged``, compared with onnx's reference evaluator (for what ORT cannot run)."""
    trip = roundtrip(model, target=target)
    assert op_types(trip.model) == op_types(model)
    assert not trip.fusions
    onnx.checker.check_model(trip.model)
    feeds = random_feeds(model)
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = ReferenceEvaluator(trip.model).run(None, feeds)
    assert_same_outputs(expected, actual)


# ---- model builders ------------------------------------------------------------------------------


def conv_act(
    dims: int = 2,
    act: str = "Relu",
    conv_attrs: dict | None = None,
    group: int = 1,
    bias: bool = True,
    size: int = 7,
    seed: int = 0,
) -> onnx.ModelProto:
    """x (2, 4, size...) -> Conv(4 -> 4 channels, kernel 3) -> act -> y."""
    g = Graph(seed)
    inputs = ["x", g.weight("w", 4, 4 // group, *[3] * dims)] + ([g.weight("b", 4)] if bias else [])
    g.node("Conv", inputs, "conv", group=group, **(conv_attrs or {}))
    g.node(act, ["conv"], "y")
    return g.model([2, 4] + [size] * dims, ["y"])


def gemm_act(
    a_shape: tuple[int, int] = (2, 4),
    b_shape: tuple[int, int] = (4, 3),
    c_shape: tuple[int, ...] | None = (3,),
    attrs: dict | None = None,
    act: str = "Relu",
    dtype: type = np.float32,
) -> onnx.ModelProto:
    g = Graph(3, dtype)
    inputs = ["x", g.weight("gb", *b_shape)] + ([g.weight("gc", *c_shape)] if c_shape is not None else [])
    g.node("Gemm", inputs, "gemm", **(attrs or {}))
    g.node(act, ["gemm"], "y")
    return g.model(list(a_shape), ["y"], elem=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


# Clip's bound inputs (opset 11+): which of min/max are given, and where an empty name omits one.
CLIP_INPUT_LAYOUTS = {
    "both": ("min", "max"),
    "min_omitted": ("", "max"),
    "max_omitted": ("min",),
    "max_omitted_empty_name": ("min", ""),
    "both_omitted": (),
    "both_omitted_empty_names": ("", ""),
}
# Clip opset 6: which of the min/max attributes are set.
CLIP_ATTRIBUTE_LAYOUTS = {
    "both": ("min", "max"),
    "min_omitted": ("max",),
    "max_omitted": ("min",),
    "both_omitted": (),
}
CLIP_LOW, CLIP_HIGH = -0.25, 0.4


def conv_clip(opset: int, layout: tuple[str, ...], source: str = "initializer", seed: int = 1) -> onnx.ModelProto:
    """x -> Conv(pads 1) -> Clip with bounds ``CLIP_LOW``/``CLIP_HIGH`` as ``layout`` gives them."""
    g = Graph(seed)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3), g.weight("b", 3)], "conv", pads=[1, 1, 1, 1])
    values = {"min": CLIP_LOW, "max": CLIP_HIGH}
    if opset < 11:
        g.node("Clip", ["conv"], "y", **{role: values[role] for role in layout})
    else:
        names = []
        for role in layout:
            if not role:
                names.append("")
                continue
            name, value = f"clip_{role}", np.array(values[role], dtype=np.float32)
            if source == "initializer":
                g.const(name, value)
            else:
                g.nodes.append(constant_node(name, value))
            names.append(name)
        g.node("Clip", ["conv", *names], "y")
    return g.model([2, 2, 6, 6], ["y"], opset=opset)


# ---- Conv + Relu ---------------------------------------------------------------------------------

CONV_VARIANTS = {
    "conv1d": (1, {}, 1),
    "conv1d_pads_strides_dilations": (1, {"pads": [1, 2], "strides": [2], "dilations": [2]}, 1),
    "conv1d_same_upper": (1, {"auto_pad": "SAME_UPPER", "strides": [2]}, 1),
    "conv2d": (2, {}, 1),
    "conv2d_pads_strides_dilations_group": (
        2,
        {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2], "kernel_shape": [3, 3]},
        2,
    ),
    "conv2d_depthwise": (2, {"pads": [1, 1, 1, 1]}, 4),
    "conv2d_same_upper": (2, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 1),
    "conv3d": (3, {}, 1),
    "conv3d_pads_strides": (3, {"pads": [1, 0, 1, 1, 0, 1], "strides": [1, 2, 2]}, 2),
    "conv3d_same_upper": (3, {"auto_pad": "SAME_UPPER", "strides": [2, 2, 2], "dilations": [1, 1, 1]}, 1),
}


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("variant", list(CONV_VARIANTS))
def test_conv_relu_becomes_fused_conv_keeping_conv_attributes(variant: str, bias: bool) -> None:
    dims, attrs, group = CONV_VARIANTS[variant]
    model = conv_act(dims, "Relu", attrs, group=group, bias=bias, size=7 if dims < 3 else 5)
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({FUSED_CONV: 1})
    assert trip.fusions == Counter({CONV_RELU: 1})
    fused, conv = trip.model.graph.node[0], model.graph.node[0]
    attrs_out = fused_attrs(trip.model)
    assert attrs_out["activation"].s == b"Relu"
    assert "activation_params" not in attrs_out
    assert serialized_attrs(fused) == serialized_attrs(conv)  # every conv attribute kept, in order
    assert list(fused.input) == list(conv.input)
    assert list(fused.output) == ["y"]
    assert_microsoft_opset(trip.model)
    check_and_compare(model, trip.model)


# ---- Conv + Clip ---------------------------------------------------------------------------------

CLIP_CASES = [
    pytest.param(6, layout, "attribute", id=f"opset6-{name}") for name, layout in CLIP_ATTRIBUTE_LAYOUTS.items()
]
CLIP_CASES += [
    pytest.param(opset, layout, source, id=f"opset{opset}-{source}-{name}")
    for opset in (11, 13)
    for source in ("initializer", "constant_node")
    for name, layout in CLIP_INPUT_LAYOUTS.items()
]


@pytest.mark.parametrize(("opset", "layout", "source"), CLIP_CASES)
def test_conv_clip_becomes_fused_conv_with_exact_bounds(opset: int, layout: tuple[str, ...], source: str) -> None:
    model = conv_clip(opset, layout, source)
    trip = roundtrip(model, target="ort")
    # The bounds' Constant nodes and initializers are folded into the attribute and disappear.
    assert op_types(trip.model) == Counter({FUSED_CONV: 1})
    assert trip.fusions == Counter({CONV_CLIP: 1})
    assert {t.name for t in trip.model.graph.initializer} == {"w", "b"}
    attrs = fused_attrs(trip.model)
    assert attrs["activation"].s == b"Clip"
    low = f32(CLIP_LOW) if "min" in layout else FLOAT32_MIN
    high = f32(CLIP_HIGH) if "max" in layout else FLOAT32_MAX
    assert list(attrs["activation_params"].floats) == [low, high]
    fused = trip.model.graph.node[0]
    assert list(fused.input) == ["x", "w", "b"]
    assert serialized_attrs(fused) == serialized_attrs(model.graph.node[0])
    assert_microsoft_opset(trip.model)
    outputs = check_and_compare(model, trip.model)
    if layout == ("min", "max"):  # the bounds really bite on these inputs
        assert outputs[0].min() == pytest.approx(CLIP_LOW) and outputs[0].max() == pytest.approx(CLIP_HIGH)


def test_conv_clip_bounds_from_constant_value_float_attributes() -> None:
    g = Graph(2)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    g.nodes.append(helper.make_node("Constant", [], ["lo"], value_float=-0.5))
    g.nodes.append(helper.make_node("Constant", [], ["hi"], value_float=0.125))
    g.node("Clip", ["conv", "lo", "hi"], "y")
    model = g.model([1, 2, 5, 5], ["y"], opset=13)
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({FUSED_CONV: 1})
    assert trip.fusions == Counter({CONV_CLIP: 1})
    assert list(fused_attrs(trip.model)["activation_params"].floats) == [-0.5, 0.125]
    check_and_compare(model, trip.model)


# ---- Gemm + Relu ---------------------------------------------------------------------------------

GEMM_VARIANTS = {
    "no_c": ((2, 4), (4, 3), None, {}),
    "no_c_trans_alpha": ((4, 2), (3, 4), None, {"transA": 1, "transB": 1, "alpha": 0.5}),
    "c_vector": ((2, 4), (4, 3), (3,), {}),
    "c_full_trans_alpha_beta": ((4, 2), (3, 4), (2, 3), {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    "c_scalar_transb_beta": ((2, 4), (3, 4), (), {"transB": 1, "beta": -1.5}),
    "c_row_transa": ((4, 2), (4, 3), (1, 3), {"transA": 1, "alpha": 1.25}),
}


@pytest.mark.parametrize("variant", list(GEMM_VARIANTS))
def test_gemm_relu_becomes_fused_gemm_keeping_gemm_attributes(variant: str) -> None:
    a_shape, b_shape, c_shape, attrs = GEMM_VARIANTS[variant]
    model = gemm_act(a_shape, b_shape, c_shape, attrs)
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({FUSED_GEMM: 1})
    assert trip.fusions == Counter({GEMM_RELU: 1})
    fused, gemm = trip.model.graph.node[0], model.graph.node[0]
    assert fused_attrs(trip.model)["activation"].s == b"Relu"
    assert "activation_params" not in fused_attrs(trip.model)
    assert serialized_attrs(fused) == serialized_attrs(gemm)
    assert list(fused.input) == list(gemm.input)
    assert list(fused.output) == ["y"]
    assert_microsoft_opset(trip.model)
    check_and_compare(model, trip.model)


# ---- target "portable": no com.microsoft fusion --------------------------------------------------

PORTABLE_CASES = {
    "conv1d_relu": lambda: conv_act(1, "Relu"),
    "conv2d_relu_same_upper": lambda: conv_act(2, "Relu", {"auto_pad": "SAME_UPPER"}),
    "conv3d_relu": lambda: conv_act(3, "Relu", size=4),
    "conv_clip_opset6": lambda: conv_clip(6, ("min", "max"), "attribute"),
    "conv_clip_opset11_initializers": lambda: conv_clip(11, ("min", "max")),
    "conv_clip_opset13_constant_nodes": lambda: conv_clip(13, ("", "max"), "constant_node"),
    "gemm_relu": lambda: gemm_act(attrs={"alpha": 0.5}),
    "gemm_relu_no_c": lambda: gemm_act(c_shape=None),
}


@pytest.mark.parametrize("case", list(PORTABLE_CASES))
def test_activation_fusions_do_not_fire_for_portable_target(case: str) -> None:
    model = PORTABLE_CASES[case]()
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == op_types(model)
    assert not trip.fusions
    assert_no_microsoft(trip.model)
    check_and_compare(model, trip.model)


# ---- negative cases (target "ort") ---------------------------------------------------------------


@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_no_fusion_when_conv_output_has_a_second_consumer(act: str) -> None:
    g = Graph(7)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    g.node(act, ["conv"], "y")
    g.node("Sigmoid", ["conv"], "z")
    assert_unchanged(g.model([1, 2, 5, 5], ["y", "z"], opset=13), "ort")


def test_no_fusion_when_conv_output_is_captured_by_a_subgraph() -> None:
    g = Graph(7)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    g.node("Relu", ["conv"], "y")
    then_branch = helper.make_graph([helper.make_node("Identity", ["conv"], ["t"])], "then", [], [vi("t", None)])
    else_branch = helper.make_graph([helper.make_node("Neg", ["conv"], ["e"])], "else", [], [vi("e", None)])
    g.const("cond", np.array(False))
    g.node("If", ["cond"], "z", then_branch=then_branch, else_branch=else_branch)
    model = g.model([1, 2, 5, 5], ["y", "z"], output_shapes=[[1, 3, 3, 3], [1, 3, 3, 3]])
    assert_unchanged(model, "ort")


@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_no_fusion_when_conv_output_is_also_a_graph_output(act: str) -> None:
    g = Graph(8)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    g.node(act, ["conv"], "y")
    assert_unchanged(g.model([1, 2, 5, 5], ["y", "conv"], opset=13), "ort")


@pytest.mark.parametrize("second_reader", ["graph_output", "second_consumer"])
def test_no_gemm_fusion_when_gemm_output_is_read_elsewhere(second_reader: str) -> None:
    g = Graph(9)
    g.node("Gemm", ["x", g.weight("gb", 4, 3), g.weight("gc", 3)], "gemm")
    g.node("Relu", ["gemm"], "y")
    outputs = ["y", "gemm"]
    if second_reader == "second_consumer":
        g.node("Tanh", ["gemm"], "z")
        outputs = ["y", "z"]
    assert_unchanged(g.model([2, 4], outputs), "ort")


@pytest.mark.parametrize("which", ["min", "max"])
def test_no_fusion_when_a_clip_bound_is_a_graph_input(which: str) -> None:
    g = Graph(10)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    other = "max" if which == "min" else "min"
    g.const(f"clip_{other}", np.array(0.3 if other == "max" else -0.3, dtype=np.float32))
    g.extra_inputs.append(vi(f"clip_{which}", []))
    g.node("Clip", ["conv", "clip_min", "clip_max"], "y")
    model = g.model([1, 2, 5, 5], ["y"], opset=13)
    feeds = random_feeds(model)
    feeds[f"clip_{which}"] = np.array(-0.2 if which == "min" else 0.2, dtype=np.float32)
    assert_unchanged(model, "ort", feeds)


def test_no_fusion_when_a_clip_bound_is_an_overridable_initializer() -> None:
    """An initializer also listed as a graph input can be fed at run time: not a constant."""
    g = Graph(11)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    g.const("clip_min", np.array(-0.5, dtype=np.float32))
    g.const("clip_max", np.array(0.5, dtype=np.float32))
    g.extra_inputs.append(vi("clip_min", []))
    g.node("Clip", ["conv", "clip_min", "clip_max"], "y")
    model = g.model([1, 2, 5, 5], ["y"], opset=13)
    feeds = random_feeds(model)
    feeds["clip_min"] = np.array(-0.05, dtype=np.float32)  # the override must still take effect
    assert_unchanged(model, "ort", feeds)


def test_no_fusion_for_float64_conv_relu() -> None:
    g = Graph(12, np.float64)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3), g.weight("b", 3)], "conv", pads=[1, 1, 1, 1])
    g.node("Relu", ["conv"], "y")
    model = g.model([1, 2, 5, 5], ["y"], elem=TensorProto.DOUBLE)
    assert_unchanged_reference(model)  # ORT has no double Conv kernel


def test_no_fusion_for_float16_gemm_relu() -> None:
    model = gemm_act(attrs={"transB": 0}, dtype=np.float16)
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == op_types(model) == Counter({"Gemm": 1, "Relu": 1})
    assert not trip.fusions
    check_and_compare(model, trip.model, rtol=1e-3, atol=1e-3)


def test_no_fusion_for_relu_after_matmul() -> None:
    g = Graph(13)
    g.node("MatMul", ["x", g.weight("m", 4, 3)], "mm")
    g.node("Relu", ["mm"], "y")
    assert_unchanged(g.model([2, 4], ["y"]), "ort")


def test_fusion_needs_the_float32_type_of_the_conv_output() -> None:
    """Without shape inference nothing types ``conv``, so the rule stays off; a value_info enables it."""
    model = conv_act(2, "Relu")
    untyped = roundtrip(model, target="ort", infer=False)
    assert op_types(untyped.model) == op_types(model)
    assert not untyped.fusions
    model.graph.value_info.append(vi("conv", [2, 4, 5, 5]))
    typed = roundtrip(model, target="ort", infer=False)
    assert op_types(typed.model) == Counter({FUSED_CONV: 1})
    assert typed.fusions == Counter({CONV_RELU: 1})
    check_and_compare(model, typed.model)


# ---- BatchNormalization folding: weights from Constant nodes, sparse, shared --------------------


def conv_bn_from_constants(activation: str | None, value_floats: bool = False, seed: int = 14) -> onnx.ModelProto:
    """Conv weight and every BN parameter come from Constant nodes (no initializers at all)."""
    g = Graph(seed)
    rng = g.rng
    g.nodes.append(constant_node("w", (rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32)))
    g.node("Conv", ["x", "w"], "conv", pads=[1, 1, 1, 1])
    params = {
        "gamma": 1.0 + 0.3 * rng.standard_normal(3),
        "beta": 0.2 * rng.standard_normal(3),
        "mean": 0.2 * rng.standard_normal(3),
        "var": 0.2 + rng.random(3),
    }
    for name, value in params.items():
        if value_floats:
            g.nodes.append(helper.make_node("Constant", [], [name], value_floats=value.astype(np.float32).tolist()))
        else:
            g.nodes.append(constant_node(name, value.astype(np.float32)))
    g.node("BatchNormalization", ["conv", *params], "bn" if activation else "y")
    if activation:
        g.node(activation, ["bn"], "y")
    return g.model([2, 2, 5, 5], ["y"])


@pytest.mark.parametrize("value_floats", [False, True], ids=["value_tensor", "value_floats"])
def test_bn_folding_with_weights_from_constant_nodes(value_floats: bool) -> None:
    model = conv_bn_from_constants(None, value_floats)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1})  # the fold wins: no Constant node survives
    assert trip.fusions == Counter({FOLD: 1})
    conv = trip.model.graph.node[0]
    assert len(conv.input) == 3
    assert {t.name for t in trip.model.graph.initializer} == set(conv.input[1:])
    check_and_compare(model, trip.model)


def test_bn_relu_with_weights_from_constant_nodes_becomes_one_fused_conv() -> None:
    model = conv_bn_from_constants("Relu")
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({FUSED_CONV: 1})
    assert trip.fusions == Counter({CONV_BN_RELU: 1})
    check_and_compare(model, trip.model)


def test_bn_folding_with_a_sparse_initializer_weight() -> None:
    g = Graph(15)
    dense = (g.rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32)
    dense[np.abs(dense) < 0.2] = 0.0
    flat = np.flatnonzero(dense)
    g.node("Conv", ["x", "w"], "conv", pads=[1, 1, 1, 1])
    g.node("BatchNormalization", ["conv", *g.bn_params("bn", 3)], "y")
    model = g.model([1, 2, 5, 5], ["y"], output_shapes=[[1, 3, 5, 5]])
    model.graph.sparse_initializer.append(
        helper.make_sparse_tensor(
            numpy_helper.from_array(dense.reshape(-1)[flat], "w"),
            numpy_helper.from_array(flat.astype(np.int64), "w_indices"),
            list(dense.shape),
        )
    )
    onnx.checker.check_model(model)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1})
    assert trip.fusions == Counter({FOLD: 1})
    assert not trip.model.graph.sparse_initializer  # the sparse weight is no longer read
    conv = trip.model.graph.node[0]
    folded = initializer_values(trip.model)
    scale = bn_scale(initializer_values(model), "bn")
    np.testing.assert_allclose(folded[conv.input[1]], dense * scale.reshape(-1, 1, 1, 1), rtol=1e-6)
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("third_reader", [False, True], ids=["only_bn_pairs", "plus_plain_conv"])
def test_bn_folding_with_a_conv_weight_shared_by_two_conv_bn_pairs(third_reader: bool) -> None:
    g = Graph(16)
    w = g.weight("w", 3, 2, 3, 3)
    g.node("Conv", ["x", w], "c1", pads=[1, 1, 1, 1])
    g.node("BatchNormalization", ["c1", *g.bn_params("bn1", 3)], "y1")
    g.node("Conv", ["x", w], "c2")
    g.node("BatchNormalization", ["c2", *g.bn_params("bn2", 3)], "y2")
    outputs = ["y1", "y2"]
    if third_reader:
        g.node("Conv", ["x", w], "y3", strides=[2, 2])
        outputs.append("y3")
    model = g.model([1, 2, 5, 5], outputs)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 3 if third_reader else 2})
    assert trip.fusions == Counter({FOLD: 2})

    original = initializer_values(model)
    folded = initializer_values(trip.model)
    by_output = {n.output[0]: n for n in trip.model.graph.node}
    w1, w2 = by_output["y1"].input[1], by_output["y2"].input[1]
    assert w1 != w2 and "w" not in (w1, w2)  # each pair gets its own folded weight
    for name, prefix in ((w1, "bn1"), (w2, "bn2")):
        np.testing.assert_allclose(
            folded[name], original["w"] * bn_scale(original, prefix).reshape(-1, 1, 1, 1), rtol=1e-6
        )
    if third_reader:
        assert list(by_output["y3"].input) == ["x", "w"]
        np.testing.assert_array_equal(folded["w"], original["w"])
    else:
        assert "w" not in folded  # no longer read by anything
    check_and_compare(model, trip.model)


def test_identical_conv_bn_pairs_are_folded_and_computed_once() -> None:
    """Two identical Conv+BN pairs on one input: folded, then merged by common-subexpression elimination;
    the second output becomes an alias of the first."""
    g = Graph(17)
    w = g.weight("w", 3, 2, 3, 3)
    params = g.bn_params("bn", 3)
    for i in (1, 2):
        g.node("Conv", ["x", w], f"c{i}")
        g.node("BatchNormalization", [f"c{i}", *params], f"y{i}")
    model = g.model([1, 2, 5, 5], ["y1", "y2"])
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1, "Identity": 1})
    assert trip.fusions == Counter({FOLD: 1})
    assert len(trip.model.graph.initializer) == 2
    assert trip.stats is not None and trip.stats.rule_matches["common subexpression"] > 0
    check_and_compare(model, trip.model)


# ---- BatchNormalization opsets and modes ---------------------------------------------------------


def conv_bn_opset(opset: int, outputs: list[str] | None = None, **bn_attrs: object) -> onnx.ModelProto:
    g = Graph(18 + opset)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3), g.weight("b", 3)], "conv", pads=[1, 1, 1, 1])
    g.node("BatchNormalization", ["conv", *g.bn_params("bn", 3)], outputs or ["y"], epsilon=1e-3, **bn_attrs)
    return g.model([2, 2, 5, 5], ["y"], opset=opset, output_shapes=[[2, 3, 5, 5]])


@pytest.mark.parametrize(
    ("opset", "bn_attrs"),
    [
        (7, {}),
        (7, {"spatial": 1}),
        (9, {}),
        (9, {"momentum": 0.8}),
        (14, {}),
        (14, {"training_mode": 0}),
        (15, {}),
        (15, {"training_mode": 0}),
    ],
    ids=[
        "opset7",
        "opset7_spatial1",
        "opset9",
        "opset9_momentum",
        "opset14",
        "opset14_inference",
        "opset15",
        "opset15_inference",
    ],
)
def test_bn_folding_across_batchnorm_opsets(opset: int, bn_attrs: dict) -> None:
    model = conv_bn_opset(opset, **bn_attrs)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1})
    assert trip.fusions == Counter({FOLD: 1})
    folded = initializer_values(trip.model)
    original = initializer_values(model)
    scale = bn_scale(original, "bn", epsilon=1e-3)
    conv = trip.model.graph.node[0]
    np.testing.assert_allclose(folded[conv.input[1]], original["w"] * scale.reshape(-1, 1, 1, 1), rtol=1e-6)
    check_and_compare(model, trip.model)


def test_bn_opset15_training_mode_with_running_stats_outputs_does_not_fold() -> None:
    model = conv_bn_opset(15, ["y", "running_mean", "running_var"], training_mode=1)
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({"Conv": 1, "BatchNormalization": 1})
    assert not trip.fusions
    check_and_compare(model, trip.model)


def test_bn_opset15_training_mode_single_output_does_not_fold() -> None:
    """training_mode=1 with the optional outputs omitted: only the mode flag stops the fold.

    Compared with the reference evaluator: ORT 1.31 crashes (segfault) running this node.
    """
    model = conv_bn_opset(15, ["y", "", ""], training_mode=1)
    session(model)  # ORT loads it; running it is what crashes
    assert_unchanged_reference(model, "portable")
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({"Conv": 1, "BatchNormalization": 1})
    bn = node_named(trip.model, "BatchNormalization")
    assert any(a.name == "training_mode" and a.i == 1 for a in bn.attribute)


def test_bn_opset7_spatial0_does_not_fold() -> None:
    """spatial=0 normalizes per element, not per channel: structure-only (no runtime implements it)."""
    model = conv_bn_opset(7, spatial=0)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1, "BatchNormalization": 1})
    assert not trip.fusions


def test_bn_does_not_fold_when_a_parameter_is_an_overridable_initializer() -> None:
    g = Graph(19)
    g.node("Conv", ["x", g.weight("w", 3, 2, 3, 3)], "conv")
    g.node("BatchNormalization", ["conv", *g.bn_params("bn", 3)], "y")
    g.extra_inputs.append(vi("bn_mean", [3]))
    model = g.model([1, 2, 5, 5], ["y"])
    feeds = random_feeds(model)
    feeds["bn_mean"] = np.array([0.5, -0.5, 1.0], dtype=np.float32)
    assert_unchanged(model, "portable", feeds)


def test_bn_folding_with_a_sparse_constant_node_weight() -> None:
    g = Graph(20)
    dense = (g.rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32)
    dense[np.abs(dense) < 0.2] = 0.0
    flat = np.flatnonzero(dense)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(dense.reshape(-1)[flat], "w"),
        numpy_helper.from_array(flat.astype(np.int64), "w_indices"),
        list(dense.shape),
    )
    g.nodes.append(helper.make_node("Constant", [], ["w"], name="w_const", sparse_value=sparse))
    g.node("Conv", ["x", "w"], "conv")
    g.node("BatchNormalization", ["conv", *g.bn_params("bn", 3)], "y")
    model = g.model([1, 2, 5, 5], ["y"], output_shapes=[[1, 3, 3, 3]])
    onnx.checker.check_model(model)
    run(model, random_feeds(model))  # ORT runs the original fine
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1})  # the sparse Constant is densified and folded
    check_and_compare(model, trip.model)


# ---- the demo model end to end -------------------------------------------------------------------


def test_demo_cnn_fusions_and_verification() -> None:
    model = demo_cnn()
    optimized, report = optimize_model(model)
    assert report.fusions == {
        CONV_BN_RELU: 3,
        CONV_BN_CLIP: 1,
        GEMM_RELU: 1,
    }
    assert report.verification is not None and report.verification.ok
    assert op_types(optimized) == Counter(
        {FUSED_CONV: 4, FUSED_GEMM: 1, "MaxPool": 2, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    )
    clip_params = [
        list(a.floats)
        for n in optimized.graph.node
        for a in n.attribute
        if n.op_type == "FusedConv" and a.name == "activation_params"
    ]
    assert clip_params == [[0.0, 6.0]]
    check_and_compare(model, optimized)
