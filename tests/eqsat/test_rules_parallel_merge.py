"""Parallel MatMuls / Gemms / Convs sharing an input merged into one product + Split (rules/parallel_merge.py).

The merge only offers an alternative; whether it is extracted is the cost model's call. ``SPLIT_PAYS``
prices the product at 10 and the Split at -1, so each output alone is cheaper through the merged form
and the extractor takes it; under the uniform cost the tests check that the alternative exists (the rule
matched) and that the outputs stay equal.
"""

from __future__ import annotations

from collections import Counter

import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, OpWeightedCost, assert_fired, assert_unchanged, optimized

MATMULS = "2 x MatMul -> MatMul+Split"
CONVS = "Conv || Conv -> Conv+Split"
GEMMS = "Gemm || Gemm -> Gemm+Split"


def split_pays(op: str, split: float = -1.0) -> OpWeightedCost:
    return OpWeightedCost({op: 10.0, "Split": split})


def parallel_matmuls(x_shape: list[int]) -> Graph:
    g = Graph(seed=14)
    x = g.node("Relu", [g.input("x", x_shape)], "r")
    g.node("MatMul", [x, g.weight("w1", x_shape[-1], 5)], "y1")
    g.node("MatMul", [x, g.weight("w2", x_shape[-1], 6)], "y2")
    return g


def parallel_convs(*, bias: bool, common: dict | None = None, **second: object) -> Graph:
    """Two 3x3 convolutions of one input (``common`` attributes for both); ``second`` overrides the second's."""
    g = Graph(seed=15 + bias)
    x = g.node("Relu", [g.input("x", [1, 4, 6, 6])], "r")
    for name, filters in (("1", 2), ("2", 6)):
        attrs = {"pads": [1, 1, 1, 1]} | (common or {}) | (second if name == "2" else {})
        in_per_group = 4 // int(attrs.get("group", 1))
        inputs = [x, g.weight(f"w{name}", filters, in_per_group, 3, 3)] + (
            [g.weight(f"b{name}", filters)] if bias else []
        )
        g.node("Conv", inputs, f"y{name}", **attrs)
    return g


@pytest.mark.parametrize("x_shape", [[3, 4], [2, 3, 4]], ids=["rank2", "rank3"])
def test_parallel_matmuls_merge_into_one_matmul_and_split(x_shape: list[int]) -> None:
    model = parallel_matmuls(x_shape).model(["y1", "y2"])
    trip = optimized(model, cost=split_pays("MatMul"))
    assert_fired(trip, MATMULS)
    assert op_types(trip.model) == Counter({"Relu": 1, "MatMul": 1, "Split": 1})
    check_and_compare(model, trip.model)


def parallel_gemms(*, trans_b: int, bias: list[int] | None, **second: object) -> Graph:
    """Two Gemms of one [3, 4] input with 5 and 6 outputs; ``bias`` [] for [N] biases, [1] for [1, N]."""
    g = Graph(seed=17 + trans_b)
    x = g.node("Relu", [g.input("x", [3, 4])], "r")
    for name, n in (("1", 5), ("2", 6)):
        inputs = [x, g.weight(f"w{name}", *((n, 4) if trans_b else (4, n)))]
        if bias is not None:
            inputs.append(g.weight(f"c{name}", *bias, n))
        attrs = {"transB": trans_b, "alpha": 0.5} | (second if name == "2" else {})
        g.node("Gemm", inputs, f"y{name}", **attrs)
    return g


@pytest.mark.parametrize(
    ("trans_b", "bias"), [(0, None), (1, []), (0, [1])], ids=["no_bias", "transposed_vector_bias", "row_bias"]
)
def test_parallel_gemms_merge_into_one_gemm_and_split(trans_b: int, bias: list[int] | None) -> None:
    model = parallel_gemms(trans_b=trans_b, bias=bias).model(["y1", "y2"])
    trip = optimized(model, cost=split_pays("Gemm"))
    assert_fired(trip, GEMMS)
    assert op_types(trip.model) == Counter({"Relu": 1, "Gemm": 1, "Split": 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize("second", [{"alpha": 2.0}, {"beta": 0.25}], ids=["other_alpha", "other_beta"])
def test_gemms_with_different_attributes_are_not_merged(second: dict) -> None:
    assert_unchanged(parallel_gemms(trans_b=0, bias=[], **second).model(["y1", "y2"]), GEMMS)


def test_gemms_with_a_broadcast_bias_are_not_merged() -> None:
    """A bias of one element (or of shape [M, N]) is not laid out along N: concatenating would be wrong."""
    g = Graph(seed=18)
    x = g.input("x", [3, 4])
    g.node("Gemm", [x, g.weight("w1", 4, 5), g.weight("c1", 1)], "y1")
    g.node("Gemm", [x, g.weight("w2", 4, 6), g.weight("c2", 1)], "y2")
    assert_unchanged(g.model(["y1", "y2"]), GEMMS)


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_parallel_convs_merge_into_one_conv_and_split(bias: bool) -> None:
    model = parallel_convs(bias=bias).model(["y1", "y2"])
    trip = optimized(model, cost=split_pays("Conv"))
    assert_fired(trip, CONVS)
    assert op_types(trip.model) == Counter({"Relu": 1, "Conv": 1, "Split": 1})
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("build", "rule"), [(lambda: parallel_matmuls([3, 4]), MATMULS), (lambda: parallel_convs(bias=True), CONVS)]
)
def test_merge_is_only_an_alternative_under_the_uniform_cost(build: object, rule: str) -> None:
    model = build().model(["y1", "y2"])
    trip = optimized(model)
    assert_fired(trip, rule)
    assert op_types(trip.model) == op_types(model)  # two products of cost 1 against product + Split: a tie
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("common", "second"),
    [
        ({"group": 2}, {}),
        ({}, {"group": 2}),
        ({}, {"strides": [2, 2]}),
        ({}, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ],
    ids=["both_grouped", "one_grouped", "strided", "dilated"],
)
def test_grouped_convs_or_convs_with_different_attributes_are_not_merged(common: dict, second: dict) -> None:
    model = parallel_convs(bias=True, common=common, **second).model(["y1", "y2"])
    assert_unchanged(model, CONVS)


def test_merge_needs_opset_13() -> None:
    model = parallel_convs(bias=False).model(["y1", "y2"], opset=12)
    assert_unchanged(model, CONVS)


def test_matmuls_of_different_inputs_are_not_merged() -> None:
    g = Graph(seed=16)
    g.node("MatMul", [g.input("x", [3, 4]), g.weight("w1", 4, 5)], "y1")
    g.node("MatMul", [g.input("x2", [3, 4]), g.weight("w2", 4, 6)], "y2")
    assert_unchanged(g.model(["y1", "y2"]), MATMULS)


def test_matmuls_with_a_runtime_weight_are_not_merged() -> None:
    g = Graph(seed=16)
    x = g.input("x", [3, 4])
    g.node("MatMul", [x, g.weight("w1", 4, 5)], "y1")
    g.node("MatMul", [x, g.input("w2", [4, 6])], "y2")
    assert_unchanged(g.model(["y1", "y2"]), MATMULS)


@pytest.mark.parametrize("op", ["MatMul", "Conv"])
def test_a_merge_that_saves_cost_is_extracted(op: str) -> None:
    builder = parallel_matmuls([3, 4]) if op == "MatMul" else parallel_convs(bias=False)
    model = builder.model(["y1", "y2"])
    trip = optimized(model, cost=split_pays(op, split=0.001))  # merged: 10.001, originals: 20
    assert op_types(trip.model) == Counter({"Relu": 1, op: 1, "Split": 1})
    check_and_compare(model, trip.model)


def test_products_whose_weight_another_node_reads_are_not_merged() -> None:
    """The merged weight is a new constant; a weight read elsewhere too would stay in the file beside it
    (basic-pitch shares one filter bank among 16 Convs: merging two grew its file by 31%)."""
    g = parallel_matmuls([3, 4])
    g.node("MatMul", [g.input("other", [2, 4]), "w1"], "y3")
    assert_unchanged(g.model(["y1", "y2", "y3"]), MATMULS)
