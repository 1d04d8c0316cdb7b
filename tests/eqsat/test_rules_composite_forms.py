"""Ops written out elementwise become the one op (rules/composite_forms.py, rules/activation_fusion.py):
layer norms (layer_norm_sites.py: Flax's variance by moments and the definition's form, with or without a
bias), GELUs (gelu_sites.py, in any grouping of the product) and hard sigmoids and swishes (hard_sites.py: relu6 as
Clip, Min/Max or Relu/Min, the 1/6 as Div or Mul). Near misses keep every op, and every result computes what the
original does (ORT, optimizations off)."""

from __future__ import annotations

import numpy as np
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import numpy_helper
from rule_builders import Graph, assert_fired, assert_not_fired, assert_unchanged, only_node, optimized

FUSED = "elementwise layer norm -> LayerNormalization"
GELU = "elementwise GELU -> Gelu"
MS_GELU = "elementwise GELU -> com.microsoft::Gelu"
D = 8


def layer_norm(
    *,
    form: str = "moments",
    opset: int = 18,
    bias: bool = True,
    axis: int = 2,
    scale_shape: tuple[int, ...] = (D,),
    eps_input: bool = False,
    clamp: str = "Max",
) -> Graph:
    """x [B, 4, D] -> a written-out layer norm -> y; ``form`` "moments" (Flax), "mul" or "pow" (the definition)."""
    g = Graph()
    x = g.input("x", ["B", 4, D])

    def mean(t: str, name: str) -> str:
        if opset >= 18:
            return g.node("ReduceMean", [t, g.ints(f"{name}_axes", [axis])], name, keepdims=1)
        return g.node("ReduceMean", [t], name, axes=[axis], keepdims=1)

    mu = mean(x, "mu")
    c = g.node("Sub", [x, mu], "c")
    if form == "moments":
        m2 = mean(g.node("Mul", [x, x], "xx"), "m2")
        var = g.node("Sub", [m2, g.node("Mul", [mu, mu], "mu2")], "var0")
        if clamp == "Max":
            var = g.node("Max", [var, g.const("zero", np.array(0.0, np.float32))], "var")
        elif clamp == "Relu":
            var = g.node("Relu", [var], "var")
    elif form == "mul":
        var = mean(g.node("Mul", [c, c], "cc"), "var")
    else:
        var = mean(g.node("Pow", [c, g.const("two", np.array(2.0, np.float32))], "cc"), "var")
    eps = g.input("eps", []) if eps_input else g.const("eps", np.array(1e-5, np.float32))
    s = g.node("Sqrt", [g.node("Add", [var, eps], "ve")], "s")
    n = g.node("Div", [c, s], "n")
    scaled = g.node("Mul", [g.scale("gamma", *scale_shape), n], "scaled")
    if bias:
        g.node("Add", [scaled, g.weight("beta", D)], "y")
    else:
        g.node("Identity", [scaled], "y")
    return g


@pytest.mark.parametrize(
    ("form", "opset", "bias", "clamp"),
    [
        ("moments", 18, True, "Max"),
        ("moments", 17, True, "Relu"),
        ("moments", 23, False, "none"),
        ("mul", 17, True, "Max"),
        ("pow", 18, False, "Max"),
    ],
    ids=["flax_opset18", "moments_relu_opset17", "moments_unclamped_no_bias", "definition_mul", "definition_pow"],
)
def test_written_out_layer_norm_is_one_op(form: str, opset: int, bias: bool, clamp: str) -> None:
    model = layer_norm(form=form, opset=opset, bias=bias, clamp=clamp).model(["y"], opset=opset)
    trip = optimized(model)
    assert_fired(trip, FUSED)
    assert trip.model is not None
    ops = op_types(trip.model)
    assert ops["LayerNormalization"] == 1 and not ops["ReduceMean"] and not ops["Sqrt"], dict(ops)
    node = only_node(trip.model, "LayerNormalization")
    assert len(node.input) == (3 if bias else 2)
    (epsilon,) = [a.f for a in node.attribute if a.name == "epsilon"]
    assert epsilon == pytest.approx(1e-5)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4, D)) * 2 + 1).astype(np.float32)
    check_and_compare(model, trip.model, {"x": x})


def test_a_negative_axis_names_the_last_axis_too() -> None:
    model = layer_norm(axis=-1).model(["y"], opset=18)
    assert_fired(optimized(model), FUSED)


@pytest.mark.parametrize(
    ("kwargs", "opset"),
    [
        ({"axis": 1}, 18),  # a mean over another axis: not LayerNormalization(axis=-1)
        ({"scale_shape": (1, 1, D)}, 18),  # ONNX Runtime's kernel takes a [D] scale only
        ({"eps_input": True}, 18),  # epsilon is an attribute: it must be a constant
        ({}, 16),  # LayerNormalization is standard from opset 17
    ],
    ids=["other_axis", "scale_not_1d", "eps_not_constant", "opset16"],
)
def test_near_misses_stay(kwargs: dict, opset: int) -> None:
    model = layer_norm(form="mul", opset=opset, **kwargs).model(["y"], opset=opset)
    assert_unchanged(model, FUSED)


def test_a_variance_of_another_mean_stays() -> None:
    """The variance must be taken around the same mean the numerator subtracts."""
    g = Graph()
    x = g.input("x", [2, 4, D])
    mu = g.node("ReduceMean", [x], "mu", axes=[2], keepdims=1)
    other = g.node("ReduceMean", [g.node("Neg", [x], "nx")], "other", axes=[2], keepdims=1)
    c = g.node("Sub", [x, mu], "c")
    c2 = g.node("Sub", [x, other], "c2")
    var = g.node("ReduceMean", [g.node("Mul", [c2, c2], "cc")], "var", axes=[2], keepdims=1)
    s = g.node("Sqrt", [g.node("Add", [var, g.const("eps", np.array(1e-5, np.float32))], "ve")], "s")
    g.node("Mul", [g.node("Div", [c, s], "n"), g.scale("gamma", D)], "y")
    assert_unchanged(g.model(["y"], opset=17), FUSED)


def gelu(grouping: str = "x*a*half", *, scale: str = "div", half: float = 0.5, sqrt2: float = 2**0.5) -> Graph:
    """x [2, 16] -> a written-out GELU -> y; ``grouping`` of the product of x, a = 1 + erf(.) and 0.5."""
    g = Graph()
    x = g.input("x", [2, 16])
    if scale == "div":
        inner = g.node("Div", [x, g.const("sqrt2", np.array(sqrt2, np.float32))], "inner")
    else:
        inner = g.node("Mul", [g.const("rsqrt2", np.array(1 / sqrt2, np.float32)), x], "inner")
    a = g.node("Add", [g.const("one", np.array(1.0, np.float32)), g.node("Erf", [inner], "erf")], "a")
    h = g.const("half", np.array(half, np.float32))
    if grouping == "x*a*half":
        g.node("Mul", [g.node("Mul", [x, a], "xa"), h], "y")
    elif grouping == "a*half*x":
        g.node("Mul", [x, g.node("Mul", [h, a], "ah")], "y")
    else:  # a * (x * half)
        g.node("Mul", [a, g.node("Mul", [x, h], "xh")], "y")
    return g


@pytest.mark.parametrize("grouping", ["x*a*half", "a*half*x", "a*(x*half)"])
@pytest.mark.parametrize("scale", ["div", "mul"])
def test_written_out_gelu_is_one_op(grouping: str, scale: str) -> None:
    model = gelu(grouping, scale=scale).model(["y"], opset=20)
    trip = optimized(model)
    assert_fired(trip, GELU)
    assert op_types(trip.model) == {"Gelu": 1}
    x = np.linspace(-6, 6, 32, dtype=np.float32).reshape(2, 16)
    check_and_compare(model, trip.model, {"x": x})


def test_before_opset_20_the_ort_target_takes_microsoft_gelu_over_the_folded_half() -> None:
    """Weight folding moves the 0.5 into the next MatMul's weights, which hid the GELU from ONNX Runtime."""
    g = gelu()
    g.node("MatMul", ["y", g.weight("w", 16, 4)], "z")
    model = g.model(["z"], opset=17)
    trip = optimized(model, target="ort")
    assert_fired(trip, MS_GELU)
    assert op_types(trip.model) == {"com.microsoft::Gelu": 1, "MatMul": 1}
    check_and_compare(model, trip.model)
    assert_unchanged(gelu().model(["y"], opset=17), GELU, MS_GELU)  # the portable target has no Gelu before 20


@pytest.mark.parametrize(
    "kwargs",
    [{"half": 0.6}, {"sqrt2": 1.5}],
    ids=["not_half", "not_sqrt2"],
)
def test_gelu_near_misses_stay(kwargs: dict) -> None:
    assert_unchanged(gelu(**kwargs).model(["y"], opset=20), GELU, MS_GELU, target="ort")


def tanh_gelu(cube: str = "pow") -> Graph:
    """x [2, 16] -> 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> y (``gelu_new``)."""
    g = Graph()
    x = g.input("x", [2, 16])
    if cube == "pow":
        cubed = g.node("Pow", [x, g.const("three", np.array(3.0, np.float32))], "cubed")
    else:
        cubed = g.node("Mul", [x, g.node("Mul", [x, x], "sq")], "cubed")
    inner = g.node("Add", [x, g.node("Mul", [cubed, g.const("k", np.array(0.044715, np.float32))], "kc")], "inner")
    scale = g.const("s", np.array((2 / np.pi) ** 0.5, np.float32))
    t = g.node("Tanh", [g.node("Mul", [scale, inner], "scaled")], "t")
    a = g.node("Add", [t, g.const("one", np.array(1.0, np.float32))], "a")
    g.node("Mul", [g.node("Mul", [g.const("half", np.array(0.5, np.float32)), x], "hx"), a], "y")
    return g


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_the_tanh_approximation_is_fast_gelu_or_tanh_gelu(cube: str) -> None:
    model = tanh_gelu(cube).model(["y"], opset=17)
    trip = optimized(model, target="ort")
    assert op_types(trip.model) == {"com.microsoft::FastGelu": 1}
    x = np.linspace(-6, 6, 32, dtype=np.float32).reshape(2, 16)
    check_and_compare(model, trip.model, {"x": x})
    model20 = tanh_gelu(cube).model(["y"], opset=20)
    trip = optimized(model20)
    assert op_types(trip.model) == {"Gelu": 1}
    (attr,) = only_node(trip.model, "Gelu").attribute
    assert (attr.name, attr.s) == ("approximate", b"tanh")
    check_and_compare(model20, trip.model, {"x": x})


HARD_SIGMOID = "elementwise hard sigmoid -> HardSigmoid"
HARD_SWISH = "elementwise hard swish -> x * HardSigmoid"
HARD_SWISH_OP = "elementwise hard swish -> HardSwish"


def hard(
    *, swish: bool = True, relu6: str = "clip", sixth: str = "div", grouping: str = "(x*r)/6", three: float = 3.0,
    opset: int = 12,
) -> Graph:  # fmt: skip
    """x [2, 8, 4, 4] -> relu6(x + 3) / 6 (``swish``: times x) -> y, as Paddle2ONNX, Keras and JAX write them."""
    g = Graph()
    x = g.input("x", [2, 8, 4, 4])
    a = g.node("Add", [x, g.const("three", np.array(three, np.float32))], "a")
    zero, six = g.const("zero", np.array(0.0, np.float32)), g.const("six", np.array(6.0, np.float32))
    if relu6 == "clip" and opset >= 11:
        r = g.node("Clip", [a, zero, six], "r")
    elif relu6 == "clip":
        r = g.node("Clip", [a], "r", min=0.0, max=6.0)
    elif relu6 == "minmax":
        r = g.node("Min", [g.node("Max", [a, zero], "lo"), six], "r")
    else:
        r = g.node("Min", [six, g.node("Relu", [a], "lo")], "r")

    def divided(t: str, name: str) -> str:
        if sixth == "div":
            return g.node("Div", [t, g.const(f"{name}_6", np.array(6.0, np.float32))], name)
        return g.node("Mul", [g.const(f"{name}_6", np.array(1 / 6, np.float32)), t], name)

    if not swish:
        g.node("Identity", [divided(r, "gate")], "y")
    elif grouping == "(x*r)/6":
        g.node("Identity", [divided(g.node("Mul", [x, r], "xr"), "xr6")], "y")
    else:
        g.node("Identity", [g.node("Mul", [divided(r, "gate"), x], "xg")], "y")
    return g


@pytest.mark.parametrize("relu6", ["clip", "minmax", "relu"])
@pytest.mark.parametrize("sixth", ["div", "mul"])
@pytest.mark.parametrize("grouping", ["(x*r)/6", "x*(r/6)"])
def test_written_out_hard_swish_is_x_times_hard_sigmoid(relu6: str, sixth: str, grouping: str) -> None:
    """Paddle2ONNX's hard swish (Add, Clip, Mul, Div: four passes) is two before opset 14."""
    model = hard(relu6=relu6, sixth=sixth, grouping=grouping).model(["y"], opset=12)
    trip = optimized(model)
    assert_fired(trip, HARD_SWISH)
    assert op_types(trip.model) == {"HardSigmoid": 1, "Mul": 1}
    x = np.linspace(-8, 8, 256, dtype=np.float32).reshape(2, 8, 4, 4)  # both bends and the flat parts
    check_and_compare(model, trip.model, {"x": x})


def test_a_hard_sigmoid_alone_and_clip_bounds_as_attributes() -> None:
    """The gate of a squeeze-excitation block (relu6(x + 3) / 6 alone), Clip's bounds as attributes (opset 6-10)."""
    model = hard(swish=False, opset=10).model(["y"], opset=10)
    trip = optimized(model)
    assert_fired(trip, HARD_SIGMOID)
    assert op_types(trip.model) == {"HardSigmoid": 1}
    check_and_compare(model, trip.model, {"x": np.linspace(-8, 8, 256, dtype=np.float32).reshape(2, 8, 4, 4)})


def test_from_opset_14_hard_swish_is_one_op_and_pytorch_s_hard_sigmoid_form_too() -> None:
    model = hard().model(["y"], opset=14)
    trip = optimized(model)
    assert_fired(trip, HARD_SWISH_OP)
    assert op_types(trip.model) == {"HardSwish": 1}
    check_and_compare(model, trip.model, {"x": np.linspace(-8, 8, 256, dtype=np.float32).reshape(2, 8, 4, 4)})
    g = Graph()  # PyTorch before opset 14: x * HardSigmoid(x; 1/6, 0.5)
    g.node("Mul", [g.input("x", [2, 8]), g.node("HardSigmoid", ["x"], "h", alpha=1 / 6, beta=0.5)], "y")
    trip = optimized(g.model(["y"], opset=14))
    assert op_types(trip.model) == {"HardSwish": 1}


@pytest.mark.parametrize("case", ["not_3", "other_x", "not_6"])
def test_hard_swish_near_misses_stay(case: str) -> None:
    if case == "other_x":  # (z * relu6(x + 3)) / 6 with z not x
        g = Graph()
        a = g.node("Add", [g.input("x", [2, 8]), g.const("three", np.array(3.0, np.float32))], "a")
        r = g.node(
            "Clip", [a, g.const("zero", np.array(0.0, np.float32)), g.const("six", np.array(6.0, np.float32))], "r"
        )
        g.node("Div", [g.node("Mul", [g.input("z", [2, 8]), r], "zr"), g.const("d6", np.array(6.0, np.float32))], "y")
        model = g.model(["y"], opset=14)
    else:
        model = hard(three=2.0 if case == "not_3" else 3.0, sixth="div").model(["y"], opset=14)
        if case == "not_6":
            for tensor in model.graph.initializer:
                if tensor.name == "xr6_6":
                    tensor.CopyFrom(numpy_helper.from_array(np.array(5.0, np.float32), "xr6_6"))
    trip = optimized(model)
    assert_not_fired(trip, HARD_SIGMOID, HARD_SWISH, HARD_SWISH_OP)
    assert not {"HardSigmoid", "HardSwish"} & set(op_types(trip.model))
    check_and_compare(model, trip.model)
