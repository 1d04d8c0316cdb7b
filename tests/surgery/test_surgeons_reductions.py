"""ReshapeReduceSum, ReshapeClipReduceSum and ReduceMax: structure and the same values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from catalogue_checks import applied, assert_same_values, initializer, make_model, node, op_types
from onnx import helper

from onnxsat.surgery.surgeons.four_d import StandaloneReduceSum
from onnxsat.surgery.surgeons.reductions import ReduceMax, ReshapeClipReduceSum, ReshapeReduceSum


def grouped(opset: int, clip: bool, keepdims: int) -> onnx.ModelProto:
    reduce_input = "c" if clip else "r"
    axes = {"axes": np.array([-1], dtype=np.int64)} if opset >= 13 else {}
    reduce = helper.make_node(
        "ReduceSum", [reduce_input, *axes], ["y"], keepdims=keepdims, **({} if axes else {"axes": [-1]})
    )
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"])]
    nodes += [helper.make_node("Clip", ["r", "lo", "hi"], ["c"])] if clip else []
    inits = {"shape": np.array([1, 3, 2, 4], dtype=np.int64), "lo": np.float32(-0.5), "hi": np.float32(0.5), **axes}
    return make_model(
        [*nodes, reduce],
        {"x": [1, 3, 8]},
        {"y": None},
        inits if clip else {"shape": inits["shape"], **axes},
        opset=opset,
    )


@pytest.mark.parametrize(("opset", "keepdims"), [(11, 1), (13, 0), (17, 1)])
def test_reshape_reducesum_becomes_two_parallel_slices(opset: int, keepdims: int) -> None:
    model = grouped(opset, clip=False, keepdims=keepdims)
    result = applied(ReshapeReduceSum(), model).model
    ops = op_types(result)
    assert ops.count("Slice") == 2 and ops.count("ReduceSum") == 2 and "Reshape" not in ops and "Concat" in ops
    assert_same_values(model, result)
    assert not StandaloneReduceSum().apply(result).changed  # the new sums are marked transformed


def test_reshape_clip_reducesum_becomes_slice_clip_reducesum_paths() -> None:
    model = grouped(17, clip=True, keepdims=1)
    result = applied(ReshapeClipReduceSum(), model).model
    assert op_types(result).count("Clip") == 2
    assert_same_values(model, result)
    assert not ReshapeReduceSum().apply(model).changed  # the Clip breaks the plain pattern


@pytest.mark.parametrize("opset", [13, 18])
def test_reducemax_reduces_axis_3_and_reshapes(opset: int) -> None:
    axes = {"axes": np.array([2], dtype=np.int64)} if opset >= 18 else {}
    reduce = helper.make_node("ReduceMax", ["x", *axes], ["y"], keepdims=0, **({} if axes else {"axes": [2]}))
    model = make_model([reduce], {"x": [2, 3, 5]}, {"y": None}, axes, opset=opset)
    result = applied(ReduceMax(), model).model
    assert op_types(result) == ["Unsqueeze", "ReduceMax", "Reshape"]
    assert initializer(result, node(result, "Reshape").input[1]).tolist() == [1, 1, 1, -1]
    (out,) = assert_same_values(model, result, same_shape=False)
    assert out.shape == (1, 1, 1, 6)
    assert not ReduceMax().apply(result).changed


def test_reducemax_over_another_axis_is_left_alone() -> None:
    model = make_model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[0])], {"x": [2, 3]}, {"y": None}, opset=13)
    outcome = ReduceMax().apply(model)
    assert not outcome.changed and "nothing" in outcome.notice
