"""BatchNormalization folded into the Gemm that feeds it (rules/bn_folding.py): PyTorch's Linear followed by
BatchNorm1d, whose [N, C] normalization is per output column.

    BN(Gemm(a, B, c))  ==>  Gemm(a, B * s[columns], (c - mean) * s + beta),   s = gamma / sqrt(var + eps)
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, initializer, only_node, optimized

FOLD = "Gemm+BatchNormalization -> Gemm"
FOLD_BIAS = "Gemm(bias)+BatchNormalization -> Gemm"


def gemm_bn(*, bias: tuple[int, ...] | None = (6,), epsilon: float = 1e-5, **gemm: object) -> onnx.ModelProto:
    """x [4, 3] -> Gemm (to 6 columns, the given attributes) -> BatchNormalization -> y."""
    g = Graph(seed=3)
    x = g.input("x", [4, 3])
    weight = g.weight("w", 6, 3) if gemm.get("transB") else g.weight("w", 3, 6)
    inputs = [x, weight] + ([g.weight("c", *bias)] if bias is not None else [])
    product = g.node("Gemm", inputs, "product", **gemm)
    params = [g.scale("gamma", 6), g.weight("beta", 6), g.weight("mean", 6)]
    params.append(g.const("var", g.rng.uniform(0.3, 1.7, 6).astype(np.float32)))
    g.node("BatchNormalization", [product, *params], "y", epsilon=epsilon)
    return g.model(["y"])


@pytest.mark.parametrize(
    ("bias", "gemm"),
    [((6,), {}), (None, {}), ((6,), {"transB": 1}), ((1, 6), {"transA": 0, "alpha": 1.0}), ((4, 6), {"transB": 1})],
    ids=["bias", "no_bias", "trans_b", "row_bias", "full_bias_trans_b"],
)
def test_batchnorm_after_a_gemm_folds_into_it(bias: tuple[int, ...] | None, gemm: dict) -> None:
    model = gemm_bn(bias=bias, **gemm)
    trip = optimized(model)
    assert_fired(trip, FOLD if bias is None else FOLD_BIAS)
    assert op_types(trip.model) == Counter({"Gemm": 1})
    check_and_compare(model, trip.model)


def test_folded_gemm_values() -> None:
    model = gemm_bn(epsilon=1e-2, transB=1)
    trip = optimized(model)
    gemm = only_node(trip.model, "Gemm")
    values = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    scale = values["gamma"] / np.sqrt(values["var"] + 1e-2)
    np.testing.assert_allclose(initializer(trip.model, gemm.input[1]), values["w"] * scale[:, None], rtol=1e-6)
    expected = (values["c"] - values["mean"]) * scale + values["beta"]
    np.testing.assert_allclose(initializer(trip.model, gemm.input[2]), expected, rtol=1e-5, atol=1e-6)


def test_a_scaled_gemm_keeps_its_batchnorm() -> None:
    """alpha or beta other than 1 scales the product or the bias: the fold assumes neither."""
    assert_unchanged(gemm_bn(alpha=0.5), FOLD_BIAS)
    assert_unchanged(gemm_bn(beta=2.0), FOLD_BIAS)
