"""Consecutive ops collapsed (rules/consecutive.py): Transpose pairs, reshape chains, LogSoftmax, nested Concat."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, initializer, ints_attr, only_node, optimized

from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.rules import RuleSchedule, consecutive
from onnxsat.eqsat.saturate import SaturationLimits, saturate

TRANSPOSES = "Transpose+Transpose -> Transpose"
LOG_SOFTMAX = "LogSoftmax+LogSoftmax -> LogSoftmax"
CONCATS = "Concat+Concat -> Concat"


# ---- Transpose pairs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inner", "outer"),
    [([0, 2, 3, 1], [2, 0, 3, 1]), ([3, 1, 0, 2], [0, 3, 2, 1])],
)
def test_transpose_pair_becomes_one_transpose_with_the_composed_perm(inner: list[int], outer: list[int]) -> None:
    g = Graph()
    t = g.node("Transpose", [g.node("Relu", [g.input("x", [2, 3, 4, 5])], "r")], "t", perm=inner)
    g.node("Transpose", [t], "y", perm=outer)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, TRANSPOSES)
    assert op_types(trip.model) == Counter({"Relu": 1, "Transpose": 1})
    composed = ints_attr(only_node(trip.model, "Transpose"), "perm")
    assert composed == [inner[j] for j in outer]
    probe = np.arange(120).reshape(2, 3, 4, 5)
    np.testing.assert_array_equal(np.transpose(probe, composed), np.transpose(np.transpose(probe, inner), outer))
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(("inner", "outer"), [(None, None), ([1, 0], None)], ids=str)
def test_transpose_pair_without_explicit_perms_is_kept(inner: list[int] | None, outer: list[int] | None) -> None:
    g = Graph()
    t = g.node("Transpose", [g.input("x", [3, 4])], "t", **({"perm": inner} if inner else {}))
    g.node("Transpose", [t], "y", **({"perm": outer} if outer else {}))
    assert_unchanged(g.model(["y"]), TRANSPOSES)


# ---- reshape chains ------------------------------------------------------------------------------


def reshape_chain(inner: str, outer: str, g: Graph) -> str:
    """x [2, 1, 3, 4] -> inner -> outer, every pair ending on a shape different from x's."""
    x = g.node("Relu", [g.input("x", [2, 1, 3, 4])], "r")
    steps = {
        "Reshape": lambda t, name, shape: g.node("Reshape", [t, g.ints(f"{name}_shape", shape)], name),
        "Squeeze": lambda t, name, axes: g.node("Squeeze", [t, g.ints(f"{name}_axes", axes)], name),
        "Unsqueeze": lambda t, name, axes: g.node("Unsqueeze", [t, g.ints(f"{name}_axes", axes)], name),
        "Flatten": lambda t, name, axis: g.node("Flatten", [t], name, axis=axis[0]),
    }
    first = {"Reshape": [2, 12], "Squeeze": [1], "Unsqueeze": [0], "Flatten": [2]}[inner]
    z = steps[inner](x, "z", first)
    second = {"Reshape": [4, 6], "Squeeze": [0], "Unsqueeze": [0], "Flatten": [1]}[outer]
    return steps[outer](z, "y", second)


@pytest.mark.parametrize(
    ("inner", "outer"),
    [("Reshape", "Reshape"), ("Squeeze", "Unsqueeze"), ("Flatten", "Reshape")],
)
def test_reshape_chain_becomes_one_reshape(inner: str, outer: str) -> None:
    g = Graph()
    reshape_chain(inner, outer, g)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, f"{inner}+{outer} -> Reshape")
    assert op_types(trip.model) == Counter({"Relu": 1, "Reshape": 1})
    target = initializer(trip.model, only_node(trip.model, "Reshape").input[1])
    assert list(target) == output_dims(model)
    check_and_compare(model, trip.model)


def output_dims(model: onnx.ModelProto) -> list[int]:
    return [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]


def test_reshape_chain_back_to_the_input_shape_disappears() -> None:
    g = Graph()
    z = g.node("Reshape", [g.node("Relu", [g.input("x", [2, 3, 4])], "r"), g.ints("s1", [6, 4])], "z")
    g.node("Neg", [g.node("Reshape", [z, g.ints("s2", [2, 3, 4])], "back")], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, "Reshape+Reshape -> Reshape")
    assert op_types(trip.model) == Counter({"Relu": 1, "Neg": 1})
    check_and_compare(model, trip.model)


def test_reshape_chain_with_a_dynamic_result_is_kept() -> None:
    g = Graph()
    z = g.node("Reshape", [g.input("x", ["N", 3, 4]), g.ints("s1", [0, 12])], "z")
    g.node("Reshape", [z, g.ints("s2", [0, 4, 3])], "y")
    assert_unchanged(g.model(["y"]), "Reshape+Reshape -> Reshape")


# ---- LogSoftmax twice ----------------------------------------------------------------------------


def test_log_softmax_twice_along_one_axis_is_once() -> None:
    g = Graph()
    once = g.node("LogSoftmax", [g.input("x", [3, 5])], "once", axis=1)
    g.node("LogSoftmax", [once], "y", axis=1)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, LOG_SOFTMAX)
    assert op_types(trip.model) == Counter({"LogSoftmax": 1})
    check_and_compare(model, trip.model)


def test_log_softmax_along_different_axes_is_kept() -> None:
    g = Graph()
    once = g.node("LogSoftmax", [g.input("x", [3, 5])], "once", axis=0)
    g.node("LogSoftmax", [once], "y", axis=1)
    assert_unchanged(g.model(["y"]), LOG_SOFTMAX)


# ---- nested Concat -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inner_inputs", "position"),
    [(["a", "b"], 1), (["a", "b", "c"], 0)],
    ids=["pair_second", "triple_first"],
)
def test_nested_concat_along_one_axis_is_flattened(inner_inputs: list[str], position: int) -> None:
    g = Graph()
    for name in ("a", "b", "c", "d"):
        g.input(name, [2, 3])
    inner = g.node("Concat", inner_inputs, "inner", axis=1)
    outer_inputs = ["d", "c"] if "c" not in inner_inputs else ["d"]
    outer_inputs.insert(position, inner)
    g.node("Concat", outer_inputs, "y", axis=1)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, CONCATS)
    assert op_types(trip.model) == Counter({"Concat": 1})
    expected = [n for name in outer_inputs for n in (inner_inputs if name == inner else [name])]
    assert list(only_node(trip.model, "Concat").input) == expected
    check_and_compare(model, trip.model)


def test_nested_concat_along_different_axes_is_kept() -> None:
    g = Graph()
    for name in ("a", "b", "c"):
        g.input(name, [2, 2])
    inner = g.node("Concat", ["a", "b"], "inner", axis=0)
    g.node("Concat", [inner, g.node("Concat", ["c", "c"], "cc", axis=0)], "y", axis=1)
    assert_unchanged(g.model(["y"]), CONCATS)


def test_transpose_pair_composing_to_the_identity_disappears() -> None:
    g = Graph()
    t = g.node("Transpose", [g.node("Relu", [g.input("x", [2, 3, 4, 5])], "r")], "t", perm=[0, 2, 3, 1])
    g.node("Neg", [g.node("Transpose", [t], "back", perm=[0, 3, 1, 2])], "y")
    model = g.model(["y"])
    trip = optimized(model)
    check_and_compare(model, trip.model)
    assert op_types(trip.model) == Counter({"Relu": 1, "Neg": 1})


def test_each_pair_is_joined_through_the_tensor_between_them() -> None:
    """Each block's Transpose pair and Reshape chain collapse once, and nothing pairs across blocks or with
    a Transpose whose input another op computes: the rules read both ops from one-node relations joined
    through the tensor between them. As node patterns, egglog's planner joined the two through the whole
    Node table (over a second per saturation on MaxViT-T with nothing to collapse)."""
    blocks = 60
    g = Graph()
    outputs = []
    for i in range(blocks):
        x = g.input(f"x{i}", [2, 3, 4])
        t = g.node("Transpose", [g.node("Transpose", [x], f"t{i}", perm=[0, 2, 1])], f"u{i}", perm=[0, 2, 1])
        r = g.node("Reshape", [g.node("Flatten", [t], f"f{i}"), g.ints(f"s{i}", [4, 6])], f"r{i}")
        outputs.append(g.node("Transpose", [g.node("Relu", [r], f"a{i}")], f"y{i}", perm=[1, 0]))
    model = g.model(outputs)
    encoded = encode(model, onnx.shape_inference.infer_shapes(model))
    stats = saturate(encoded.egraph, RuleSchedule(simplify=(consecutive,)), SaturationLimits())
    assert stats.stop_reason == "saturated"
    # Per block, the counts the node patterns gave: once the pair's output joins x's class, the rules
    # match again through that class.
    assert stats.rule_matches["Transpose+Transpose(inverse) -> input"] == 3 * blocks
    assert stats.rule_matches[TRANSPOSES] == 3 * blocks
    assert stats.rule_matches["Flatten+Reshape -> Reshape"] == 2 * blocks
    collapsed = {name for name, n in stats.rule_matches.items() if n and "->" in name}
    assert collapsed == {TRANSPOSES, "Transpose+Transpose(inverse) -> input", "Flatten+Reshape -> Reshape"}
