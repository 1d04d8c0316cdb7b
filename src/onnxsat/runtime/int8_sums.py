"""Whether ONNX Runtime's int8 kernels on this machine clip products of full-range weights.

On x86 CPUs without VNNI, MLAS multiplies uint8 activations by int8 weights with AVX2's ``vpmaddubsw``,
which adds each pair of products into a saturating 16-bit sum: 255 x 127 x 2 = 64,770 does not fit in
32,767, so wherever large activations meet large weights the sum is clipped. With VNNI (``vpdpbusd``) the
sums are 32 bits and nothing clips. Measured on an AMD EPYC with AVX2 only: a MatMulInteger summing 64 such
products returned 1,048,544 for 2,072,640; a quantized RGB stem's error against float was 0.016 with ORT's
optimizations off (the QDQ arithmetic as written) and 0.117 with them on (the int8 kernels).

ONNX Runtime's advice for such machines is 7-bit weights (its quantizer's ``reduce_range``): 255 x 63 x 2
fits, and the kernels then compute exactly what the QDQ graph says (the same stem: 0.021 both ways). Rather
than read CPU flags, which differ by vendor and operating system, a two-node model holding exactly that
product is run once per process: measured, on any CPU.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.verification import session

DEPTH = 16
"""Products summed per output: enough for every kernel's inner loop to pair them."""


@cache
def int8_pairs_saturate() -> bool:
    """Whether uint8 x int8 products at full range come out clipped from ORT's integer kernels here (the
    matrix product dynamic mode runs, and the convolution static mode's QDQ pairs become)."""
    try:
        return _matmul_clips() or _conv_clips()
    except Exception:  # an ORT build without these kernels: nothing to protect against
        return False


def _run(node: onnx.NodeProto, value: np.ndarray, output_type: int, weights: list[onnx.TensorProto]) -> np.ndarray:
    graph = helper.make_graph(
        [node],
        "int8_sums",
        [helper.make_tensor_value_info(node.input[0], TensorProto.UINT8, list(value.shape))],
        [helper.make_tensor_value_info(node.output[0], output_type, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {node.input[0]: value})[0]


def _matmul_clips() -> bool:
    weight = numpy_helper.from_array(np.full((DEPTH, 16), 127, np.int8), "w")
    node = helper.make_node("MatMulInteger", ["x", "w"], ["y"])
    result = _run(node, np.full((1, DEPTH), 255, np.uint8), TensorProto.INT32, [weight])
    return bool((result != 255 * 127 * DEPTH).any())


def _conv_clips() -> bool:
    """A QLinearConv with channels the fast (indirect) kernel takes: 16 in, 16 out, 1x1."""
    scale = 4096.0
    weights = [
        numpy_helper.from_array(np.full((16, DEPTH, 1, 1), 127, np.int8), "w"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
        numpy_helper.from_array(np.array(scale, np.float32), "y_scale"),
    ]
    node = helper.make_node("QLinearConv", ["x", "one", "x_zero", "w", "one", "w_zero", "y_scale", "x_zero"], ["y"])
    result = _run(node, np.full((1, DEPTH, 2, 2), 255, np.uint8), TensorProto.UINT8, weights)
    return bool((result != round(255 * 127 * DEPTH / scale)).any())
