"""Matrix products rewritten into Gemm (rules/linear.py): MatMul+Add -> Gemm, Transpose folded into Gemm."""

from __future__ import annotations

from collections import Counter

import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import TensorProto
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from rule_builders import Graph, assert_fired, assert_unchanged, int_attr, only_node, optimized

MATMUL_ADD = "MatMul+Add -> Gemm"
TRANSPOSE_A = "Transpose+Gemm(A) -> Gemm"
TRANSPOSE_B = "Transpose+Gemm(B) -> Gemm"


def matmul_add(bias_shape: tuple[int, ...], *, bias_first: bool = False, x_shape: tuple[int, ...] = (3, 5)) -> Graph:
    g = Graph(seed=len(bias_shape))
    product = g.node("MatMul", [g.input("x", list(x_shape)), g.weight("w", 5, 4)], "product")
    c = g.weight("c", *bias_shape)
    g.node("Add", [c, product] if bias_first else [product, c], "y")
    return g


@pytest.mark.parametrize(
    ("bias_shape", "bias_first"),
    [((4,), False), ((1, 4), True), ((3, 1), False), ((), False)],
    ids=["n", "1n_swapped", "m1", "scalar"],
)
def test_matmul_add_becomes_one_gemm(bias_shape: tuple[int, ...], bias_first: bool) -> None:
    model = matmul_add(bias_shape, bias_first=bias_first).model(["y"])
    trip = optimized(model)
    assert_fired(trip, MATMUL_ADD)
    assert op_types(trip.model) == Counter({"Gemm": 1})
    gemm = only_node(trip.model, "Gemm")
    assert list(gemm.input) == ["x", "w", "c"]
    check_and_compare(model, trip.model)


def test_matmul_add_with_a_rank_3_input_is_kept() -> None:
    assert_unchanged(matmul_add((4,), x_shape=(2, 3, 5)).model(["y"]), MATMUL_ADD)


def test_matmul_add_whose_sum_broadcasts_wider_is_kept() -> None:
    assert_unchanged(matmul_add((2, 3, 4)).model(["y"]), MATMUL_ADD)


def test_matmul_add_when_the_product_has_another_reader_is_kept() -> None:
    g = matmul_add((4,))
    g.node("Relu", ["product"], "other")
    assert_unchanged(g.model(["y", "other"]), MATMUL_ADD)


def test_double_matmul_add_is_kept() -> None:
    """is_float32 guard: a float64 product stays MatMul + Add."""
    g = Graph()
    x = g.input("x", [3, 5], TensorProto.DOUBLE)
    product = g.node("MatMul", [x, g.const("w", g.rng.uniform(0.2, 0.8, (5, 4)))], "product")
    g.node("Add", [product, g.const("c", g.rng.uniform(0.2, 0.8, 4))], "y")
    assert_unchanged(g.model(["y"], output_types={"y": TensorProto.DOUBLE}), MATMUL_ADD)


# ---- Transpose folded into Gemm ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operand", "perm", "gemm_attrs"),
    [("A", [1, 0], {}), ("A", None, {"transA": 1}), ("B", None, {"transB": 1, "alpha": 0.5})],
    ids=["a", "a_no_perm_already_transposed", "b_no_perm_already_transposed_alpha"],
)
def test_transpose_folds_into_gemm(operand: str, perm: list[int] | None, gemm_attrs: dict) -> None:
    g = Graph(seed=8)
    flag = f"trans{operand}"
    # Input shapes such that the Gemm multiplies [3, 5] by [5, 4] after every transposition.
    a_shape = [5, 3] if (operand == "A") != bool(gemm_attrs.get("transA")) else [3, 5]
    b_shape = [4, 5] if (operand == "B") != bool(gemm_attrs.get("transB")) else [5, 4]
    if operand == "A":
        a = g.node("Transpose", [g.input("a", a_shape)], "t", **({"perm": perm} if perm else {}))
        b = g.input("b", b_shape)
    else:
        a = g.input("a", a_shape)
        b = g.node("Transpose", [g.input("b", b_shape)], "t", **({"perm": perm} if perm else {}))
    g.node("Gemm", [a, b, g.weight("c", 4)], "y", **gemm_attrs)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, TRANSPOSE_A if operand == "A" else TRANSPOSE_B)
    assert op_types(trip.model) == Counter({"Gemm": 1})
    gemm = only_node(trip.model, "Gemm")
    assert int_attr(gemm, flag, 0) == 1 - int(gemm_attrs.get(flag, 0))
    check_and_compare(model, trip.model)


def test_transposed_input_matmul_add_becomes_gemm_with_trans_a() -> None:
    g = Graph(seed=9)
    t = g.node("Transpose", [g.input("x", [5, 3])], "t", perm=[1, 0])
    product = g.node("MatMul", [t, g.weight("w", 5, 4)], "product")
    g.node("Add", [product, g.weight("c", 4)], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, MATMUL_ADD, TRANSPOSE_A)
    assert op_types(trip.model) == Counter({"Gemm": 1})
    assert int_attr(only_node(trip.model, "Gemm"), "transA", 0) == 1
    check_and_compare(model, trip.model)


def test_transpose_with_a_second_reader_stays() -> None:
    g = Graph(seed=10)
    t = g.node("Transpose", [g.input("a", [5, 3])], "t", perm=[1, 0])
    g.node("Gemm", [t, g.weight("b", 5, 4)], "y")
    g.node("Relu", [t], "other")
    assert_unchanged(g.model(["y", "other"]), TRANSPOSE_A)


def test_optimize_model_reports_and_verifies_the_gemm() -> None:
    model = matmul_add((4,)).model(["y"])
    for cost_model in ("uniform", "analytic"):
        result, report = optimize_model(model, OptimizeOptions(target="portable", cost_model=cost_model))
        assert report.rule_matches[MATMUL_ADD] > 0
        assert report.verification.ok
        check_and_compare(model, result)
        assert op_types(result) == Counter({"Gemm": 1})
