"""A Pad folded into the padding of the Conv or pool after it (rules/pad_folding.py, eqsat/window_pads.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, ints_attr, only_node, optimized

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model

PAD_CONV = "Pad+Conv -> Conv"
PAD_POOL = "Pad+AveragePool -> AveragePool"
PAD_MAX = "Pad+MaxPool -> MaxPool"


def padded(
    consumer: str,
    pad_values: list[int],
    *,
    value: str | None = None,
    dims: int = 2,
    pad_attrs: dict | None = None,
    relu: bool = False,
    **attrs: object,
) -> Graph:
    """x [-> Relu] -> Pad(pads[, value]) -> consumer (kernel 3) -> y; ``value`` "zero", "absent",
    "nonzero" or "-inf"."""
    g = Graph(seed=dims)
    x = g.input("x", [2, 3] + [5] * dims)
    if relu:
        x = g.node("Relu", [x], "r")
    pad_inputs = [x, g.ints("pads", pad_values)]
    if value == "zero":
        pad_inputs.append(g.const("value", np.array(0.0, np.float32)))
    elif value == "nonzero":
        pad_inputs.append(g.const("value", np.array(0.5, np.float32)))
    elif value == "-inf":
        pad_inputs.append(g.const("value", np.array(-np.inf, np.float32)))
    elif value == "absent":
        pad_inputs.append("")
    p = g.node("Pad", pad_inputs, "p", **(pad_attrs or {}))
    if consumer == "Conv":
        channels = 3 + pad_values[1] + pad_values[len(pad_values) // 2 + 1]  # a channel Pad makes more
        g.node("Conv", [p, g.weight("w", 4, channels, *[3] * dims), g.weight("b", 4)], "y", **attrs)
    else:
        g.node(consumer, [p], "y", kernel_shape=[3] * dims, **attrs)
    return g


FIRES = {"Conv": PAD_CONV, "AveragePool": PAD_POOL, "MaxPool": PAD_MAX}


@pytest.mark.parametrize(
    ("consumer", "pads", "value", "dims", "attrs", "expected_pads"),
    [
        ("Conv", [0, 0, 1, 2, 0, 0, 1, 0], None, 2, {}, [1, 2, 1, 0]),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], "zero", 2, {"pads": [1, 0, 0, 2]}, [2, 1, 1, 3]),
        ("Conv", [0, 0, 2, 0, 0, 3], "absent", 1, {"strides": [2]}, [2, 3]),
        (
            "AveragePool",
            [0, 0, 1, 0, 0, 0, 1, 1],
            None,
            2,
            {"count_include_pad": 1, "pads": [1, 0, 0, 1]},
            [2, 0, 1, 2],
        ),
        ("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], "zero", 2, {"count_include_pad": 0}, [1, 1, 1, 1]),
        ("AveragePool", [0, 0, 2, 0, 0, 2], None, 1, {"strides": [2]}, [2, 2]),
        ("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], "-inf", 2, {"pads": [1, 0, 0, 0]}, [2, 1, 1, 1]),
    ],
    ids=[
        "conv",
        "conv_own_pads_zero_value",
        "conv1d_absent_value",
        "avgpool_counting_own_pads",
        "avgpool_excluding_no_own_pads",
        "avgpool1d_default_excludes",
        "maxpool_minus_inf",
    ],
)
def test_pad_folds_into_the_window_op(
    consumer: str, pads: list[int], value: str | None, dims: int, attrs: dict, expected_pads: list[int]
) -> None:
    assert_folded(padded(consumer, pads, value=value, dims=dims, **attrs).model(["y"]), consumer, expected_pads)


def assert_folded(model: onnx.ModelProto, consumer: str, expected_pads: list[int]) -> None:
    """The Pad went into ``consumer``, which now reads x with ``expected_pads``; the outputs are the same."""
    trip = optimized(model)
    assert_fired(trip, FIRES[consumer])
    assert op_types(trip.model) == Counter({consumer: 1})
    node = only_node(trip.model, consumer)
    assert node.input[0] == "x"
    assert ints_attr(node, "pads") == expected_pads
    if consumer == "AveragePool":
        assert any(a.name == "count_include_pad" and a.i == 1 for a in node.attribute)
    check_and_compare(model, trip.model)


def test_zero_pad_after_relu_folds_into_max_pool() -> None:
    """Every window holds a real value >= 0 (pads narrower than the kernel), so zeros never win."""
    model = padded("MaxPool", [0, 0, 2, 1, 0, 0, 0, 2], relu=True, strides=[2, 2]).model(["y"])
    trip = optimized(model)
    assert_fired(trip, PAD_MAX)
    assert op_types(trip.model) == Counter({"Relu": 1, "MaxPool": 1})
    assert ints_attr(only_node(trip.model, "MaxPool"), "pads") == [2, 1, 0, 2]
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("consumer", "pads", "value", "pad_attrs", "attrs"),
    [
        ("Conv", [0, 1, 1, 1, 0, 1, 1, 1], None, {}, {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], "nonzero", {}, {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], None, {"mode": "reflect"}, {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {"auto_pad": "SAME_UPPER"}),
        ("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {}),
        ("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {"count_include_pad": 0, "pads": [1, 1, 1, 1]}),
        ("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], "nonzero", {}, {"count_include_pad": 1}),
        ("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {"auto_pad": "SAME_UPPER"}),
        ("AveragePool", [0, 1, 1, 1, 0, 0, 1, 1], None, {}, {"count_include_pad": 1}),
        ("AveragePool", [0, 0, 2, 1, 0, 0, 1, 1], None, {}, {"count_include_pad": 1, "pads": [1, 0, 0, 0]}),
        ("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], "-inf", {}, {"dilations": [2, 2]}),
        ("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], "-inf", {}, {"ceil_mode": 1, "strides": [2, 2]}),
    ],
    ids=[
        "channel_pads",
        "nonzero_value",
        "reflect_mode",
        "conv_auto_pad",
        "maxpool_zero_pad_may_win",
        "avgpool_excludes_own_pads",
        "avgpool_nonzero_value",
        "avgpool_auto_pad",
        "avgpool_channel_pads",
        "avgpool_pads_reach_kernel",
        "maxpool_dilated",
        "maxpool_ceil_mode",
    ],
)
def test_pad_that_cannot_move_into_the_op_is_kept(
    consumer: str, pads: list[int], value: str | None, pad_attrs: dict, attrs: dict
) -> None:
    model = padded(consumer, pads, value=value, pad_attrs=pad_attrs, **attrs).model(["y"])
    assert_unchanged(model, PAD_CONV, PAD_POOL, PAD_MAX)


def test_max_pool_returning_indices_keeps_its_pad() -> None:
    """The indices would count positions in the unpadded input."""
    g = padded("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], value="-inf")
    g.nodes[-1].output.append("indices")
    assert_unchanged(g.model(["y"]), PAD_MAX)


def test_pad_with_a_second_reader_is_kept() -> None:
    g = padded("Conv", [0, 0, 1, 1, 0, 0, 1, 1])
    g.node("Relu", ["p"], "other")
    assert_unchanged(g.model(["y", "other"]), PAD_CONV)


def test_pad_into_ceil_mode_average_pool_keeps_the_output() -> None:
    g = Graph()
    p = g.node("Pad", [g.input("x", [1, 1, 4, 4]), g.ints("pads", [0, 0, 0, 0, 0, 0, 1, 1])], "p")
    g.node("AveragePool", [p], "y", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1)
    model = g.model(["y"])
    trip = optimized(model)
    onnx.checker.check_model(trip.model)
    check_and_compare(model, trip.model)


def test_pad_as_wide_as_the_pool_kernel_keeps_a_loadable_model() -> None:
    g = Graph()
    p = g.node("Pad", [g.input("x", [1, 1, 4, 4]), g.ints("pads", [0, 0, 2, 2, 0, 0, 2, 2])], "p")
    g.node("AveragePool", [p], "y", kernel_shape=[2, 2], count_include_pad=1)
    model = g.model(["y"])
    check_and_compare(model, optimized(model).model)


def attribute_padded(consumer: str, pads: list[int], opset: int = 9, **pad_attrs: object) -> onnx.ModelProto:
    """x -> Pad (opset < 11: pads and value as attributes) -> consumer (kernel 3) -> y."""
    g = Graph(seed=opset)
    p = g.node("Pad", [g.input("x", [2, 3, 5, 5])], "p", pads=pads, **pad_attrs)
    if consumer == "Conv":
        channels = 3 + pads[1] + pads[5]
        g.node("Conv", [p, g.weight("w", 4, channels, 3, 3), g.weight("b", 4)], "y", pads=[1, 0, 0, 0])
    else:
        counting = {"count_include_pad": 1} if consumer == "AveragePool" else {}
        g.node(consumer, [p], "y", kernel_shape=[3, 3], **counting)
    return g.model(["y"], opset=opset)


@pytest.mark.parametrize("opset", [7, 10])
@pytest.mark.parametrize(
    ("consumer", "pad_attrs", "expected_pads"),
    [
        ("Conv", {}, [1, 1, 1, 2]),
        ("Conv", {"mode": "constant", "value": 0.0}, [1, 1, 1, 2]),
        ("AveragePool", {}, [0, 1, 1, 2]),
        ("MaxPool", {"value": float("-inf")}, [0, 1, 1, 2]),
    ],
    ids=["conv", "conv_explicit_zero", "avgpool", "maxpool_minus_inf"],
)
def test_attribute_pad_of_old_opsets_folds(opset: int, consumer: str, pad_attrs: dict, expected_pads: list) -> None:
    """Before opset 11 (tf2onnx at opset 7-10) a Pad's pads are an attribute: folded all the same."""
    assert_folded(
        attribute_padded(consumer, [0, 0, 0, 1, 0, 0, 1, 2], opset=opset, **pad_attrs), consumer, expected_pads
    )


@pytest.mark.parametrize(
    ("consumer", "pads", "pad_attrs"),
    [
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], {"value": 0.5}),
        ("Conv", [0, 1, 1, 1, 0, 0, 1, 1], {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], {"mode": "edge"}),
        ("Conv", [0, 0, -1, 0, 0, 0, 1, 1], {}),
        ("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], {}),
    ],
    ids=["nonzero_value", "channel_pads", "edge_mode", "negative_pads", "maxpool_zero_pad_may_win"],
)
def test_attribute_pad_that_cannot_move_is_kept(consumer: str, pads: list[int], pad_attrs: dict) -> None:
    assert_unchanged(attribute_padded(consumer, pads, **pad_attrs), PAD_CONV, PAD_POOL, PAD_MAX)


def pads_from_sizes(batch: int | str) -> onnx.ModelProto:
    """x [batch, 3, 6, 6] -> Pad(x, pads computed from x's sizes as PyTorch writes F.pad's: Shape, Gather, Sub,
    Div, Concat, ConstantOfShape, Reshape, Transpose) -> Conv; the pads are [0, 0, 0, 0, 0, 0, 1, 1]."""
    g = Graph()
    x = g.input("x", [batch, 3, 6, 6])
    size = g.node("Gather", [g.node("Shape", [x], "shape"), g.ints("two", [2])], "size")  # [6]
    one = g.node("Div", [g.node("Sub", [size, g.ints("five", [5])], "sub"), g.ints("one", [1])], "div")  # [1]
    ends = g.node("Concat", [g.ints("zero", [0]), one, g.ints("zero2", [0]), one], "ends", axis=0)
    zeros = onnx.helper.make_tensor("v", onnx.TensorProto.INT64, [1], [0])
    starts = g.node("ConstantOfShape", [g.ints("four", [4])], "starts", value=zeros)
    pairs = g.node("Reshape", [g.node("Concat", [starts, ends], "all", axis=0), g.ints("shape2", [-1, 2])], "pairs")
    pads = g.node("Reshape", [g.node("Transpose", [pairs], "t", perm=[1, 0]), g.ints("flat", [-1])], "pads")
    p = g.node("Pad", [x, pads], "p")
    g.node("Conv", [p, g.weight("w", 4, 3, 3, 3), g.weight("b", 4)], "y")
    return g.model(["y"])


def test_pads_computed_from_the_input_sizes_fold_too() -> None:
    """The pads' value is known before the e-graph folds their chain (at decode time): the rule sees it."""
    model = pads_from_sizes(1)
    trip = optimized(model)
    assert_fired(trip, PAD_CONV)
    assert op_types(trip.model) == Counter({"Conv": 1})
    assert ints_attr(only_node(trip.model, "Conv"), "pads") == [0, 0, 1, 1]
    check_and_compare(model, trip.model)


def test_pads_computed_from_sizes_of_a_dynamic_batch_fold_in_optimize() -> None:
    """With a dynamic batch, the sizes read are the known ones (folded before encoding)."""
    model = pads_from_sizes("N")
    result, _ = optimize_model(model, OptimizeOptions(target="portable"))
    assert op_types(result) == Counter({"Conv": 1})
    check_and_compare(model, result)
