"""Verification tolerances widen to the precision a model actually computes in, never narrow."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxsat.inputs import random_inputs
from onnxsat.verification import Tolerance


def model_with(nodes: list[onnx.NodeProto], in_type: int, out_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", in_type, [2, 3])],
        [helper.make_tensor_value_info("y", out_type, [2, 3])],
    )
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def test_float32_model_keeps_the_given_tolerance() -> None:
    model = model_with([helper.make_node("Relu", ["x"], ["y"])], TensorProto.FLOAT, TensorProto.FLOAT)
    assert Tolerance().for_model(model) == Tolerance()


def test_float16_inside_a_float32_model_widens_every_output() -> None:
    """A float32 output computed through float16 has float16 accuracy."""
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT),
    ]
    model = model_with(nodes, TensorProto.FLOAT, TensorProto.FLOAT)
    assert Tolerance().for_model(model) == Tolerance(1e-2, 1e-3)


def test_bfloat16_floor_is_wider_and_user_tolerance_is_never_narrowed() -> None:
    model = model_with([helper.make_node("Relu", ["x"], ["y"])], TensorProto.BFLOAT16, TensorProto.BFLOAT16)
    assert Tolerance().for_model(model) == Tolerance(5e-2, 1e-2)
    assert Tolerance(0.5, 0.5).for_model(model) == Tolerance(0.5, 0.5)


def test_zero_dimensional_inputs_are_arrays_of_every_type() -> None:
    """ONNX Runtime refuses numpy scalars; a 0-D input must be an ndarray whatever its type."""
    types = (TensorProto.BOOL, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8)
    for elem_type in types:
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", elem_type, [])],
            [helper.make_tensor_value_info("y", elem_type, [])],
        )
        feeds = random_inputs(helper.make_model(graph, ir_version=9))
        assert isinstance(feeds["x"], np.ndarray) and feeds["x"].shape == ()
        assert feeds["x"].dtype == helper.tensor_dtype_to_np_dtype(elem_type)
