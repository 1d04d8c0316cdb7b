"""No-op removal (rules/noop_removal.py): ops that return their input are replaced by it.

Positive cases chain several no-ops, ``x [6, 4] -> Relu -> noop -> noop ... -> Neg -> y``: every rule of the
group must match and the decoded graph is Relu + Neg only. Near misses hang off the Relu as separate
outputs, and every one of their ops must stay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import TensorProto
from rule_builders import Graph, assert_fired, assert_unchanged, optimized

Step = Callable[[Graph, str, str], str]
"""(graph, input tensor, unique suffix) -> output tensor."""


def f32(value: float | list[float]) -> np.ndarray:
    return np.array(value, dtype=np.float32)


def node(op: str, *extra: Callable[[Graph, str], str], **attrs: object) -> Step:
    """A step ``op(t, extra constants...)``; each ``extra`` makes a constant named after the step."""

    def step(g: Graph, t: str, k: str) -> str:
        inputs = [t] + [make(g, f"{op.lower()}_{k}_{i}") for i, make in enumerate(extra)]
        return g.node(op, inputs, f"{op.lower()}_{k}", **attrs)

    return step


def ints(*values: int) -> Callable[[Graph, str], str]:
    return lambda g, name: g.ints(name, list(values))


def const(value: np.ndarray) -> Callable[[Graph, str], str]:
    return lambda g, name: g.const(name, value)


GROUPS: dict[str, list[tuple[str, Step]]] = {
    "identity_like": [
        ("Identity -> input", node("Identity")),
        ("Dropout -> input", node("Dropout")),
        ("Dropout -> input", node("Dropout", const(f32(0.4)))),
        ("Dropout -> input", node("Dropout", const(f32(0.4)), const(np.array(False)))),
        ("Cast to own type -> input", node("Cast", to=TensorProto.FLOAT)),
        ("Transpose(identity) -> input", node("Transpose", perm=[0, 1])),
    ],
    "one_input": [
        ("Concat(one input) -> input", node("Concat", axis=0)),
        ("Sum(one input) -> input", node("Sum")),
        ("Max(one input) -> input", node("Max")),
        ("Min(one input) -> input", node("Min")),
        ("Mean(one input) -> input", node("Mean")),
    ],
    "same_shape": [
        ("Reshape to own shape -> input", node("Reshape", ints(6, 4))),
        ("Reshape to own shape -> input", node("Reshape", ints(-1, 4))),
        ("Expand to own shape -> input", node("Expand", ints(1, 4))),
        ("Flatten to own shape -> input", node("Flatten", axis=1)),
        ("Squeeze to own shape -> input", node("Squeeze")),
        ("Split to own shape -> input", node("Split", axis=0)),
    ],
    "slice_pad_constants": [
        ("Slice to own shape -> input", node("Slice", ints(0), ints(6), ints(0))),
        ("Slice to own shape -> input", node("Slice", ints(0, 0), ints(99, 4), ints(0, 1), ints(1, 1))),
        ("Pad(zeros) -> input", node("Pad", ints(0, 0, 0, 0))),
        ("Pad(zeros) -> input", node("Pad", ints(0, 0, 0, 0), const(f32(0.5)))),
    ],
}


def chained(steps: list[Step]) -> Graph:
    g = Graph()
    t = g.node("Relu", [g.input("x", [6, 4])], "t")
    for k, step in enumerate(steps):
        t = step(g, t, str(k))
    g.node("Neg", [t], "y")
    return g


@pytest.mark.parametrize("group", list(GROUPS))
def test_noops_are_removed(group: str) -> None:
    rules, steps = zip(*GROUPS[group], strict=True)
    model = chained(list(steps)).model(["y"])
    trip = optimized(model)
    assert_fired(trip, *rules)
    assert op_types(trip.model) == Counter({"Relu": 1, "Neg": 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    "step",
    [node("Add", const(np.zeros(4, np.float32))), node("Mul", const(np.ones(1, np.float32)))],
    ids=["add_zeros", "mul_ones"],
)
def test_add_zero_and_multiply_by_one_are_kept_and_the_search_settles(step: Step) -> None:
    """No rule removes x + 0 or x * 1 (see noop_removal.py: union(x + 0, x) made the folding rules loop
    through x's class and grow the e-graph to millions of e-nodes); the search now settles at once."""
    model = chained([step]).model(["y"])
    trip = optimized(model)
    assert trip.stats is not None and trip.stats.stop_reason == "saturated"
    assert trip.stats.enodes < 1_000
    check_and_compare(model, trip.model)


NEAR_MISSES: list[tuple[str, Step]] = [
    # Sum(x, y) of x's shape is x + y, not x.
    ("Sum(one input) -> input", lambda g, t, k: g.node("Sum", [t, g.input("other", [6, 4])], f"sum_{k}")),
    # Step -1 over the whole axis: same shape, reversed rows.
    ("Slice to own shape -> input", node("Slice", ints(-1), ints(-(2**62)), ints(0), ints(-1))),
    # A different type: float -> float16 -> float rounds.
    ("Cast to own type -> input", lambda g, t, k: node("Cast", to=1)(g, node("Cast", to=10)(g, t, k + "h"), k)),
    ("x Add zeros -> x", node("Add", const(np.zeros((2, 6, 4), np.float32)))),  # broadcasts to a bigger shape
    ("Expand to own shape -> input", node("Expand", ints(3, 6, 4))),
    ("x Mul ones -> x", node("Mul", const(f32([1.0, 1.0, 1.0, 1.25])))),
    ("x Sub zeros -> x", lambda g, t, k: g.node("Sub", [g.const(f"z_{k}", np.zeros(4, np.float32)), t], f"sub_{k}")),
    ("Transpose(identity) -> input", node("Transpose", perm=[1, 0])),
]  # fmt: skip

RANDOM_NEAR_MISSES: list[tuple[str, Step]] = [
    ("Dropout -> input", node("Dropout", const(f32(0.5)), const(np.array(True)))),
    ("Dropout -> input", node("Dropout", const(f32(0.5)), lambda g, name: g.input("mode", [], TensorProto.BOOL))),
]


@pytest.mark.parametrize(
    ("cases", "compare"), [(NEAR_MISSES, True), (RANDOM_NEAR_MISSES, False)], ids=["deterministic", "training_dropout"]
)
def test_near_misses_are_kept(cases: list[tuple[str, Step]], compare: bool) -> None:
    """Sum of two inputs, a reversing Slice, a Cast round trip, zeros that broadcast wider, an Expand that grows,
    a Mul by not-quite-ones, 0 - x, a real Transpose; Dropout in training mode (constant or run-time flag)."""
    g = Graph()
    t = g.node("Relu", [g.input("x", [6, 4])], "t")
    outputs = [step(g, t, str(k)) for k, (_, step) in enumerate(cases)]
    if compare:
        assert_unchanged(g.model(outputs), *{rule for rule, _ in cases})
    else:
        # A Dropout that stays may still match a rule's pattern partially; what matters is that it stays.
        assert_unchanged(g.model(outputs), compare=False)


def test_slices_over_everything_go_whatever_the_shape() -> None:
    """x[0:, 0:] written with INT64_MAX ends keeps every element of any size; a later start, an end a size can
    reach (INT32_MAX) or a step of 2 keeps the Slice."""
    end = 2**63 - 1
    g = Graph()
    t = g.node("Relu", [g.input("x", ["n", "m"])], "t")
    t = node("Slice", ints(0), ints(end), ints(0))(g, t, "all_rows")
    t = node("Slice", ints(0, 0), ints(end, end), ints(0, 1), ints(1, 1))(g, t, "all_both")
    t = node("Slice", ints(0), ints(end))(g, t, "all_default_axes")
    g.node("Neg", [t], "y")
    kept = [
        node("Slice", ints(1), ints(end), ints(0)),
        node("Slice", ints(0), ints(2**31 - 1), ints(0)),
        node("Slice", ints(0), ints(end), ints(1), ints(2)),
    ]
    outputs = ["y"] + [step(g, "t", f"kept{i}") for i, step in enumerate(kept)]
    model = g.model(outputs)
    trip = optimized(model)
    assert_fired(trip, "Slice over everything -> input")
    assert op_types(trip.model) == Counter({"Relu": 1, "Neg": 1, "Slice": 3})
    check_and_compare(model, trip.model)


def test_reshapes_and_expands_that_keep_an_open_batch_dim_go() -> None:
    """tf2onnx writes ``Reshape(x, [-1, C, 1, 1])`` on an ``[N, C, 1, 1]`` x: shape inference names the
    two batch dims apart, yet the -1 can only take N back. Targets that would change a dim stay."""
    g = Graph()
    t = g.node("Relu", [g.input("x", ["n", 8, 1, 1])], "t")
    for k, step in enumerate(
        [node("Reshape", ints(-1, 8, 1, 1)), node("Reshape", ints(0, 8, 1, 1)), node("Expand", ints(8, 1, 1))]
    ):
        t = step(g, t, str(k))
    g.node("Neg", [node("Expand", ints(1))(g, t, "last")], "y")
    kept = [
        node("Reshape", ints(-1, 4, 2, 1)),  # regroups the channels
        node("Reshape", ints(-1, 8)),  # another rank
        node("Reshape", ints(0, 8, -1, 1)),  # the -1 beside a copied open dim: not shown from dims alone
        node("Expand", ints(2, 8, 1, 1)),  # may grow the batch
        node("Expand", ints(8, 1, 3)),  # grows the last dim
    ]
    outputs = ["y"] + [step(g, "t", f"kept{i}") for i, step in enumerate(kept)]
    model = g.model(outputs)
    trip = optimized(model)
    assert_fired(trip, "Reshape keeping its input's dims -> input", "Expand keeping its input's dims -> input")
    assert op_types(trip.model) == Counter({"Relu": 1, "Neg": 1, "Reshape": 3, "Expand": 2})
    check_and_compare(model, trip.model)


def test_a_kept_expand_does_not_make_a_growing_one_of_the_same_target_a_noop() -> None:
    """Expand(e, [2]) of a [2] e returns e; e = Expand(s, [2]) of a scalar s grows it. Equal targets put both in
    one class once the first is removed, so the fact names the input too: s is never taken for e (the fuzz
    campaign found a ReduceLogSum over 1 element instead of 2)."""
    g = Graph()
    s = g.node("Relu", [g.input("s", [])], "s_relu")
    grown = node("Expand", ints(2))(g, s, "grow")
    kept = node("Expand", ints(2))(g, grown, "keep")
    g.node("ReduceLogSum", [g.node("Abs", [kept], "abs")], "y", keepdims=0)
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, "Expand keeping its input's dims -> input")
    assert op_types(trip.model)["Expand"] == 1
    check_and_compare(model, trip.model)
