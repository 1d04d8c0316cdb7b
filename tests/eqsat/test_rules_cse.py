"""Common subexpressions (rules/cse.py): pure nodes with the same op, attributes and inputs computed once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types, random_feeds, run
from onnx import TensorProto, helper, numpy_helper
from rule_builders import Graph, assert_fired, assert_unchanged, optimized

CSE = "common subexpression"


def duplicated_relu(g: Graph) -> tuple[str, str]:
    return g.node("Relu", ["x"], "a"), g.node("Relu", ["x"], "b")


def duplicated_matmul(g: Graph) -> tuple[str, str]:
    w = g.weight("w", 4, 4)
    return g.node("MatMul", ["x", w], "a"), g.node("MatMul", ["x", w], "b")


def equal_initializers(g: Graph) -> tuple[str, str]:
    """Two initializers with equal values (different names) feeding two MatMuls."""
    w = g.weight("w1", 4, 4)
    g.const("w2", np.array(numpy_helper.to_array(g.inits[-1])))
    return g.node("MatMul", ["x", w], "a"), g.node("MatMul", ["x", "w2"], "b")


def duplicated_constants(g: Graph) -> tuple[str, str]:
    value = numpy_helper.from_array(np.array([0.3, -0.6, 0.45, 0.7], dtype=np.float32))
    for name in ("k1", "k2"):
        g.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_node", value=value))
    return g.node("Add", ["x", "k1"], "a"), g.node("Add", ["x", "k2"], "b")


def duplicated_split(g: Graph) -> tuple[str, str]:
    """Multi-output nodes: both outputs of two equal Splits merge."""
    a1, a2 = g.node("Split", ["x"], ["a1", "a2"], axis=1, num_outputs=2), "a2"
    b1, b2 = g.node("Split", ["x"], ["b1", "b2"], axis=1, num_outputs=2), "b2"
    return g.node("Concat", [a1, b2], "a", axis=1), g.node("Concat", [b1, a2], "b", axis=1)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (duplicated_relu, {"Relu": 1}),
        (duplicated_matmul, {"MatMul": 1}),
        (equal_initializers, {"MatMul": 1}),
        (duplicated_constants, {"Constant": 1, "Add": 1}),
        (duplicated_split, {"Split": 1, "Concat": 1}),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_duplicates_are_computed_once(build: object, expected: dict[str, int]) -> None:
    g = Graph(seed=4)
    g.input("x", [3, 4])
    a, b = build(g)
    g.node("Sub", [a, g.node("Neg", [b], "nb")], "y")  # y = a + b, with b not trivially a
    model = g.model(["y"], opset=18)
    trip = optimized(model)
    assert_fired(trip, CSE)
    assert op_types(trip.model) == Counter({**expected, "Neg": 1, "Sub": 1})
    check_and_compare(model, trip.model)


def two_random_uniform_like(g: Graph) -> tuple[str, str]:
    return g.node("RandomUniformLike", ["x"], "a"), g.node("RandomUniformLike", ["x"], "b")


def different_attributes(g: Graph) -> tuple[str, str]:
    return g.node("LeakyRelu", ["x"], "a", alpha=0.1), g.node("LeakyRelu", ["x"], "b", alpha=0.2)


def different_inputs(g: Graph) -> tuple[str, str]:
    return g.node("Relu", ["x"], "a"), g.node("Relu", [g.input("x2", [3, 4])], "b")


def nearly_equal_initializers(g: Graph) -> tuple[str, str]:
    """Same type and dims, one element apart: two weights, two MatMuls."""
    w = g.weight("w1", 4, 4)
    other = np.array(numpy_helper.to_array(g.inits[-1]))
    other[3, 2] += 1.0
    g.const("w2", other)
    return g.node("MatMul", ["x", w], "a"), g.node("MatMul", ["x", "w2"], "b")


def training_dropouts(g: Graph) -> tuple[str, str]:
    ratio, training = g.const("ratio", np.array(0.5, np.float32)), g.const("training", np.array(True))
    return g.node("Dropout", ["x", ratio, training], "a"), g.node("Dropout", ["x", ratio, training], "b")


@pytest.mark.parametrize(
    ("build", "compare"),
    [
        (two_random_uniform_like, False),
        (different_attributes, True),
        (different_inputs, True),
        (nearly_equal_initializers, True),
        (training_dropouts, False),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_nodes_that_differ_or_are_random_are_not_merged(build: object, compare: bool) -> None:
    g = Graph(seed=4)
    g.input("x", [3, 4])
    a, b = build(g)
    g.node("Sub", [a, b], "y")
    # Op counts only: the rule matches every pure node (it keys each one), merged or not.
    assert_unchanged(g.model(["y"], opset=18), compare=compare)


def test_random_uniform_like_pair_still_differs_after_optimization() -> None:
    """The merged form would make a - b exactly zero; the original almost never is."""
    g = Graph()
    g.input("x", [64])
    a, b = two_random_uniform_like(g)
    g.node("Sub", [a, b], "y")
    model = g.model(["y"])
    trip = optimized(model)
    onnx.checker.check_model(trip.model)
    (difference,) = run(trip.model, random_feeds(model))
    assert np.count_nonzero(difference) > 0
    assert trip.model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
