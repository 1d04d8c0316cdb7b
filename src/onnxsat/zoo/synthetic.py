"""Models built in-process with ``onnx.helper``: the demo CNN, SimpleClassifier, the scale benchmark's graphs.

Weights are seeded random values; BatchNormalization variances are positive and its statistics are
perturbed away from the identity so that folding them is a real computation, not a no-op.
IR version 9 is set explicitly: onnx 1.23 defaults to an IR that ONNX Runtime 1.31 rejects.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 9
OPSET = 17


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def weight(self, name: str, *shape: int, scale: float = 0.1) -> str:
        self.initializers.append(
            numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name)
        )
        return name

    def batchnorm_params(self, prefix: str, channels: int) -> list[str]:
        values = {
            "scale": 1.0 + 0.1 * self.rng.standard_normal(channels),
            "bias": 0.1 * self.rng.standard_normal(channels),
            "mean": 0.1 * self.rng.standard_normal(channels),
            "var": 0.5 + self.rng.random(channels),
        }
        for key, value in values.items():
            self.initializers.append(numpy_helper.from_array(value.astype(np.float32), f"{prefix}_{key}"))
        return [f"{prefix}_{key}" for key in values]

    def node(self, op: str, inputs: list[str], output: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=f"{output}_node", **attrs))
        return output

    def conv_bn(self, x: str, prefix: str, c_in: int, c_out: int, group: int = 1) -> str:
        w = self.weight(f"{prefix}_w", c_out, c_in // group, 3, 3)
        conv = self.node("Conv", [x, w], f"{prefix}_conv", pads=[1, 1, 1, 1], group=group)
        return self.node("BatchNormalization", [conv, *self.batchnorm_params(f"{prefix}_bn", c_out)], f"{prefix}_bn")

    def model(self, name: str, x: onnx.ValueInfoProto, y: onnx.ValueInfoProto) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [x], [y], self.initializers)
        return helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="onnxsat"
        )


def demo_cnn(seed: int = 0, batch: int | str = 1) -> onnx.ModelProto:
    """A small image classifier with the patterns the fusion rules target.

    Conv+BN+Relu, Conv+BN+Clip (ReLU6, as in MobileNet), a depthwise Conv+BN+Relu, MaxPool, and a
    Gemm+Relu head: 3x64x64 input, 10 classes.
    """
    b = _Builder(seed)
    h = b.node("Relu", [b.conv_bn("input", "stem", 3, 16)], "stem_relu")
    h = b.node("MaxPool", [h], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    six = [b.weight("clip_min", scale=0.0), "clip_max"]
    b.initializers.append(numpy_helper.from_array(np.array(6.0, dtype=np.float32), "clip_max"))
    h = b.node("Clip", [b.conv_bn(h, "block1", 16, 32), *six], "block1_relu6")
    h = b.node("Relu", [b.conv_bn(h, "dw", 32, 32, group=32)], "dw_relu")
    h = b.node("MaxPool", [h], "pool2", kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("Relu", [b.conv_bn(h, "block2", 32, 64)], "block2_relu")
    h = b.node("GlobalAveragePool", [h], "gap")
    h = b.node("Flatten", [h], "flat", axis=1)
    h = b.node(
        "Relu", [b.node("Gemm", [h, b.weight("fc1_w", 128, 64), b.weight("fc1_b", 128)], "fc1", transB=1)], "fc1_relu"
    )
    b.node("Gemm", [h, b.weight("fc2_w", 10, 128), b.weight("fc2_b", 10)], "logits", transB=1)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 64, 64])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])
    return b.model("demo_cnn", x, y)


def simple_classifier(seed: int = 0, batch: int | str = 1) -> onnx.ModelProto:
    """SimpleClassifier, PyTorch's "60 Minute Blitz" CIFAR-10 CNN, built without PyTorch.

    3x32x32 input -> Conv 5x5 (3->6) -> Relu -> MaxPool 2 -> Conv 5x5 (6->16) -> Relu -> MaxPool 2 ->
    Flatten -> Gemm (400->120) -> Relu -> Gemm (120->84) -> Relu -> Gemm (84->10). Weights and biases
    are seeded random values (PyTorch's default init scale); 62,006 parameters, as the PyTorch model
    has. ``x.view(-1, 400)`` is written as Flatten, which adds no shape initializer.
    """
    b = _Builder(seed)

    def linear(x: str, name: str, c_in: int, c_out: int, relu: bool) -> str:
        scale = c_in**-0.5
        y = b.node(
            "Gemm",
            [x, b.weight(f"{name}_w", c_out, c_in, scale=scale), b.weight(f"{name}_b", c_out, scale=scale)],
            name,
            transB=1,
        )
        return b.node("Relu", [y], f"{name}_relu") if relu else y

    h = "input"
    for name, c_in, c_out in (("conv1", 3, 6), ("conv2", 6, 16)):
        scale = (c_in * 25) ** -0.5
        w, bias = b.weight(f"{name}_w", c_out, c_in, 5, 5, scale=scale), b.weight(f"{name}_b", c_out, scale=scale)
        h = b.node("Relu", [b.node("Conv", [h, w, bias], name)], f"{name}_relu")
        h = b.node("MaxPool", [h], f"{name}_pool", kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("Flatten", [h], "flatten", axis=1)
    h = linear(linear(h, "fc1", 400, 120, relu=True), "fc2", 120, 84, relu=True)
    linear(h, "logits", 84, 10, relu=False)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 32, 32])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])
    return b.model("simple_classifier", x, y)


def conv_bn_relu_chain(blocks: int, channels: int = 4, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    """``blocks`` Conv-BN-Relu blocks in a row (3 nodes each): deep, no sharing."""
    b = _Builder(seed)
    h = "input"
    for i in range(blocks):
        h = b.node("Relu", [b.conv_bn(h, f"b{i}", channels, channels)], f"b{i}_relu")
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, size, size])
    y = helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, channels, size, size])
    return b.model("conv_bn_relu_chain", x, y)


def densenet_like(layers: int, growth: int = 2, size: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A DenseNet-style DAG: each layer (BN-Relu-Conv) reads the concatenation of every earlier output.

    Heavy sharing: every feature map has up to ``layers`` readers, so a decoder that is not memoized
    per tensor, or a tree cost model, blows up exponentially here.
    """
    b = _Builder(seed)
    features = ["input"]
    channels = growth
    for i in range(layers):
        concat = b.node("Concat", list(features), f"l{i}_concat", axis=1) if len(features) > 1 else features[0]
        bn = b.node("BatchNormalization", [concat, *b.batchnorm_params(f"l{i}_bn", channels)], f"l{i}_bn")
        relu = b.node("Relu", [bn], f"l{i}_relu")
        w = b.weight(f"l{i}_w", growth, channels, 3, 3)
        features.append(b.node("Conv", [relu, w], f"l{i}_conv", pads=[1, 1, 1, 1]))
        channels += growth
    out = b.node("Concat", list(features), "final_concat", axis=1)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, growth, size, size])
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, channels, size, size])
    return b.model("densenet_like", x, y)
