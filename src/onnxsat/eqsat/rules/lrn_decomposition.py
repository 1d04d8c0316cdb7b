"""LRN written as a squared input, a banded 1x1 convolution, a power and a product.

    LRN(x; size, alpha, beta, bias)  ==>  x * Pow(Conv(x * x, W, b), -beta)

with ``W[c, i] = alpha / size`` on LRN's channel window around ``c`` (zeros elsewhere) and ``b = bias``,
so the Conv computes ``bias + alpha / size * sum of squares`` exactly as the ONNX definition does, with
the terms in another order. ONNX Runtime's own LRN kernel is slow on CPU (42-54% of AlexNet's,
ZFNet's and Inception-v1's run time on this machine; 12x the decomposed form on (1, 96, 55, 55)); a
1x1 Conv runs on its optimized GEMM. Float32, 4-D inputs with a static channel count.
"""

from __future__ import annotations

import numpy as np
import onnx
from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.eqsat.language import Attrs, Tensor, args_of, dims_of, has_shape, is_float32
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import derived, result, unique
from onnxsat.eqsat.weights import float_attr, int_attr, weight_kernel

lrn_decomposition: Ruleset = ruleset(name="lrn_decomposition")


def _lrn_window(attrs: dict[str, onnx.AttributeProto], channels: int) -> np.ndarray:
    """LRN's channel windows as a [C, C] 0/1 matrix: row c sums channels c - floor((size-1)/2) ..
    c + ceil((size-1)/2), clipped to the tensor (the ONNX definition)."""
    size = int_attr(attrs, "size", 1)
    band = np.zeros((channels, channels))
    for c in range(channels):
        low, high = max(0, c - (size - 1) // 2), min(channels - 1, c + (size - 1 + 1) // 2)
        band[c, low : high + 1] = 1.0
    return band


@weight_kernel("lrn_window_weight")
def lrn_window_weight(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """1x1 Conv weight [C, C, 1, 1] = alpha / size on LRN's channel window: the scaled sum of squares."""
    (channels,) = args
    count = int(np.asarray(channels).reshape(-1)[0])
    scale = float_attr(attrs, "alpha", 1e-4) / int_attr(attrs, "size", 1)
    return (_lrn_window(attrs, count) * scale).astype(np.float32).reshape(count, count, 1, 1)


@weight_kernel("lrn_bias")
def lrn_bias(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """The Conv bias that adds LRN's ``bias`` to every channel."""
    (channels,) = args
    return np.full(int(np.asarray(channels).reshape(-1)[0]), float_attr(attrs, "bias", 1.0), dtype=np.float32)


@weight_kernel("lrn_exponent")
def lrn_exponent(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """-beta: x / d**beta is x * d**(-beta)."""
    return np.array(-float_attr(attrs, "beta", 0.75), dtype=np.float32)


@lrn_decomposition.register
def _decompose_lrn(y: Tensor, x: Tensor, attrs: Attrs, node_id: String, n: i64, c: i64, h: i64, w: i64) -> object:
    channels = Tensor.ints(dims_of(c))
    weight = derived("lrn_window_weight", args_of(channels), attrs)
    bias = derived("lrn_bias", args_of(channels), attrs)
    exponent = derived("lrn_exponent", args_of(channels), attrs)
    squares = result("Mul", Attrs.none(), args_of(x, x), node_id)
    summed = result("Conv", Attrs.none(), args_of(squares, weight, bias), node_id)
    scale = result("Pow", Attrs.none(), args_of(summed, exponent), node_id)
    yield rule(
        eq(y).to(result("LRN", attrs, args_of(x), node_id)),
        has_shape(x, dims_of(n, c, h, w)),
        c >= 1,
        is_float32(x),  # on x, not y: a condition on y alone let egglog's planner pair every tensor with every other
        name=unique("LRN -> Mul+Conv+Pow+Mul"),
    ).then(
        union(y).with_(result("Mul", Attrs.none(), args_of(x, scale), node_id)),
        has_shape(squares, dims_of(n, c, h, w)),
        has_shape(summed, dims_of(n, c, h, w)),
        has_shape(scale, dims_of(n, c, h, w)),
        has_shape(weight, dims_of(c, c, 1, 1)),
    )


register_family(lrn_decomposition, stage="simplify", order=120, targets=STANDARD, requires_op="LRN")
