"""Layout ops sunk below elementwise ops until they meet their inverse (rules/layout_sinking.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_not_fired, assert_unchanged, optimized

from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import RuleSchedule, layout_sinking
from onnxsat.eqsat.rules.layout_sinking import has_layout_chain
from onnxsat.eqsat.saturate import SaturationLimits, saturate

UNARY = "unary(layout) -> layout(unary)"
SCALAR = "binary(layout, scalar) -> layout(binary)"
BOTH = "binary(layout, layout) -> layout(binary)"
BROADCAST = "binary(Transpose, constant) -> Transpose(binary)"
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


@pytest.mark.parametrize(
    "case", ["growing_constant", "input_operand", "different_perms", "softmax_axis", "unequal_shapes"]
)
def test_layout_ops_that_cannot_sink_stay(case: str) -> None:
    """A constant the Transpose's output broadcasts against (it would grow the result), an operand that is
    no constant, operands transposed differently or broadcast against each other, and ops that depend on
    an axis (Softmax) keep their Transposes where they are."""
    g = Graph()
    x = g.input("x", [1, 3, 4] if case == "growing_constant" else [2, 3, 4])
    t = g.node("Transpose", [x], "t", perm=[0, 2, 1])
    if case == "growing_constant":
        u = g.node("Mul", [t, g.weight("c", 2, 1, 3)], "u")
    elif case == "input_operand":
        u = g.node("Mul", [t, g.input("c", [3])], "u")
    elif case == "different_perms":
        u = g.node("Add", [t, g.node("Transpose", [g.input("b", [4, 2, 3])], "tb", perm=[1, 0, 2])], "u")
    elif case == "unequal_shapes":
        u = g.node("Add", [t, g.node("Transpose", [g.input("b", [1, 3, 4])], "tb", perm=[0, 2, 1])], "u")
    else:
        u = g.node("Softmax", [t], "u", axis=-1)
    g.node("Transpose", [u], "y", perm=[0, 2, 1])
    trip = assert_unchanged(g.model(["y"]), UNARY, SCALAR, BOTH, BROADCAST)
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


def keras_conv_block(*affine: str, batch: int | str = "N") -> Graph:
    """What Keras 3's jax and torch backends export for Conv -> BatchNorm -> ReLU -> Conv: every Conv wrapped in
    NHWC<->NCHW Transposes, the BatchNorm as per-channel ops on [1,1,1,C] or [C] constants in NHWC."""
    g = Graph()
    x = g.node("Transpose", [g.input("x", [batch, 5, 5, 3])], "x_nchw", perm=NCHW)
    conv = g.node("Conv", [x, g.weight("w1", 4, 3, 3, 3)], "c1", pads=[1, 1, 1, 1])
    t = g.node("Transpose", [conv], "c1_nhwc", perm=NHWC)
    for i, op in enumerate(affine):
        shape = (1, 1, 1, 4) if i % 2 == 0 else (4,)
        t = g.node(op, [t, g.scale(f"k{i}", *shape)], f"bn{i}")
    t = g.node("Relu", [t], "r")
    conv = g.node("Conv", [g.node("Transpose", [t], "r_nchw", perm=NCHW), g.weight("w2", 2, 4, 1, 1)], "c2")
    g.node("Transpose", [conv], "y", perm=NHWC)
    return g


@pytest.mark.parametrize(
    ("affine", "batch"),
    [(("Mul", "Add"), "N"), (("Sub", "Mul", "Add"), "N"), (("Add", "Mul", "Add"), 2)],
    ids=["jax_mul_add", "torch_sub_mul_add", "conv_bias_then_bn_static_batch"],
)
def test_transposes_sink_below_per_channel_constants_cancel_and_the_affine_folds_into_the_conv(
    affine: tuple[str, ...], batch: int | str
) -> None:
    """The Transpose after the first Conv sinks below each per-channel op (its constant moved to [1,C,1,1]) and
    the Relu, meets the one before the second Conv and cancels; the per-channel ops then fold into the first
    Conv (``weight_folding``), with a dynamic batch too. What is left is the pair around the graph."""
    model = keras_conv_block(*affine, batch=batch).model(["y"])
    trip = optimized(model)
    assert_fired(trip, BROADCAST, "Transpose+Transpose(inverse) -> input")
    assert op_types(trip.model) == Counter({"Transpose": 2, "Conv": 2, "Relu": 1})
    feeds = {"x": np.random.default_rng(1).normal(size=(2, 5, 5, 3)).astype(np.float32)}
    check_and_compare(model, trip.model, feeds)


def test_a_constant_moves_below_any_perm_and_either_operand_order() -> None:
    """c' is c lined up with leading 1s and transposed by the inverse perm, for a perm that is no NHWC
    swap, and with the constant as the first operand of a Sub and a Div."""
    g = Graph()
    t = g.node("Transpose", [g.input("x", [2, 3, 4])], "t", perm=[2, 0, 1])  # [4, 2, 3]
    u = g.node("Sub", [g.weight("c", 2, 3), t], "u")
    u = g.node("Div", [g.scale("d", 4, 1, 1), u], "v")
    g.node("Transpose", [u], "y", perm=[1, 2, 0])
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, BROADCAST)
    assert op_types(trip.model) == Counter({"Sub": 1, "Div": 1})
    check_and_compare(model, trip.model)


def test_a_transpose_that_meets_no_inverse_is_not_sunk() -> None:
    """Sunk, the Transpose would cost the same and add a moved copy of the constant: the extractor keeps
    the original where nothing cancels."""
    g = Graph()
    t = g.node("Transpose", [g.input("x", [2, 4, 3, 3])], "t", perm=NHWC)
    g.node("Mul", [t, g.scale("c", 1, 1, 1, 4)], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, BROADCAST)
    assert op_types(trip.model) == Counter({"Transpose": 1, "Mul": 1})
    assert [i.name for i in trip.model.graph.initializer] == ["c"]
    check_and_compare(model, trip.model)


def test_a_layout_op_and_any_other_node_are_no_pair_candidate() -> None:
    """The pair candidates need both operands laid out: with any node as the second operand, the candidate
    rule joined the Transpose against the whole Node table (minutes on MaxViT-T), for candidates no
    rewrite could take."""
    g = Graph()
    t = g.node("Transpose", [g.input("a", [1, 3, 4, 5])], "t", perm=NHWC)
    u = g.node("Add", [t, g.node("Relu", [g.input("b", [1, 4, 5, 3])], "r")], "u")
    g.node("Transpose", [u], "y", perm=NCHW)
    trip = assert_unchanged(g.model(["y"]), "binary(layout, layout) candidates", BOTH)
    assert op_types(trip.model)["Transpose"] == 2


def test_the_rules_join_in_time_linear_in_the_graph() -> None:
    """Many independent blocks sink at the speed of a few. The rules matched two nodes in one body, and
    egglog's planner bound each from the whole Node table before tying them together: the family took
    0.45 s for 50 blocks, 2.1 s for 100, 11 s for 200; joined through the one-node relations, 0.03 s."""
    blocks = 200
    g = Graph()
    outputs = []
    for i in range(blocks):
        t = g.node("Transpose", [g.input(f"x{i}", [2, 3, 4])], f"t{i}", perm=[0, 2, 1])
        u = g.node("Mul", [t, g.const(f"c{i}", np.float32(i + 1))], f"m{i}")
        v = g.node("Add", [u, g.node("Relu", [t], f"r{i}")], f"a{i}")
        outputs.append(g.node("Transpose", [v], f"y{i}", perm=[0, 2, 1]))
    stats = saturate(encode(g.model(outputs)).egraph, RuleSchedule(simplify=(layout_sinking,)), SaturationLimits())
    assert stats.stop_reason == "saturated"
    assert stats.rule_matches[UNARY] == stats.rule_matches[SCALAR] == stats.rule_matches[BOTH] == blocks
    assert stats.family_seconds["layout_sinking"] < 3.0
