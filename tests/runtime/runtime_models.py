"""Small models for the runtime tests, built with onnx.helper (IR 9: ORT 1.31 rejects onnx 1.23's default IR)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def _const(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def conv_bn_relu(channels: int = 8) -> onnx.ModelProto:
    """Conv + BatchNormalization + Relu: ORT basic folds the BN, extended fuses the Relu, all goes NCHWc."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    variance = numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), "var")
    graph = helper.make_graph(
        nodes,
        "conv_bn_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 8, 8])],
        [
            _const(rng, "w", channels, 3, 3, 3),
            _const(rng, "b", channels),
            _const(rng, "scale", channels),
            _const(rng, "bias", channels),
            _const(rng, "mean", channels),
            variance,
        ],
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=9)
    onnx.checker.check_model(model)
    return model


def layer_norm_gelu(hidden: int = 16) -> onnx.ModelProto:
    """MatMul, then LayerNorm and Gelu spelled out in primitive ops, as older exporters wrote them.

    ORT's transformers optimizer fuses the LayerNorm pattern into LayerNormalization and the Erf
    pattern into Gelu (``model_type='bert'``).
    """
    rng = np.random.default_rng(1)

    def scalar(name: str, value: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, np.float32), name)

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("ReduceMean", ["h"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["h", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["z"]),
        helper.make_node("Mul", ["z", "gamma"], ["zg"]),
        helper.make_node("Add", ["zg", "beta"], ["ln"]),
        helper.make_node("Div", ["ln", "sqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "one"], ["g2"]),
        helper.make_node("Mul", ["ln", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "layer_norm_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, hidden])],
        [
            _const(rng, "w", hidden, hidden),
            _const(rng, "gamma", hidden),
            _const(rng, "beta", hidden),
            scalar("two", 2.0),
            scalar("eps", 1e-5),
            scalar("sqrt2", float(np.sqrt(2.0))),
            scalar("one", 1.0),
            scalar("half", 0.5),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model
