"""Per-channel Mul and Add after a BatchNormalization folded into its parameters (rules/bn_folding.py).

    BN(x) * c  ==>  BN(x; gamma * c, beta * c)        BN(x) + c  ==>  BN(x; gamma, beta + c)

Caffe2 conversions write these after every BatchNormalization (DenseNet's pre-activation blocks); they
fold only when ``c`` is constant, lined up with the channel axis (or a single value), and the
BatchNormalization output has no other reader.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, op_types
from rule_builders import Graph, assert_fired, assert_unchanged, initializer, only_node, optimized
from test_rules_bn_forward import bn_params

SCALE = "BatchNormalization+Mul -> BatchNormalization"
SHIFT = "BatchNormalization+Add -> BatchNormalization"


def bn_affine(
    scale_shape: list[int], shift_shape: list[int], *, extra_reader: bool = False, batch: int = 2
) -> onnx.ModelProto:
    """x [batch, 4, 5, 6] -> BatchNormalization -> Mul(scale) -> Add(shift) -> Relu -> y."""
    g = Graph(seed=7)
    x = g.input("x", [batch, 4, 5, 6])
    normalized = g.node("BatchNormalization", [x, *bn_params(g, 4)], "bn")
    scale = g.const("scale", g.rng.uniform(0.5, 1.5, scale_shape).astype(np.float32))
    shift = g.const("shift", g.rng.normal(0, 1, shift_shape).astype(np.float32))
    shifted = g.node("Add", [g.node("Mul", [normalized, scale], "scaled"), shift], "shifted")
    g.node("Relu", [shifted], "y")
    outputs = ["y"]
    if extra_reader:
        g.node("Neg", [normalized], "also")
        outputs.append("also")
    return g.model(outputs)


@pytest.mark.parametrize(
    ("scale_shape", "shift_shape"),
    [([4, 1, 1], [4, 1, 1]), ([1, 4, 1, 1], [1, 4, 1, 1]), ([1], []), ([1, 1, 1], [4, 1, 1])],
    ids=["per_channel", "per_channel_batch_axis", "scalars", "single_value_and_per_channel"],
)
def test_channel_constants_fold_into_batchnorm(scale_shape: list[int], shift_shape: list[int]) -> None:
    model = bn_affine(scale_shape, shift_shape)
    trip = optimized(model)
    assert_fired(trip, SCALE)
    assert_fired(trip, SHIFT)
    assert op_types(trip.model) == Counter({"BatchNormalization": 1, "Relu": 1})
    check_and_compare(model, trip.model)


def test_folded_parameters_are_scaled_and_shifted() -> None:
    model = bn_affine([4, 1, 1], [4, 1, 1])
    trip = optimized(model)
    values = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    bn = only_node(trip.model, "BatchNormalization")
    scale, shift = values["scale"].reshape(-1), values["shift"].reshape(-1)
    np.testing.assert_allclose(initializer(trip.model, bn.input[1]), values["gamma"] * scale, rtol=1e-6)
    np.testing.assert_allclose(initializer(trip.model, bn.input[2]), values["beta"] * scale + shift, rtol=1e-5)


@pytest.mark.parametrize(
    ("scale_shape", "extra_reader"),
    [([1, 1, 1, 6], False), ([5, 1], False), ([4, 1, 1], True)],
    ids=["along_width", "along_height", "batchnorm_read_twice"],
)
def test_constants_not_lined_up_with_channels_or_shared_output_are_kept(
    scale_shape: list[int], extra_reader: bool
) -> None:
    model = bn_affine(scale_shape, [1], extra_reader=extra_reader)
    assert_unchanged(model, SCALE)


def test_constant_that_grows_the_output_is_kept() -> None:
    """A [4, 1, 1, 1] constant (the per-channel shape of a rank-5 BatchNormalization) broadcasts the
    [1, 4, 5, 6] output to [4, 4, 5, 6]: folding it would lose the growth."""
    model = bn_affine([4, 1, 1, 1], [1], batch=1)
    assert_unchanged(model, SCALE)
