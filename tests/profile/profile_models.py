"""Tiny graphs with hand-checkable figures for the profile tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32), name)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, Sequence[int | str]]],
    outputs: Sequence[str],
    initializers: Sequence[onnx.TensorProto] = (),
    microsoft: bool = False,
) -> onnx.ModelProto:
    """A float32 model; outputs are declared without shapes (shape inference fills them in)."""
    graph = helper.make_graph(
        list(nodes),
        "profile_test",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)) for name, shape in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        list(initializers),
    )
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if microsoft else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def conv_relu(fused: bool = False) -> onnx.ModelProto:
    """x [1,3,10,10] -> Conv 3x3 pad 1 (3->8, bias) -> Relu, or the same as one com.microsoft FusedConv."""
    initializers = [weight("w", 8, 3, 3, 3), weight("b", 8)]
    if fused:
        nodes = [
            helper.make_node(
                "FusedConv",
                ["x", "w", "b"],
                ["y"],
                "conv",
                domain="com.microsoft",
                pads=[1, 1, 1, 1],
                activation="Relu",
            )
        ]
    else:
        nodes = [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], "conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], "relu"),
        ]
    return model(nodes, [("x", [1, 3, 10, 10])], ["y"], initializers, microsoft=fused)
