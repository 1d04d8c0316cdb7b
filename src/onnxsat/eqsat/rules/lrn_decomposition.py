"""LRN written as a squared input, a banded 1x1 convolution, a power and a product.

    LRN(x; size, alpha, beta, bias)  ==>  x * Pow(Conv(x * x, W, b), -beta)

with ``W[c, i] = alpha / size`` on LRN's channel window around ``c`` (zeros elsewhere) and ``b = bias``,
so the Conv computes ``bias + alpha / size * sum of squares`` exactly as the ONNX definition does, with
the terms in another order. ONNX Runtime's own LRN kernel is slow on CPU (42-54% of AlexNet's,
ZFNet's and Inception-v1's run time on this machine; 12x the decomposed form on (1, 96, 55, 55)); a
1x1 Conv runs on its optimized GEMM. Float32, 4-D inputs with a static channel count.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.eqsat.language import Attrs, Tensor, args_of, dims_of, has_shape, is_float32
from onnxsat.eqsat.rules.patterns import result, unique

lrn_decomposition: Ruleset = ruleset(name="lrn_decomposition")


@lrn_decomposition.register
def _decompose_lrn(y: Tensor, x: Tensor, attrs: Attrs, node_id: String, n: i64, c: i64, h: i64, w: i64) -> object:
    channels = Tensor.ints(dims_of(c))
    weight = Tensor.derived("lrn_window_weight", args_of(channels), attrs)
    bias = Tensor.derived("lrn_bias", args_of(channels), attrs)
    exponent = Tensor.derived("lrn_exponent", args_of(channels), attrs)
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
