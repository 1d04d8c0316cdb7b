"""Constant folding (rules/constant_folding.py): static subgraphs and shapes of static tensors become initializers.

Positive cases check that the folded nodes are gone from the decoded graph, that what replaced them is an
initializer with the right value, and that ONNX Runtime computes the original's outputs. Negative cases
check that nothing non-deterministic, nothing overridable and nothing too large is folded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import TensorProto, helper, numpy_helper
from rule_builders import Graph, assert_unchanged, initializer, matches, optimized, vi

FOLD = "fold: static inputs -> constant"
SHAPE = "fold: Shape -> constant"


def assert_folded(trip_model: onnx.ModelProto, trip_matches: int, expected_ops: Counter[str]) -> None:
    assert trip_matches > 0
    assert op_types(trip_model) == expected_ops


# ---- static subgraphs ----------------------------------------------------------------------------


def transposed_weight(g: Graph) -> str:
    """A tied weight used transposed: MatMul(x, Transpose(W))."""
    return g.node("MatMul", ["x", g.node("Transpose", [g.weight("w", 4, 6)], "wt", perm=[1, 0])], "y")


def cast_expand_bias(g: Graph) -> str:
    """An exporter's bias chain: Add(x, Expand(Cast(c_double), shape))."""
    c = g.const("c", np.array([0.25, -0.5, 0.75, 1.5, -1.25, 0.3], dtype=np.float64))
    cast = g.node("Cast", [c], "c32", to=TensorProto.FLOAT)
    return g.node("Add", ["x", g.node("Expand", [cast, g.ints("shape", [3, 6])], "bias")], "y")


def constant_of_shape(g: Graph) -> str:
    """A ConstantOfShape-built weight, scaled: Mul(x, ConstantOfShape([3, 6], 1.7) * s)."""
    value = numpy_helper.from_array(np.array([1.7], dtype=np.float32))
    filled = g.node("ConstantOfShape", [g.ints("shape", [3, 6])], "filled", value=value)
    return g.node("Mul", ["x", g.node("Mul", [filled, g.scale("s", 6)], "scaled")], "y")


def constant_node_chain(g: Graph) -> str:
    """Two levels: Constant -> Sqrt -> Neg, then Mul(x, .)."""
    value = numpy_helper.from_array(np.array([0.3, 2.5, 0.7, 1.9, 0.45, 3.1], dtype=np.float32))
    g.nodes.append(helper.make_node("Constant", [], ["k"], name="k_node", value=value))
    return g.node("Mul", ["x", g.node("Neg", [g.node("Sqrt", ["k"], "root")], "neg")], "y")


@pytest.mark.parametrize(
    ("build", "remaining"),
    [
        (transposed_weight, "MatMul"),
        (cast_expand_bias, "Add"),
        (constant_of_shape, "Mul"),
        (constant_node_chain, "Mul"),
    ],
    ids=["transpose", "cast_expand", "constant_of_shape", "constant_node_chain"],
)
def test_static_subgraph_folds_into_one_initializer(build: Callable[[Graph], str], remaining: str) -> None:
    g = Graph(seed=1)
    g.input("x", [3, 6])
    build(g)
    model = g.model(["y"])
    trip = optimized(model)
    assert_folded(trip.model, matches(trip, FOLD), Counter({remaining: 1}))
    node = trip.model.graph.node[0]
    initializers = {t.name for t in trip.model.graph.initializer}
    assert node.input[1] in initializers, "the folded value is a new initializer"
    check_and_compare(model, trip.model)


def test_a_large_weight_every_reader_of_which_folds_is_folded_without_a_copy() -> None:
    """Weight normalization exported unfolded: w = g * v / ||v||, ``v`` (8,192 values) read by both ReduceL2 and
    Div. Both fold, so ``v`` goes away and the fold stores no second copy of it."""
    g = Graph(seed=2)
    g.input("x", [3, 128])
    v = g.weight("v", 64, 128)
    norm = g.node("ReduceL2", [v], "norm", axes=[1], keepdims=1)
    w = g.node("Mul", [g.scale("g", 64, 1), g.node("Div", [v, norm], "direction")], "w")
    g.node("MatMul", ["x", g.node("Transpose", [w], "wt", perm=[1, 0])], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"MatMul": 1})
    assert sum(int(np.prod(t.dims)) for t in trip.model.graph.initializer) == 64 * 128
    check_and_compare(model, trip.model)


def test_a_broadcast_a_run_time_node_reads_is_not_stored_grown() -> None:
    """RAFT's correlation grid: a [1, 7, 7, 2] delta broadcast to [256, 7, 7, 2], then scaled and shifted by
    same-sized steps, read by a node computed at run time. Folded, four such grids grew its file 9% (each step
    no larger than its input, the growth at the first); they stay computed (ONNX Runtime folds them at load)."""
    g = Graph(seed=4)
    g.input("x", [256, 7, 7, 2])
    delta = g.weight("delta", 1, 7, 7, 2)
    grid = g.node("Expand", [delta, g.ints("shape", [256, 7, 7, 2])], "grid")
    scaled = g.node("Mul", [grid, g.const("two", np.array(2.0, np.float32))], "scaled")
    shifted = g.node("Sub", [scaled, g.const("one", np.array(1.0, np.float32))], "shifted")
    g.node("Add", ["x", shifted], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert sum(int(np.prod(t.dims)) for t in trip.model.graph.initializer) < 7 * 7 * 2 + 4096
    check_and_compare(model, trip.model)


def test_a_large_weight_a_run_time_node_reads_is_not_copied_by_a_fold() -> None:
    """A tied embedding: Gather(W, ids) keeps W in the model, so Transpose(W) for the output head stays a node
    (ONNX Runtime folds it at load) instead of a second 8,192-value copy in the file."""
    g = Graph(seed=3)
    g.input("ids", [3], TensorProto.INT64)
    table = g.weight("table", 64, 128)
    embedded = g.node("Gather", [table, "ids"], "embedded")
    g.node("MatMul", [embedded, g.node("Transpose", [table], "head", perm=[1, 0])], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == Counter({"Gather": 1, "Transpose": 1, "MatMul": 1})
    assert sum(int(np.prod(t.dims)) for t in trip.model.graph.initializer) == 64 * 128


def only_input(model: onnx.ModelProto, op_type: str, index: int) -> str:
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    return node.input[index]


CASTLIKE = "fold: CastLike(constant) -> constant"


def test_castlike_of_a_constant_folds_with_the_type_of_a_runtime_tensor() -> None:
    """CastLike reads its second input for its type only: CastLike(c_double, x) is a float32 constant."""
    g = Graph(seed=5)
    x = g.input("x", [3, 6])
    c = g.const("c", g.rng.uniform(0.2, 0.8, 6))  # float64
    g.node("Add", [x, g.node("CastLike", [c, x], "c32")], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert matches(trip, CASTLIKE) > 0
    assert op_types(trip.model) == Counter({"Add": 1})
    folded = initializer(trip.model, only_input(trip.model, "Add", 1))
    assert folded.dtype == np.float32
    np.testing.assert_array_equal(folded, initializer(model, "c").astype(np.float32))
    check_and_compare(model, trip.model)


def test_castlike_of_a_runtime_tensor_is_kept() -> None:
    g = Graph(seed=5)
    x = g.input("x", [3, 6], TensorProto.DOUBLE)
    g.node("Add", [g.node("CastLike", [x, g.weight("like", 1)], "x32"), g.weight("c", 6)], "y")
    trip = assert_unchanged(g.model(["y"]), CASTLIKE)
    assert matches(trip, FOLD) == 0


# ---- shapes of static tensors --------------------------------------------------------------------


def test_shape_gather_concat_reshape_chain_folds_to_a_constant_target() -> None:
    g = Graph()
    x = g.input("x", [2, 3, 4])
    shape = g.node("Shape", [x], "shape")
    batch = g.node("Gather", [shape, g.const("zero", np.array(0, dtype=np.int64))], "batch", axis=0)
    batch_1d = g.node("Unsqueeze", [batch, g.ints("axes", [0])], "batch_1d")
    target = g.node("Concat", [batch_1d, g.ints("minus_one", [-1])], "target", axis=0)
    g.node("Reshape", [x, target], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert matches(trip, SHAPE) > 0
    assert op_types(trip.model) == Counter({"Reshape": 1})
    np.testing.assert_array_equal(initializer(trip.model, only_input(trip.model, "Reshape", 1)), [2, -1])
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [({}, [2, 3, 5]), ({"start": -2, "end": -1}, [3])],
    ids=["all", "negative_start_end"],
)
def test_shape_with_start_and_end_folds(attrs: dict[str, int], expected: list[int]) -> None:
    g = Graph(seed=3)
    x = g.input("x", [2, 3, 5])
    v = g.input("v", [len(expected)])
    dims = g.node("Cast", [g.node("Shape", [x], "shape", **attrs)], "dims", to=TensorProto.FLOAT)
    g.node("Mul", [v, dims], "y")
    model = g.model(["y"], opset=17)
    trip = optimized(model)
    assert matches(trip, SHAPE) > 0
    assert op_types(trip.model) == Counter({"Mul": 1})
    np.testing.assert_array_equal(initializer(trip.model, only_input(trip.model, "Mul", 1)), expected)
    check_and_compare(model, trip.model)


def test_shape_of_a_dynamic_tensor_is_not_folded() -> None:
    g = Graph()
    x = g.input("x", ["N", 3, 4])
    g.node("Reshape", [x, g.node("Shape", [x], "shape")], "y")
    assert_unchanged(g.model(["y"]), SHAPE)


# ---- what must never fold -----------------------------------------------------------------------


def test_random_normal_fed_subgraph_is_not_folded() -> None:
    g = Graph()
    g.input("x", [3, 4])
    noise = g.node("RandomNormal", [], "noise", shape=[3, 4], dtype=TensorProto.FLOAT, seed=1.0)
    shifted = g.node("Add", [noise, g.weight("c", 3, 4)], "shifted")
    g.node("Add", ["x", shifted], "y")
    model = g.model(["y"])
    trip = assert_unchanged(model, compare=False)
    assert matches(trip, FOLD) == 0


def test_random_uniform_like_of_a_constant_is_not_folded() -> None:
    g = Graph()
    g.input("x", [3, 4])
    noise = g.node("RandomUniformLike", [g.weight("c", 3, 4)], "noise")
    g.node("Add", ["x", noise], "y")
    trip = assert_unchanged(g.model(["y"]), compare=False)
    assert matches(trip, FOLD) == 0


def test_training_mode_dropout_of_a_constant_is_not_folded() -> None:
    g = Graph()
    g.input("x", [64])
    ratio = g.const("ratio", np.array(0.5, dtype=np.float32))
    dropped = g.node("Dropout", [g.weight("c", 64), ratio, g.const("training", np.array(True))], "dropped")
    g.node("Add", ["x", dropped], "y")
    assert_unchanged(g.model(["y"]), compare=False)


def test_expand_that_would_grow_past_the_limit_is_not_folded() -> None:
    g = Graph()
    g.input("x", [1])
    big = g.node("Expand", [g.const("c", np.array([0.5], dtype=np.float32)), g.ints("shape", [1100, 1000])], "big")
    total = g.node("ReduceMax", [big], "total", keepdims=0)
    g.node("Add", ["x", total], "y")
    model = g.model(["y"])
    trip = assert_unchanged(model)
    assert matches(trip, FOLD) == 0


def test_small_expand_of_the_same_constant_is_folded() -> None:
    g = Graph()
    g.input("x", [1])
    small = g.node("Expand", [g.const("c", np.array([0.5], dtype=np.float32)), g.ints("shape", [100, 100])], "small")
    total = g.node("ReduceMax", [small], "total", keepdims=0)
    g.node("Add", ["x", total], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_folded(trip.model, matches(trip, FOLD), Counter({"Add": 1}))
    check_and_compare(model, trip.model)


def test_initializer_that_is_also_a_graph_input_is_not_folded() -> None:
    """An initializer listed as a graph input (IR >= 4) may be overridden at run time: not a constant."""
    g = Graph()
    g.input("x", [3, 6])
    transposed_weight(g)
    model = g.model(["y"])
    model.graph.input.append(vi("w", [4, 6]))
    trip = assert_unchanged(model)
    assert matches(trip, FOLD) == 0


def test_a_dequantized_int8_weight_stays_int8() -> None:
    """A quantized model's DequantizeLinear of a constant int8 weight has only static inputs, but folded it
    is a float weight four times the size that runs in float: optimize on an int8 model undid it."""
    g = Graph(seed=3)
    x = g.input("x", [3, 6])
    weight = g.const("w_int8", np.arange(-12, 12, dtype=np.int8).reshape(6, 4))
    scale, zero = g.const("w_scale", np.float32(0.05)), g.const("w_zero", np.int8(0))
    g.node("MatMul", [x, g.node("DequantizeLinear", [weight, scale, zero], "w")], "y")
    trip = assert_unchanged(g.model(["y"]), FOLD)
    assert {t.name: t.data_type for t in trip.model.graph.initializer}["w_int8"] == TensorProto.INT8
