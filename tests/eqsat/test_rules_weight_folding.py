"""Constant scales and shifts folded into Conv, Gemm and MatMul weights (rules/weight_folding.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, optimized

from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.rules import RuleSchedule, weight_folding
from onnxsat.eqsat.saturate import SaturationLimits, saturate

M = 4  # output channels / columns


def conv_then(
    op: str, shape: tuple[int, ...], *, bias: bool, const_first: bool = False, dims: int = 2, batch: int | str = 2
) -> Graph:
    """x -> Conv (M filters, kernel 3, padded) -> op with a constant of ``shape`` -> y."""
    g = Graph(seed=len(shape) + 3 * bias)
    x = g.input("x", [batch, 3] + [6] * dims)
    inputs = [x, g.weight("w", M, 3, *[3] * dims)] + ([g.weight("b", M)] if bias else [])
    conv = g.node("Conv", inputs, "conv", pads=[1] * (2 * dims))
    c = g.scale("s", *shape) if op == "Mul" else g.weight("s", *shape)
    g.node(op, [c, conv] if const_first else [conv, c], "y")
    return g


@pytest.mark.parametrize(
    ("op", "shape", "bias", "const_first", "dims", "rule"),
    [
        ("Mul", (M, 1, 1), False, False, 2, "Conv+Mul(per channel) -> Conv"),
        ("Mul", (1, M, 1, 1), True, True, 2, "Conv(bias)+Mul(per channel) -> Conv"),
        ("Mul", (1,), True, False, 2, "Conv(bias)+Mul(scalar) -> Conv"),
        ("Mul", (M, 1), True, False, 1, "Conv(bias)+Mul(per channel) -> Conv"),
        ("Add", (M, 1, 1), True, True, 2, "Conv(bias)+Add(per channel) -> Conv"),
        ("Add", (1, M, 1, 1, 1), False, False, 3, "Conv+Add(per channel) -> Conv"),
        ("Add", (), False, True, 2, "Conv+Add(scalar) -> Conv"),
        ("Sub", (1, M, 1, 1), True, False, 2, "Conv(bias)+Sub(per channel) -> Conv"),
        ("Sub", (M, 1, 1), False, False, 2, "Conv+Sub(per channel) -> Conv"),
    ],
    ids=["mul_m11", "mul_1m11_bias_swapped", "mul_scalar_bias", "mul_1d", "add_m11_bias_swapped", "add_3d",
         "add_scalar_swapped", "sub_1m11_bias", "sub_m11"],
)  # fmt: skip
def test_conv_output_constant_folds_into_weights(
    op: str, shape: tuple[int, ...], bias: bool, const_first: bool, dims: int, rule: str
) -> None:
    model = conv_then(op, shape, bias=bias, const_first=const_first, dims=dims).model(["y"])
    trip = optimized(model)
    assert_fired(trip, rule)
    assert op_types(trip.model) == Counter({"Conv": 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_conv_output_constant_folds_with_a_dynamic_batch(op: str) -> None:
    """Paddle2ONNX writes every Conv's bias as Conv -> Add([1, C, 1, 1]) with the batch dynamic: the sum keeps
    the Conv's shape whatever the batch is, so it folds (and the BatchNormalization after it then does too)."""
    model = conv_then(op, (1, M, 1, 1), bias=False, batch="N").model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"Conv": 1})
    check_and_compare(model, trip.model)


def test_a_constant_minus_the_conv_output_is_kept() -> None:
    """c - Conv(x) negates the convolution: no bias shift computes it."""
    assert_unchanged(conv_then("Sub", (1, M, 1, 1), bias=True, const_first=True).model(["y"]))


def test_a_constant_that_may_grow_a_dynamic_batch_is_kept() -> None:
    """[2, M, 1, 1] against a batch of N: the sum has a batch of 2 when N is 1, so it is not the Conv's shape."""
    assert_unchanged(conv_then("Add", (2, M, 1, 1), bias=True, batch="N").model(["y"]))


@pytest.mark.parametrize(
    "shape", [(1, 1, 1, 6), (6, 1), (2, 1, 1, 1)], ids=["last_axis", "c1_on_2d_conv", "batch_axis"]
)
def test_conv_mul_by_a_constant_along_a_non_channel_axis_is_kept(shape: tuple[int, ...]) -> None:
    """The output is [2, M, 6, 6]: [6, 1] broadcasts along the height, [2, 1, 1, 1] along the batch."""
    model = conv_then("Mul", shape, bias=True).model(["y"])
    trip = assert_unchanged(model)
    assert not any(trip.stats.rule_matches[r] for r in trip.stats.rule_matches if r.startswith("Conv"))


def test_conv_add_when_the_conv_output_has_another_reader_is_kept() -> None:
    g = conv_then("Add", (M, 1, 1), bias=True)
    g.node("Relu", ["conv"], "other")
    assert_unchanged(g.model(["y", "other"]), "Conv(bias)+Add(per channel) -> Conv")


# ---- Gemm ----------------------------------------------------------------------------------------


def gemm_then(op: str, shape: tuple[int, ...], *, bias: bool, const_first: bool = False, **attrs: object) -> Graph:
    g = Graph(seed=len(shape) + 5 * bias)
    x = g.input("x", [3, 5])
    trans_b = int(attrs.get("transB", 0))
    w = g.weight("w", *((M, 5) if trans_b else (5, M)))
    gemm = g.node("Gemm", [x, w] + ([g.weight("c", M)] if bias else []), "gemm", **attrs)
    c = g.scale("s", *shape) if op == "Mul" else g.weight("s", *shape)
    g.node(op, [c, gemm] if const_first else [gemm, c], "y")
    return g


@pytest.mark.parametrize(
    ("op", "shape", "bias", "const_first", "rule"),
    [
        ("Mul", (), False, False, "Gemm+Mul(per column) -> Gemm"),
        ("Mul", (M,), True, True, "Gemm(bias)+Mul(per column) -> Gemm"),
        ("Add", (M,), False, True, "Gemm+Add -> Gemm"),
        ("Add", (3, M), True, False, "Gemm(bias)+Add -> Gemm"),
    ],
    ids=["mul_scalar", "mul_n_bias_swapped", "add_n_swapped", "add_mn_bias"],
)
def test_gemm_output_constant_folds_into_weights(
    op: str, shape: tuple[int, ...], bias: bool, const_first: bool, rule: str
) -> None:
    model = gemm_then(op, shape, bias=bias, const_first=const_first).model(["y"])
    trip = optimized(model)
    assert_fired(trip, rule)
    assert op_types(trip.model) == Counter({"Gemm": 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("op", "shape", "attrs"),
    [("Mul", (M,), {"transB": 1}), ("Mul", (3, 1), {}), ("Add", (M,), {"beta": 0.5})],
    ids=["mul_transposed_b", "mul_per_row", "add_beta"],
)
def test_gemm_near_misses_are_kept(op: str, shape: tuple[int, ...], attrs: dict) -> None:
    model = gemm_then(op, shape, bias=True, **attrs).model(["y"])
    assert_unchanged(model, "Gemm(bias)+Mul(per column) -> Gemm", "Gemm(bias)+Add -> Gemm")


# ---- MatMul and scalar input scales ---------------------------------------------------------------


def test_matmul_times_a_column_scale_folds_into_the_weight() -> None:
    g = Graph(seed=6)
    product = g.node("MatMul", [g.input("x", [2, 3, 5]), g.weight("w", 5, M)], "product")
    g.node("Mul", [product, g.scale("s", 1, M)], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, "MatMul+Mul(per column) -> MatMul")
    assert op_types(trip.model) == Counter({"MatMul": 1})
    check_and_compare(model, trip.model)


def test_matmul_times_a_row_scale_is_kept() -> None:
    g = Graph(seed=6)
    product = g.node("MatMul", [g.input("x", [3, 5]), g.weight("w", 5, M)], "product")
    g.node("Mul", [product, g.scale("s", 3, 1)], "y")
    assert_unchanged(g.model(["y"]), "MatMul+Mul(per column) -> MatMul")


@pytest.mark.parametrize(("consumer", "scale_first"), [("MatMul", True), ("Conv", False)])
def test_scalar_input_scale_moves_into_the_weight(consumer: str, scale_first: bool) -> None:
    g = Graph(seed=7)
    if consumer == "MatMul":
        x, w = g.input("x", [3, 5]), g.weight("w", 5, M)
    else:
        x, w = g.input("x", [1, 3, 6, 6]), g.weight("w", M, 3, 3, 3)
    s = g.scale("s", 1)
    scaled = g.node("Mul", [s, x] if scale_first else [x, s], "scaled")
    attrs = {"pads": [1, 1, 1, 1]} if consumer == "Conv" else {}
    g.node(consumer, [scaled, w] + ([g.weight("b", M)] if consumer == "Conv" else []), "y", **attrs)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, f"Mul(scalar)+{consumer} -> {consumer}")
    assert op_types(trip.model) == Counter({consumer: 1})
    check_and_compare(model, trip.model)


def test_non_scalar_input_scale_before_conv_is_kept() -> None:
    g = Graph(seed=7)
    scaled = g.node("Mul", [g.input("x", [1, 3, 6, 6]), g.scale("s", 3, 1, 1)], "scaled")
    g.node("Conv", [scaled, g.weight("w", M, 3, 3, 3)], "y", pads=[1, 1, 1, 1])
    assert_unchanged(g.model(["y"]), "Mul(scalar)+Conv -> Conv")


DIVERGES = (
    "BUG: {what} puts x op c into x's own e-class (noop_removal), and {rule} matches through that cycle on "
    "every pass with a new derived constant, so the rules never reach a fixpoint (the e-graph grows doubly "
    "exponentially; the pipeline stops only at the memory limit)"
)


def test_conv_plus_zero_per_channel_reaches_a_fixpoint() -> None:
    g = Graph()
    conv = g.node("Conv", [g.input("x", [1, 3, 5, 5]), g.weight("w", M, 3, 3, 3)], "conv")
    g.node("Neg", [g.node("Add", [conv, g.const("z", np.zeros((M, 1, 1), np.float32))], "shifted")], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"Conv": 1, "Neg": 1})
    check_and_compare(model, trip.model)


def test_input_times_one_before_matmul_reaches_a_fixpoint() -> None:
    g = Graph()
    scaled = g.node("Mul", [g.input("x", [6, 4]), g.const("one", np.ones(1, np.float32))], "scaled")
    g.node("Neg", [g.node("MatMul", [scaled, g.weight("w", 4, 5)], "product")], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"MatMul": 1, "Neg": 1})
    check_and_compare(model, trip.model)


def test_weights_are_scaled_not_only_reordered() -> None:
    """The folded Conv weight is W * s per output channel and the bias b * s (values, not just op counts)."""
    model = conv_then("Mul", (M, 1, 1), bias=True).model(["y"])
    trip = optimized(model)
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    folded = {t.name: onnx.numpy_helper.to_array(t) for t in trip.model.graph.initializer}
    (conv,) = trip.model.graph.node
    s = values["s"].reshape(-1)
    np.testing.assert_allclose(folded[conv.input[1]], values["w"] * s.reshape(-1, 1, 1, 1), rtol=1e-6)
    np.testing.assert_allclose(folded[conv.input[2]], values["b"] * s, rtol=1e-6)


def test_folds_join_each_node_to_its_producer_only() -> None:
    """Each block folds its own scale once: the rules read the Mul and the MatMul or Conv it scales from
    one-node relations joined through the tensor between them. Written as node patterns, the MatMul rule
    matched each block's Mul 480 times (8 s for these 60 blocks), the planner binding both nodes from the
    whole Node table. A product scaled by another product (no static operand) folds nothing."""
    blocks = 60
    g = Graph()
    outputs = []
    for i in range(blocks):
        x = g.input(f"x{i}", [2, 3])
        product = g.node("MatMul", [x, g.weight(f"w{i}", 3, M)], f"p{i}")
        scaled = g.node("Mul", [g.scale(f"s{i}", M), product], f"m{i}")
        conv = g.node("Conv", [g.input(f"c{i}", [1, 3, 4, 4]), g.weight(f"k{i}", M, 3, 1, 1)], f"conv{i}")
        shifted = g.node("Add", [conv, g.weight(f"t{i}", M, 1, 1)], f"a{i}")
        dynamic = g.node("MatMul", [x, g.input(f"v{i}", [3, M])], f"d{i}")
        outputs += [g.node("Mul", [scaled, dynamic], f"y{i}"), shifted]
    model = g.model(outputs)
    encoded = encode(model, onnx.shape_inference.infer_shapes(model))
    stats = saturate(encoded.egraph, RuleSchedule(simplify=(weight_folding,)), SaturationLimits())
    assert stats.stop_reason == "saturated"
    assert stats.rule_matches["MatMul+Mul(per column) -> MatMul"] == blocks
    assert stats.rule_matches["Conv+Add(per channel) -> Conv"] == blocks
    folded = {name: n for name, n in stats.rule_matches.items() if n and "->" in name}
    assert set(folded) == {"MatMul+Mul(per column) -> MatMul", "Conv+Add(per channel) -> Conv"}
