"""Layout ops sunk below elementwise ops until they meet their inverse (rules/layout_sinking.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from rule_builders import Graph, assert_fired, assert_not_fired, assert_unchanged, optimized

from onnxsat.eqsat.rules.layout_sinking import has_layout_chain

UNARY = "unary(layout) -> layout(unary)"
SCALAR = "binary(layout, scalar) -> layout(binary)"
BOTH = "binary(layout, layout) -> layout(binary)"
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def nhwc_chain(*ops: str) -> Graph:
    """x (NCHW) -> Transpose to NHWC -> ops... -> Transpose back to NCHW -> y (a converted TF model)."""
    g = Graph()
    t = g.node("Transpose", [g.input("x", [2, 3, 4, 5])], "t", perm=NHWC)
    for i, op in enumerate(ops):
        if op == "Clip":
            t = g.node("Clip", [t, g.const(f"lo{i}", np.float32(-0.3)), g.const(f"hi{i}", np.float32(0.4))], f"u{i}")
        elif op in ("Mul", "Add"):
            t = g.node(op, [t, g.const(f"c{i}", np.array([0.7], np.float32))], f"u{i}")
        elif op == "Sub(c, .)":
            t = g.node("Sub", [g.const(f"c{i}", np.float32(0.25)), t], f"u{i}")
        else:
            t = g.node(op, [t], f"u{i}", **({"alpha": 0.2} if op == "LeakyRelu" else {}))
    g.node("Transpose", [t], "y", perm=NCHW)
    return g


@pytest.mark.parametrize(
    "ops",
    [("Relu",), ("Sigmoid", "Clip"), ("Mul", "Add", "Tanh"), ("Sub(c, .)", "LeakyRelu")],
    ids=["relu", "sigmoid_clip", "scalar_mul_add_tanh", "scalar_first_operand"],
)
def test_transpose_and_its_inverse_cancel_across_an_elementwise_chain(ops: tuple[str, ...]) -> None:
    model = nhwc_chain(*ops).model(["y"])
    trip = optimized(model)
    assert_fired(trip, UNARY if ops[-1] not in ("Add", "Mul") else SCALAR)
    assert "Transpose" not in op_types(trip.model)
    check_and_compare(model, trip.model)


def test_two_transposed_operands_sink_together() -> None:
    """A residual Add of two NHWC branches: both Transposes sink through it and cancel the one after."""
    g = Graph()
    a = g.node("Transpose", [g.input("a", [1, 3, 4, 5])], "ta", perm=NHWC)
    b = g.node("Transpose", [g.node("Relu", [g.input("b", [1, 3, 4, 5])], "rb")], "tb", perm=NHWC)
    g.node("Transpose", [g.node("Add", [a, b], "s")], "y", perm=NCHW)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, BOTH)
    assert op_types(trip.model) == Counter({"Relu": 1, "Add": 1})
    check_and_compare(model, trip.model)


def test_a_reshape_and_its_inverse_cancel_across_an_elementwise_op() -> None:
    g = Graph()
    r = g.node("Reshape", [g.input("x", [2, 6, 4]), g.ints("s1", [2, 3, 2, 4])], "r")
    u = g.node("Div", [g.node("Exp", [r], "e"), g.const("d", np.float32(3.0))], "u")
    g.node("Reshape", [u, g.ints("s2", [2, 6, 4])], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, UNARY, SCALAR)
    assert op_types(trip.model) == Counter({"Exp": 1, "Div": 1})
    check_and_compare(model, trip.model)


def test_transposes_that_do_not_cancel_compose_into_one() -> None:
    g = Graph()
    t = g.node("Transpose", [g.input("x", [2, 3, 4])], "t", perm=[1, 0, 2])
    g.node("Transpose", [g.node("Relu", [t], "r")], "y", perm=[0, 2, 1])
    model = g.model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"Relu": 1, "Transpose": 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("case", ["per_channel_constant", "different_perms", "softmax_axis", "unequal_shapes"])
def test_layout_ops_that_cannot_sink_stay(case: str) -> None:
    """A constant with real extent, operands transposed differently or broadcast against each other,
    and ops that depend on an axis (Softmax) keep their Transposes where they are."""
    g = Graph()
    x = g.input("x", [2, 3, 4])
    t = g.node("Transpose", [x], "t", perm=[0, 2, 1])
    if case == "per_channel_constant":
        u = g.node("Mul", [t, g.const("c", np.array([0.5, 0.7, 0.9], np.float32))], "u")
    elif case == "different_perms":
        u = g.node("Add", [t, g.node("Transpose", [g.input("b", [4, 2, 3])], "tb", perm=[1, 0, 2])], "u")
    elif case == "unequal_shapes":
        u = g.node("Add", [t, g.node("Transpose", [g.input("b", [1, 3, 4])], "tb", perm=[0, 2, 1])], "u")
    else:
        u = g.node("Softmax", [t], "u", axis=-1)
    g.node("Transpose", [u], "y", perm=[0, 2, 1])
    trip = assert_unchanged(g.model(["y"]), UNARY, SCALAR, BOTH)
    assert op_types(trip.model)["Transpose"] >= 2


def test_the_family_runs_only_where_a_layout_op_reaches_another_through_elementwise_ops() -> None:
    """``applicable`` skips the family elsewhere (on the zoo's exports it only cost iterations); the
    whole optimize pass still cancels a converted model's pair."""
    assert has_layout_chain(nhwc_chain("Relu", "Mul").model(["y"]).graph)
    g = Graph()
    t = g.node("Transpose", [g.input("x", [2, 3, 4])], "t", perm=[0, 2, 1])
    g.node("Transpose", [g.node("MatMul", [t, g.weight("w", 3, 3)], "m")], "y", perm=[0, 2, 1])
    assert not has_layout_chain(g.model(["y"]).graph)
    model = nhwc_chain("Relu", "Mul").model(["y"])
    optimized_model, _ = optimize_model(model, OptimizeOptions(target="portable"))
    assert op_types(optimized_model) == Counter({"Relu": 1, "Mul": 1})


def test_a_scalar_layout_output_times_a_one_element_vector_keeps_its_rank() -> None:
    """Squeeze([1, 1]) is a scalar; times c of shape [1] it is [1]. Sinking the Squeeze would give a
    scalar again: the rule must not fire (regression: it did before the rank condition)."""
    g = Graph()
    s = g.node("Squeeze", [g.input("x", [1, 1]), g.ints("axes", [0, 1])], "s")
    g.node("Mul", [s, g.const("c", np.array([0.5], np.float32))], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_not_fired(trip, SCALAR)
    assert [d.dim_value for d in trip.model.graph.output[0].type.tensor_type.shape.dim] == [1]
    check_and_compare(model, trip.model)
