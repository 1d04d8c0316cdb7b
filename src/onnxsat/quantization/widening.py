"""Quantized convolutions with too few input channels for ONNX Runtime's fast int8 kernel, widened to fit.

ORT runs a QLinearConv with symmetric int8 weights through MLAS's indirect ("ConvSym") kernel only when its
input channels are a multiple of 4 (and its output channels of 8, at least 16); otherwise it takes the
im2col path, several times slower per MAC. A network's stem reads 1 (grey) or 3 (RGB) channels, so it
misses the fast kernel. Here the quantized input is padded with its zero point up to the next multiple of
4 (a ``Pad`` on the uint8 tensor, which dequantizes to exact zeros) and the int8 weight gets as many
all-zero input channels: the convolution's result is the same number for number (with the weights static mode
writes: where full-range int8 products clip, 7-bit ones, see ``runtime.int8_sums``), and ORT picks the fast
kernel. Measured here (1 thread, batch 1): torchvision's ResNet-18 quantized whole, 1.04x (3.36x -> 3.50x over
float, outputs identical); a stem and one 3x3 convolution after it: an RGB 7x7 stride-2 stem at 224x224 1.10x, a
3x3 stem at 640x640 1.11x, a grey 3x3 stem at 32x32 1.13x.

It edits the quantized QDQ model (after ``quantize_static``), so calibration never sees a new tensor.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsat.node_order import sort_graph
from onnxsat.surgery.graph_edit import (
    drop_unused_initializers,
    initializers,
    producers,
    remove_where,
    unique_name,
    used_names,
)

CHANNEL_MULTIPLE = 4
"""Input channels MLAS's indirect int8 convolution kernel packs together."""
OUTPUT_MULTIPLE = 8
"""Output channels it needs a multiple of (8 with AVX2, 4 with AVX-512: the stricter one)."""
MIN_OUTPUTS = 16
"""Output channels it needs at least (one filter pack)."""


def widen_narrow_convolutions(model: onnx.ModelProto) -> list[str]:
    """Widen, in place, every quantized 2D convolution ``widenable`` finds; return their names."""
    graph = model.graph
    made = producers(graph)
    weights = initializers(graph)
    taken = used_names(graph)
    widened = []
    added: list[onnx.NodeProto] = []
    replaced: list[onnx.NodeProto] = []
    for node in graph.node:
        plan = _widenable(node, made, weights)
        if plan is None:
            continue
        input_dq, weight_dq, weight = plan
        channels = weight.dims[1]
        extra = -channels % CHANNEL_MULTIPLE
        values = numpy_helper.to_array(weight)
        zeros = np.zeros((values.shape[0], extra, *values.shape[2:]), dtype=values.dtype)
        wide_weight = numpy_helper.from_array(
            np.concatenate([values, zeros], axis=1), unique_name(graph, f"{weight.name}_widened", taken)
        )
        graph.initializer.append(wide_weight)
        pads = numpy_helper.from_array(
            np.array([0, 0, 0, 0, 0, extra, 0, 0], dtype=np.int64), unique_name(graph, f"{node.name}_pads", taken)
        )
        graph.initializer.append(pads)
        quantized, scale, zero_point = input_dq.input[0], input_dq.input[1], input_dq.input[2]
        padded = unique_name(graph, f"{quantized}_widened", taken)
        dequantized = unique_name(graph, f"{padded}_dequantized", taken)
        wide_weight_float = unique_name(graph, f"{wide_weight.name}_dequantized", taken)
        added += [
            helper.make_node("Pad", [quantized, pads.name, zero_point], [padded], name=f"{node.name}_widen_input"),
            helper.make_node(
                "DequantizeLinear", [padded, scale, zero_point], [dequantized], name=f"{node.name}_widened_input"
            ),
            helper.make_node(
                "DequantizeLinear",
                [wide_weight.name, *weight_dq.input[1:]],
                [wide_weight_float],
                name=f"{node.name}_widened_weight",
            ),
        ]
        added[-1].attribute.extend(weight_dq.attribute)  # its axis (per channel)
        node.input[0], node.input[1] = dequantized, wide_weight_float
        replaced += [input_dq, weight_dq]
        widened.append(node.name)
    graph.node.extend(added)
    _drop_unread(graph, replaced)
    sort_graph(graph)
    return widened


def _widenable(
    node: onnx.NodeProto, made: dict[str, onnx.NodeProto], weights: dict[str, onnx.TensorProto]
) -> tuple[onnx.NodeProto, onnx.NodeProto, onnx.TensorProto] | None:
    """(input DequantizeLinear, weight DequantizeLinear, int8 weight) of a Conv ORT would run as a symmetric
    QLinearConv but for its input channels; None for any other node."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    if any(a.name == "group" and a.i != 1 for a in node.attribute):
        return None
    input_dq, weight_dq = made.get(node.input[0]), made.get(node.input[1])
    if not (_is_dequantize(input_dq) and _is_dequantize(weight_dq)):
        return None
    assert input_dq is not None and weight_dq is not None
    weight = weights.get(weight_dq.input[0])
    if weight is None or weight.data_type != onnx.TensorProto.INT8 or len(weight.dims) != 4:
        return None
    outputs, channels = weight.dims[0], weight.dims[1]
    if channels % CHANNEL_MULTIPLE == 0 or outputs < MIN_OUTPUTS or outputs % OUTPUT_MULTIPLE:
        return None
    zero_points = weights.get(weight_dq.input[2]) if len(weight_dq.input) > 2 else None
    if zero_points is not None and np.any(numpy_helper.to_array(zero_points)):
        return None  # the fast kernel wants symmetric weights
    activation_zero = weights.get(input_dq.input[2]) if len(input_dq.input) > 2 else None
    if (
        activation_zero is None
        or activation_zero.data_type != onnx.TensorProto.UINT8
        or np.size(numpy_helper.to_array(activation_zero)) != 1
    ):
        return None  # a constant uint8 zero point: what the padding is filled with
    return input_dq, weight_dq, weight


def _is_dequantize(node: onnx.NodeProto | None) -> bool:
    return node is not None and node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx")


def _drop_unread(graph: onnx.GraphProto, replaced: list[onnx.NodeProto]) -> None:
    """Those of the ``replaced`` DequantizeLinear nodes, and their int8 weights, nothing reads any more."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    unread = {id(node): node for node in replaced if not set(node.output) & read}
    remove_where(graph.node, lambda node: id(node) in unread)
    drop_unused_initializers(graph, among=[node.input[0] for node in unread.values()])
