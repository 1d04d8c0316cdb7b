"""Two consecutive Slices as one (rules/consecutive.py, kernel eqsat/slicing.py).

    Slice(Slice(x, p1), p2)  ==>  Slice(x, p)     x of static shape, p1 and p2 constant

Exporters write one Slice per axis (and ``x[..., ::2][1:]`` gives two on one axis). The composed
parameters come from replaying both slices on index ranges; the kernel is checked against ONNX Runtime
on random slices, including negative starts, ends and steps, open ends and empty results.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import TensorProto, helper, numpy_helper
from rule_builders import Graph, assert_fired, assert_unchanged, optimized

from onnxsat.eqsat.slicing import composed_slice

SLICES = "Slice+Slice -> Slice"
Params = list[list[int]]


def two_slices(inner: Params, outer: Params, shape: tuple[int, ...] = (4, 6, 8), read_twice: bool = False):
    """x -> Slice(inner) -> Slice(outer) -> Relu -> y; params are [starts, ends] + optional axes, steps."""
    g = Graph()
    g.input("x", list(shape))
    z = constant_slice(g, "x", "z", *inner)
    g.node("Relu", [constant_slice(g, z, "s", *outer)], "y")
    outputs = ["y"]
    if read_twice:
        g.node("Neg", [z], "also")
        outputs.append("also")
    return g.model(outputs)


@pytest.mark.parametrize(
    ("inner", "outer"),
    [
        ([[1], [5], [1]], [[2], [7], [2]]),  # different axes, explicit
        ([[0, 2], [3, 6], [0, 2], [1, 2]], [[1], [-1], [1], [1]]),  # steps on one, negative end on another
        ([[7], [0], [2], [-1]], [[1], [-1], [2], [2]]),  # reverse, then every other one of the reversed axis
        ([[1, 1], [3, 5]], [[-1], [100]]),  # axes and steps omitted: the leading axes
        ([[0], [-(2**62)], [1], [-2]], [[0], [1], [0]]),  # open end going down, then one row
    ],
    ids=["two_axes", "steps_and_negative_end", "reversed_then_strided", "axes_omitted", "open_end_down"],
)
def test_two_slices_become_one(inner: Params, outer: Params) -> None:
    model = two_slices(inner, outer)
    trip = optimized(model)
    assert_fired(trip, SLICES)
    assert op_types(trip.model) == Counter({"Slice": 1, "Relu": 1})
    check_and_compare(model, trip.model)


def test_slice_read_elsewhere_is_kept() -> None:
    model = two_slices([[1], [5], [1]], [[2], [7], [2]], read_twice=True)
    assert_unchanged(model, SLICES)


def constant_slice(g: Graph, data: str, out: str, *params: list[int]) -> str:
    """A Slice of ``data`` whose parameters (starts, ends, axes...) are int64 initializers."""
    names = [g.const(f"{out}_p{k}", np.array(v, np.int64)) for k, v in enumerate(params)]
    return g.node("Slice", [data, *names], out)


def test_slice_with_runtime_parameters_is_kept() -> None:
    g = Graph()
    g.input("x", [4, 6])
    g.input("start", [1], TensorProto.INT64)
    z = g.node("Slice", ["x", "start", g.const("end", np.array([3], np.int64))], "z")
    constant_slice(g, z, "y", [1], [5], [1])
    assert_unchanged(g.model(["y"]), SLICES, compare=False)


def test_slice_of_a_dynamic_shape_is_kept() -> None:
    """Without the input's shape the composed ends cannot be clamped ahead of time."""
    g = Graph()
    g.input("x", ["n", 6])
    constant_slice(g, constant_slice(g, "x", "z", [1], [5], [1]), "y", [1], [3], [1])
    assert_unchanged(g.model(["y"]), SLICES, compare=False)


def _run_slices(x: np.ndarray, params: list[list[np.ndarray]]) -> np.ndarray:
    nodes, inits, current = [], [], "x"
    for i, slice_params in enumerate(params):
        names = [f"p{i}_{j}" for j in range(len(slice_params))]
        inits += [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in zip(names, slice_params, strict=True)]
        nodes.append(helper.make_node("Slice", [current, *names], [f"y{i}"]))
        current = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_composed_parameters_match_onnx_runtime_on_random_slices() -> None:
    rng = np.random.default_rng(0)

    def random_params(rank: int) -> list[np.ndarray]:
        count = int(rng.integers(1, rank + 1))
        axes = rng.permutation(rank)[:count] - np.where(rng.random(count) < 0.3, rank, 0)
        steps = rng.choice([-3, -2, -1, 1, 2, 3], size=count)
        starts, ends = rng.integers(-9, 9, size=count), rng.integers(-9, 9, size=count)
        ends = np.where(rng.random(count) < 0.15, np.where(steps > 0, 2**62, -(2**62)), ends)
        return [starts, ends, axes, steps]

    for _ in range(150):
        shape = tuple(int(d) for d in rng.integers(1, 7, size=rng.integers(1, 4)))
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        inner, outer = random_params(len(shape)), random_params(len(shape))
        expected = _run_slices(x, [inner, outer])
        actual = _run_slices(x, [list(composed_slice([np.array(shape), *inner, *outer]))])
        assert actual.shape == expected.shape and np.array_equal(actual, expected), (shape, inner, outer)


def test_parameters_are_written_as_constants() -> None:
    model = two_slices([[1], [5], [1]], [[2], [7], [2]])
    trip = optimized(model)
    (node,) = [n for n in trip.model.graph.node if n.op_type == "Slice"]
    values = {t.name: numpy_helper.to_array(t).tolist() for t in trip.model.graph.initializer}
    assert node.input[0] == "x"
    assert [values[name] for name in node.input[1:]] == [[1, 2], [5, 7], [1, 2], [1, 1]]
    onnx.checker.check_model(trip.model)


def test_outer_slice_that_keeps_everything_is_removed_without_looping() -> None:
    """The no-op rule puts the outer Slice in its input's class; composing through that self-loop once
    nested new parameters on every pass (the rule now requires three distinct classes)."""
    model = two_slices([[1, 1], [3, 5]], [[-2], [100]])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"Slice": 1, "Relu": 1})
    check_and_compare(model, trip.model)
