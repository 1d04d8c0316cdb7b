"""Clamps written as Max and Min become Clip and Relu (rules/clamp_forms.py), and then fuse into a Conv.

Feeds hold NaN, infinities, zeros of both signs and values on each side of the bounds: ONNX Runtime must
compute the same (NaN where NaN) on the original and on the result.
"""

from __future__ import annotations

import numpy as np
import pytest
from eqsat_helpers import check_and_compare, op_types
from onnx import TensorProto
from rule_builders import Graph, assert_fired, assert_unchanged, optimized

CLIP = "Min(Max(x, lo), hi) -> Clip"
RELU = "Max(x, 0) -> Relu"
SPECIAL = np.array([np.nan, -np.inf, np.inf, -1.0, 3.0, 7.0, 0.0, -0.0, 6.0, 0.5, 2.0, 5.0], np.float32)


def feeds(dtype: type = np.float32) -> dict[str, np.ndarray]:
    return {"x": np.stack([SPECIAL, -SPECIAL]).astype(dtype)}


def clamp(lo: float, hi: float, *, swap_max: bool = False, swap_min: bool = False, bound_shape: tuple = ()) -> Graph:
    """x [2, 12] -> Max(x, lo) -> Min(., hi) -> y, with either operand order of each."""
    g = Graph()
    x = g.input("x", [2, 12])
    low = g.const("lo", np.full(bound_shape, lo, np.float32))
    high = g.const("hi", np.full(bound_shape, hi, np.float32))
    m = g.node("Max", [low, x] if swap_max else [x, low], "m")
    g.node("Min", [high, m] if swap_min else [m, high], "y")
    return g


@pytest.mark.parametrize(("swap_max", "swap_min"), [(False, False), (True, False), (False, True), (True, True)])
def test_max_then_min_is_clip_in_any_operand_order(swap_max: bool, swap_min: bool) -> None:
    model = clamp(0.0, 6.0, swap_max=swap_max, swap_min=swap_min).model(["y"])
    trip = optimized(model)
    assert_fired(trip, CLIP)
    assert op_types(trip.model) == {"Clip": 1}
    check_and_compare(model, trip.model, feeds())


def test_bounds_in_the_wrong_order_clip_as_onnx_defines() -> None:
    """lo > hi: Min(Max(x, 5), 2) is 2 everywhere but NaN, and so is Clip(x, 5, 2) by its definition."""
    model = clamp(5.0, 2.0).model(["y"])
    trip = optimized(model)
    assert op_types(trip.model) == {"Clip": 1}
    (result,) = check_and_compare(model, trip.model, feeds())
    assert np.all((result == 2.0) | np.isnan(result))


@pytest.mark.parametrize("swap", [False, True])
def test_max_with_zero_is_relu(swap: bool) -> None:
    g = Graph()
    x = g.input("x", [2, 12])
    zero = g.const("zero", np.array(0.0, np.float32))
    g.node("Max", [zero, x] if swap else [x, zero], "y")
    model = g.model(["y"])
    trip = optimized(model)
    assert_fired(trip, RELU)
    assert op_types(trip.model) == {"Relu": 1}
    check_and_compare(model, trip.model, feeds())


def test_relu6_after_conv_fuses_into_the_conv() -> None:
    """The point of the rewrite: ORT's FusedConv takes a Clip, never a Max or a Min."""
    g = Graph()
    c = g.node("Conv", [g.input("x", [1, 3, 6, 6]), g.weight("w", 4, 3, 3, 3), g.weight("b", 4)], "c", pads=[1] * 4)
    m = g.node("Max", [c, g.const("lo", np.array(0.0, np.float32))], "m")
    g.node("Min", [m, g.const("hi", np.array(0.5, np.float32))], "y")
    model = g.model(["y"])
    trip = optimized(model, target="ort")
    assert op_types(trip.model) == {"com.microsoft::FusedConv": 1}
    check_and_compare(model, trip.model)


def test_float16_and_double_clamps_become_clip() -> None:
    for elem, dtype in ((TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64)):
        g = Graph()
        x = g.input("x", [2, 12], elem)
        m = g.node("Max", [x, g.const("lo", np.array(0.0, dtype))], "m")
        g.node("Min", [m, g.const("hi", np.array(6.0, dtype))], "y")
        model = g.model(["y"], output_types={"y": elem})
        trip = optimized(model)
        assert op_types(trip.model) == {"Clip": 1}, dtype
        check_and_compare(model, trip.model, feeds(dtype))


def test_near_misses_stay() -> None:
    # A [1] bound broadcasts (Clip takes scalars only).
    assert_unchanged(clamp(0.0, 6.0, bound_shape=(1,)).model(["y"]), CLIP, RELU)
    # Integer clamps: Clip takes them only from opset 12, Relu from 14; left alone.
    g = Graph()
    x = g.input("x", [2, 3], TensorProto.INT32)
    m = g.node("Max", [x, g.const("lo", np.array(0, np.int32))], "m")
    g.node("Min", [m, g.const("hi", np.array(6, np.int32))], "y")
    assert_unchanged(g.model(["y"], output_types={"y": TensorProto.INT32}), CLIP, RELU)
    # Min first, then Max: Clip only when lo <= hi, which the rules cannot read.
    g = Graph()
    x = g.input("x", [2, 12])
    m = g.node("Min", [x, g.const("hi", np.array(6.0, np.float32))], "m")
    g.node("Max", [m, g.const("lo", np.array(1.0, np.float32))], "y")
    assert_unchanged(g.model(["y"]), CLIP, RELU)
    # Before opset 11, Clip's bounds are attributes: the Max alone becomes a Relu.
    model = clamp(0.0, 6.0).model(["y"], opset=10)
    trip = optimized(model)
    assert op_types(trip.model) == {"Relu": 1, "Min": 1}
    check_and_compare(model, trip.model, feeds())
    # A bound that is a model input is still a scalar: Clip takes it.
    g = Graph()
    x = g.input("x", [2, 12])
    m = g.node("Max", [x, g.input("lo", [])], "m")
    g.node("Min", [m, g.const("hi", np.array(6.0, np.float32))], "y")
    trip = optimized(g.model(["y"]))
    assert op_types(trip.model) == {"Clip": 1}
