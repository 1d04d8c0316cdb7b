"""A zero Pad folded into the padding of the Conv or AveragePool after it (rules/pad_folding.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, ints_attr, only_node, optimized

PAD_CONV = "Pad+Conv -> Conv"
PAD_POOL = "Pad+AveragePool -> AveragePool"


def padded(
    consumer: str,
    pad_values: list[int],
    *,
    value: str | None = None,
    dims: int = 2,
    pad_attrs: dict | None = None,
    **attrs: object,
) -> Graph:
    """x -> Pad(pads[, value]) -> consumer (kernel 3) -> y; ``value`` "zero", "absent" or "nonzero"."""
    g = Graph(seed=dims)
    x = g.input("x", [2, 3] + [5] * dims)
    pad_inputs = [x, g.ints("pads", pad_values)]
    if value == "zero":
        pad_inputs.append(g.const("value", np.array(0.0, np.float32)))
    elif value == "nonzero":
        pad_inputs.append(g.const("value", np.array(0.5, np.float32)))
    elif value == "absent":
        pad_inputs.append("")
    p = g.node("Pad", pad_inputs, "p", **(pad_attrs or {}))
    if consumer == "Conv":
        channels = 3 + pad_values[1] + pad_values[len(pad_values) // 2 + 1]  # a channel Pad makes more
        g.node("Conv", [p, g.weight("w", 4, channels, *[3] * dims), g.weight("b", 4)], "y", **attrs)
    else:
        g.node(consumer, [p], "y", kernel_shape=[3] * dims, **attrs)
    return g


@pytest.mark.parametrize(
    ("consumer", "pads", "value", "dims", "attrs", "expected_pads"),
    [
        ("Conv", [0, 0, 1, 2, 0, 0, 1, 0], None, 2, {}, [1, 2, 1, 0]),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], "zero", 2, {"pads": [1, 0, 0, 2]}, [2, 1, 1, 3]),
        ("Conv", [0, 0, 2, 0, 0, 3], "absent", 1, {"strides": [2]}, [2, 3]),
    ],
    ids=["conv", "conv_own_pads_zero_value", "conv1d_absent_value"],
)
def test_zero_pad_folds_into_the_window_op(
    consumer: str, pads: list[int], value: str | None, dims: int, attrs: dict, expected_pads: list[int]
) -> None:
    model = padded(consumer, pads, value=value, dims=dims, **attrs).model(["y"])
    trip = optimized(model)
    assert_fired(trip, PAD_CONV if consumer == "Conv" else PAD_POOL)
    assert op_types(trip.model) == Counter({consumer: 1})
    node = only_node(trip.model, consumer)
    assert node.input[0] == "x"
    assert ints_attr(node, "pads") == expected_pads
    check_and_compare(model, trip.model)


@pytest.mark.parametrize(
    ("consumer", "pads", "value", "pad_attrs", "attrs"),
    [
        ("Conv", [0, 1, 1, 1, 0, 1, 1, 1], None, {}, {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], "nonzero", {}, {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], None, {"mode": "reflect"}, {}),
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {"auto_pad": "SAME_UPPER"}),
        ("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {}),
        ("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], None, {}, {"count_include_pad": 0}),
    ],
    ids=[
        "channel_pads",
        "nonzero_value",
        "reflect_mode",
        "conv_auto_pad",
        "maxpool",
        "avgpool_excludes_pads",
    ],
)
def test_pad_that_cannot_move_into_the_op_is_kept(
    consumer: str, pads: list[int], value: str | None, pad_attrs: dict, attrs: dict
) -> None:
    model = padded(consumer, pads, value=value, pad_attrs=pad_attrs, **attrs).model(["y"])
    assert_unchanged(model, PAD_CONV, PAD_POOL)


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
