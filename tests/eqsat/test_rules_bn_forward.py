"""BatchNormalization folded into the FOLLOWING Conv (rules/bn_folding.py, second rule).

    Conv(BN(x), W, b)  ==>  Conv(x, W * s[in], b + sum W * t[in]),   s = gamma / sqrt(var + eps), t = beta - mean * s

Only for an unpadded, ungrouped Conv: a padded border would see BN's shift in the original but zeros after
the fold. (The first rule, BN after the Conv, is covered by test_fusions.py.)
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, initializer, only_node, optimized

FOLD = "BatchNormalization+Conv -> Conv"
FOLD_BIAS = "BatchNormalization+Conv(bias) -> Conv"


def bn_params(g: Graph, channels: int) -> list[str]:
    """gamma, beta, mean, var, far from the identity so a missed scale or shift shows."""
    gamma = g.scale("gamma", channels)
    beta = g.weight("beta", channels)
    mean = g.weight("mean", channels)
    var = g.const("var", g.rng.uniform(0.3, 1.7, channels).astype(np.float32))
    return [gamma, beta, mean, var]


def bn_conv(
    *, dims: int = 2, bias: bool = False, c_in: int = 3, c_out: int = 5, epsilon: float | None = None, **conv: object
) -> onnx.ModelProto:
    """x -> BatchNormalization -> Conv (kernel 3, the given attributes) -> y."""
    g = Graph(seed=dims + 2 * bias)
    x = g.input("x", [2, c_in] + [7] * dims)
    bn_attrs = {} if epsilon is None else {"epsilon": epsilon}
    normalized = g.node("BatchNormalization", [x, *bn_params(g, c_in)], "bn", **bn_attrs)
    group = int(conv.get("group", 1))
    inputs = [normalized, g.weight("w", c_out, c_in // group, *[3] * dims)] + ([g.weight("b", c_out)] if bias else [])
    g.node("Conv", inputs, "y", **conv)
    return g.model(["y"])


@pytest.mark.parametrize(
    ("dims", "bias", "conv"),
    [
        (2, False, {}),
        (2, True, {"pads": [0, 0, 0, 0]}),
        (1, True, {"strides": [2]}),
        (2, False, {"dilations": [2, 2], "auto_pad": "VALID"}),
        (3, True, {}),
    ],
    ids=["2d", "2d_bias_zero_pads", "1d_bias_strided", "2d_dilated_valid", "3d_bias"],
)
def test_batchnorm_before_unpadded_conv_folds_into_it(dims: int, bias: bool, conv: dict) -> None:
    model = bn_conv(dims=dims, bias=bias, **conv)
    trip = optimized(model)
    assert_fired(trip, FOLD_BIAS if bias else FOLD)
    assert op_types(trip.model) == Counter({"Conv": 1})
    assert only_node(trip.model, "Conv").input[0] == "x"
    check_and_compare(model, trip.model)


def test_folded_weight_and_bias_values() -> None:
    model = bn_conv(bias=True, epsilon=1e-2)
    trip = optimized(model)
    conv = only_node(trip.model, "Conv")
    values = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    scale = values["gamma"] / np.sqrt(values["var"] + 1e-2)
    shift = values["beta"] - values["mean"] * scale
    w = values["w"]
    np.testing.assert_allclose(initializer(trip.model, conv.input[1]), w * scale.reshape(1, -1, 1, 1), rtol=1e-6)
    expected_bias = values["b"] + (w * shift.reshape(1, -1, 1, 1)).sum(axis=(1, 2, 3))
    np.testing.assert_allclose(initializer(trip.model, conv.input[2]), expected_bias, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "conv",
    [{"pads": [0, 1, 0, 0]}, {"auto_pad": "SAME_UPPER"}, {"group": 3}],
    ids=["padded_one_side", "auto_pad_same", "grouped"],
)
def test_batchnorm_before_padded_or_grouped_conv_is_kept(conv: dict) -> None:
    model = bn_conv(c_in=3, c_out=6, **conv)
    assert_unchanged(model, FOLD)


def test_batchnorm_with_runtime_statistics_is_kept() -> None:
    """The mean is a graph input, not a constant: nothing can be folded ahead of time."""
    model = bn_conv()
    mean = next(t for t in model.graph.initializer if t.name == "mean")
    model.graph.input.append(onnx.helper.make_tensor_value_info("mean", onnx.TensorProto.FLOAT, list(mean.dims)))
    model.graph.initializer.remove(mean)
    assert_unchanged(model, FOLD)
