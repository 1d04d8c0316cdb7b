"""The seed rewrite rules: BatchNormalization folding and com.microsoft activation fusion.

Positive cases check the op types of the result, the fusion labels, and that ONNX Runtime computes
the same outputs as on the original (rtol 1e-4, atol 1e-5). Negative cases check that the rule does
not fire (the op multiset is unchanged) and that the model still verifies.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import (
    MS_DOMAIN,
    check_and_compare,
    make_model,
    op_types,
    roundtrip,
    with_inferred_outputs,
)
from onnx import TensorProto, helper, numpy_helper

FLOAT32_MIN = float(np.finfo(np.float32).min)
FLOAT32_MAX = float(np.finfo(np.float32).max)

FOLD = "Conv+BatchNormalization -> Conv"
FOLD_T = "ConvTranspose+BatchNormalization -> ConvTranspose"
FUSED_CONV = "com.microsoft::FusedConv"
FUSED_GEMM = "com.microsoft::FusedGemm"


def vi(name: str, shape: list[int | str] | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


class Graph:
    """A tiny graph builder: nodes, initializers (seeded random values) and the input."""

    def __init__(self, seed: int = 0, dtype: type = np.float32) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.extra_inputs: list[onnx.ValueInfoProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, *shape: int, scale: float = 0.3) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(self.dtype))

    def bn_params(self, prefix: str, channels: int) -> list[str]:
        """gamma, beta, mean, var: perturbed away from the identity so folding is a real computation."""
        values = {
            "gamma": 1.0 + 0.3 * self.rng.standard_normal(channels),
            "beta": 0.2 * self.rng.standard_normal(channels),
            "mean": 0.2 * self.rng.standard_normal(channels),
            "var": 0.2 + self.rng.random(channels),
        }
        return [self.const(f"{prefix}_{key}", value.astype(self.dtype)) for key, value in values.items()]

    def node(self, op: str, inputs: list[str], outputs: list[str] | str, **attrs: object) -> str:
        outputs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(helper.make_node(op, inputs, outputs, name=f"{outputs[0]}_node", **attrs))
        return outputs[0]

    def model(
        self,
        x_shape: list[int],
        outputs: list[str],
        opset: int = 17,
        ir_version: int = 9,
        elem: int = TensorProto.FLOAT,
        output_shapes: list[list[int]] | None = None,
    ) -> onnx.ModelProto:
        """The model; output types come from shape inference unless ``output_shapes`` gives them."""
        shapes = output_shapes or [None] * len(outputs)
        model = make_model(
            self.nodes,
            [vi("x", x_shape, elem), *self.extra_inputs],
            [vi(name, shape, elem) for name, shape in zip(outputs, shapes, strict=True)],
            self.inits,
            opset=opset,
            ir_version=ir_version,
        )
        return model if output_shapes else with_inferred_outputs(model)


def conv_bn(
    *,
    op: str = "Conv",
    dims: int = 2,
    c_in: int = 4,
    c_out: int = 6,
    group: int = 1,
    bias: bool = False,
    activation: str | None = None,
    epsilon: float | None = None,
    dtype: type = np.float32,
    seed: int = 0,
) -> onnx.ModelProto:
    """x -> Conv/ConvTranspose -> BatchNormalization [-> activation]; the activation's output is ``y``."""
    g = Graph(seed, dtype)
    kernel = [3] * dims
    if op == "Conv":
        w = g.weight("w", c_out, c_in // group, *kernel)
        attrs = {"pads": [1] * (2 * dims)}
    else:
        w = g.weight("w", c_in, c_out // group, *kernel)
        attrs = {"strides": [2] * dims}
    inputs = ["x", w] + ([g.weight("b", c_out)] if bias else [])
    conv = g.node(op, inputs, "conv", group=group, **attrs)
    bn_attrs = {} if epsilon is None else {"epsilon": epsilon}
    y = g.node("BatchNormalization", [conv, *g.bn_params("bn", c_out)], "bn" if activation else "y", **bn_attrs)
    if activation:
        y = g.node(activation, [y], "y")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return g.model([2, c_in] + [5] * dims, ["y"], elem=elem)


def fused_attrs(model: onnx.ModelProto) -> dict[str, onnx.AttributeProto]:
    fused = [n for n in model.graph.node if n.domain == MS_DOMAIN]
    assert len(fused) == 1
    return {a.name: a for a in fused[0].attribute}


def assert_microsoft_opset(model: onnx.ModelProto) -> None:
    assert any(o.domain == MS_DOMAIN and o.version == 1 for o in model.opset_import)


def assert_unchanged(model: onnx.ModelProto, target: str, feeds: dict | None = None) -> None:
    """The rules must not fire: same ops, no fusion labels, and the model still verifies."""
    trip = roundtrip(model, target=target)
    assert op_types(trip.model) == op_types(model)
    assert not trip.fusions
    check_and_compare(model, trip.model, feeds)


# ---- BatchNormalization folding ------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_conv_bn_folds_into_conv_with_folded_weights(bias: bool) -> None:
    model = conv_bn(bias=bias, epsilon=1e-2)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1})
    assert trip.fusions == Counter({FOLD: 1})
    check_and_compare(model, trip.model)

    # The folded weight and bias are W * s and (b - mean) * s + beta, s = gamma / sqrt(var + eps).
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    gamma, beta, mean, var = (values[f"bn_{k}"].astype(np.float64) for k in ("gamma", "beta", "mean", "var"))
    scale = gamma / np.sqrt(var + 1e-2)
    conv = trip.model.graph.node[0]
    assert len(conv.input) == 3
    folded = {t.name: numpy_helper.to_array(t) for t in trip.model.graph.initializer}
    assert set(folded) == {conv.input[1], conv.input[2]}
    new_w, new_b = folded[conv.input[1]], folded[conv.input[2]]
    assert new_w.dtype == new_b.dtype == np.float32
    np.testing.assert_allclose(new_w, values["w"] * scale.reshape(-1, 1, 1, 1), rtol=1e-6)
    b = values["b"].astype(np.float64) if bias else 0.0
    np.testing.assert_allclose(new_b, (b - mean) * scale + beta, rtol=1e-6, atol=1e-7)
    # Untouched: the conv's own attributes and name.
    assert [a.SerializeToString() for a in conv.attribute] == [
        a.SerializeToString() for a in model.graph.node[0].attribute
    ]
    assert conv.name == "conv_node"
    assert [o.name for o in trip.model.graph.output] == ["y"]


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_conv_bn_relu_portable_keeps_relu_separate(bias: bool) -> None:
    model = conv_bn(bias=bias, activation="Relu")
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1, "Relu": 1})
    assert all(n.domain == "" for n in trip.model.graph.node)
    assert all(o.domain in ("", "ai.onnx") for o in trip.model.opset_import)
    assert trip.fusions == Counter({FOLD: 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_conv_bn_relu_becomes_fused_conv_for_ort(bias: bool) -> None:
    model = conv_bn(bias=bias, activation="Relu")
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({FUSED_CONV: 1})
    assert trip.fusions == Counter({"Conv+BatchNormalization+Relu -> com.microsoft::FusedConv": 1})
    attrs = fused_attrs(trip.model)
    assert attrs["activation"].s == b"Relu"
    assert "activation_params" not in attrs
    assert len(trip.model.graph.node[0].input) == 3  # folded bias always present
    assert_microsoft_opset(trip.model)
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("group", "c_in", "c_out"),
    [(2, 4, 6), (4, 4, 4), (6, 6, 12)],
    ids=["grouped", "depthwise", "depthwise_multiplier"],
)
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_bn_folding_with_grouped_and_depthwise_conv(group: int, c_in: int, c_out: int, bias: bool) -> None:
    model = conv_bn(group=group, c_in=c_in, c_out=c_out, bias=bias, seed=group)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"Conv": 1})
    assert trip.fusions == Counter({FOLD: 1})
    assert {a.name: a.i for a in trip.model.graph.node[0].attribute if a.name == "group"} == {"group": group}
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_bn_folding_with_conv_transpose(group: int, bias: bool) -> None:
    model = conv_bn(op="ConvTranspose", group=group, c_in=4, c_out=6, bias=bias, seed=10 + group)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({"ConvTranspose": 1})
    assert trip.fusions == Counter({FOLD_T: 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("dims", [1, 3], ids=["conv1d", "conv3d"])
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_bn_folding_with_1d_and_3d_convolutions(dims: int, op: str, bias: bool) -> None:
    model = conv_bn(op=op, dims=dims, c_in=2, c_out=4, group=2 if op == "ConvTranspose" else 1, bias=bias)
    trip = roundtrip(model, target="portable")
    assert op_types(trip.model) == Counter({op: 1})
    assert trip.fusions == Counter({f"{op}+BatchNormalization -> {op}": 1})
    check_and_compare(model, trip.model)


def test_conv_transpose_bn_relu_folds_but_is_not_fused_for_ort() -> None:
    model = conv_bn(op="ConvTranspose", group=2, activation="Relu")
    trip = roundtrip(model, target="ort")
    assert op_types(trip.model) == Counter({"ConvTranspose": 1, "Relu": 1})
    assert trip.fusions == Counter({FOLD_T: 1})
    check_and_compare(model, trip.model)


def constant_node(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(value))


def test_folded_weight_name_does_not_collide_with_an_original_tensor_name() -> None:
    g = Graph(20)
    g.node("Conv", ["x", g.weight("w", 3, 2, 1, 1)], "conv")
    g.node("BatchNormalization", ["conv", *g.bn_params("bn", 3)], "y")
    g.node("Relu", ["x"], "w_scale_conv_weight")  # the name the folded weight would get
    model = g.model([1, 2, 3, 3], ["y", "w_scale_conv_weight"])
    trip = roundtrip(model, target="portable")
    assert trip.fusions == Counter({FOLD: 1})
    check_and_compare(model, trip.model)
