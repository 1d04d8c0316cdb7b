"""Elementwise chains with constants reassociated so the constants fold (rules/reassociation.py).

(x + c1) + c2  ==>  x + (c1 + c2)          (x * c1) * c2  ==>  x * (c1 * c2)
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import TensorProto
from rule_builders import Graph, assert_fired, assert_unchanged, initializer, only_node, optimized


def rule_name(op: str) -> str:
    return f"({op} c1) {op} c2 -> {op} (c1 {op} c2)"


def chain(op: str, *, inner_const_first: bool = False, outer_const_first: bool = False) -> Graph:
    """x [3, 4] -> op c1 [4] -> op c2 [3, 1] -> y (broadcasting both ways)."""
    g = Graph(seed=11)
    x = g.input("x", [3, 4])
    make = g.scale if op == "Mul" else g.weight
    c1, c2 = make("c1", 4), make("c2", 3, 1)
    z = g.node(op, [c1, x] if inner_const_first else [x, c1], "z")
    g.node(op, [c2, z] if outer_const_first else [z, c2], "y")
    return g


@pytest.mark.parametrize(
    ("op", "inner_const_first", "outer_const_first"),
    [("Add", False, False), ("Add", True, True), ("Mul", True, False), ("Mul", False, True)],
)
def test_constants_meet_and_fold(op: str, inner_const_first: bool, outer_const_first: bool) -> None:
    g = chain(op, inner_const_first=inner_const_first, outer_const_first=outer_const_first)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, rule_name(op))
    assert op_types(trip.model) == Counter({op: 1})
    node = only_node(trip.model, op)
    assert node.input[0] == "x"
    c1, c2 = (initializer(model, n).astype(np.float64) for n in ("c1", "c2"))
    combined = c1 + c2 if op == "Add" else c1 * c2
    np.testing.assert_allclose(initializer(trip.model, node.input[1]), combined, rtol=1e-6)
    check_and_compare(model, trip.model)


def test_inner_result_with_a_second_reader_is_kept() -> None:
    g = chain("Add")
    g.node("Relu", ["z"], "other")
    assert_unchanged(g.model(["y", "other"]), rule_name("Add"))


def test_runtime_second_operand_is_kept() -> None:
    g = Graph(seed=12)
    z = g.node("Mul", [g.input("x", [3, 4]), g.scale("c1", 4)], "z")
    g.node("Mul", [z, g.input("c2", [3, 1])], "y")
    assert_unchanged(g.model(["y"]), rule_name("Mul"))


def test_mixed_add_then_mul_is_kept() -> None:
    g = Graph(seed=13)
    z = g.node("Add", [g.input("x", [3, 4]), g.weight("c1", 4)], "z")
    g.node("Mul", [z, g.scale("c2", 4)], "y")
    assert_unchanged(g.model(["y"]), rule_name("Add"), rule_name("Mul"))


def test_int64_constants_are_left_apart() -> None:
    """Constants combine in float64 (exact for float32); int64 chains are not reassociated at all."""
    g = Graph()
    z = g.node("Add", [g.input("x", [3], TensorProto.INT64), g.const("c1", np.array([2**53 + 1], np.int64))], "z")
    g.node("Add", [z, g.const("c2", np.array([1], np.int64))], "y")
    model = g.model(["y"], output_types={"y": TensorProto.INT64})
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"Add": 2})
    check_and_compare(model, trip.model, feeds={"x": np.array([0, 1, 2], np.int64)}, rtol=0, atol=0)
