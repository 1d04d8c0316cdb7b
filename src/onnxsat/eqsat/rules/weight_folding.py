"""Constant scales and shifts folded into the weights of the Conv, Gemm or MatMul next to them.

    Conv(x, W, b) * s    ==>  Conv(x, W * s, b * s)      s per output channel ([M,1,1], [1,M,1,1], or one value)
    Conv(x, W, b) + t    ==>  Conv(x, W, b + t)          t per output channel (the Conv+Add bias fusion)
    Conv(x, W, b) - t    ==>  Conv(x, W, b - t)          t per output channel (a BatchNorm's mean, as
                                                         Keras' torch backend writes it)
    Gemm(a, B, c) * s    ==>  Gemm(a, B * s, c * s)      s per column (one value, [N] or [1,N]); transB = 0
    Gemm(a, B, c) + t    ==>  Gemm(a, B, c + t)          when the sum keeps Gemm's [M,N] shape
    MatMul(x, W) * s     ==>  MatMul(x, W * s)           s per column, when the product keeps its shape
    MatMul(x * s, W), Conv(x * s, W, b)  with s one value  ==>  the scale moved into W

Each applies when the tensor folded away has no other reader, the weights and constants are static,
and shapes say the constant broadcasts the way the fold assumes: the constant's rank lines it up with
the channel (or column) axis, and the result keeps the shape of the Conv, Gemm or MatMul (a
``SameShape`` fact from shape inference), so its size along that axis is 1 or the channel count.
Exporters leave these behind for normalizations and scalings written as separate ops; ONNX Runtime
folds only some of them.

Each rule joins the two nodes through one-node relations derived in ``analysis`` (``ConstantOperand``:
a Mul, Add or Sub of a static tensor, in either operand order where the op commutes; ``WeightedNode``: a
Conv, Gemm or MatMul of a static weight), not node patterns. With a node pattern for each, egglog's
planner bound both nodes from the whole Node table before tying them together: 0.5-0.65 s per iteration
on MaxViT-T and Swin-V2-T with nothing to fold (3.9 s and 6.3 s in all), 0.03 s joined through the
relations. The check on the constant (``ValueFlag`` single, ``HasShape``) still comes first.
"""

from __future__ import annotations

from egglog import Ruleset, String, i64, rule, ruleset, union

from onnxsat.eqsat.language import (
    Attrs,
    Tensor,
    args_of,
    attr_int,
    dims_of,
    has_shape,
    same_shape,
    sole_use,
    static_value,
)
from onnxsat.eqsat.rules.analysis import constant_operand, weighted_node
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, derived, result, unique, value_flag

weight_folding: Ruleset = ruleset(name="weight_folding")

SPATIAL_RANKS = (1, 2, 3)


@weight_folding.register
def _conv_output_constants(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    b: Tensor,
    s: Tensor,
    conv: Tensor,
    attrs: Attrs,
    op_attrs: Attrs,
    node_id: String,
    op_id: String,
    k: i64,
) -> object:
    for has_bias in (False, True):
        bias = b if has_bias else Tensor.absent()
        vector = derived("channel_vector", args_of(s, w), attrs)
        scaled_w = derived("scale_conv_weight", args_of(w, vector), attrs)
        scaled_b = derived("scale_vector", args_of(b, vector), attrs)
        scaled = result("Conv", attrs, args_of(x, scaled_w, scaled_b) if has_bias else args_of(x, scaled_w), node_id)
        shifted_b = derived("add_channel_bias", args_of(bias, s, w), attrs)
        shifted = result("Conv", attrs, args_of(x, w, shifted_b), node_id)
        lowered_b = derived("subtract_channel_bias", args_of(bias, s, w), attrs)
        lowered = result("Conv", attrs, args_of(x, w, lowered_b), node_id)
        suffix = "(bias)" if has_bias else ""
        for op, rewritten in (("Mul", scaled), ("Add", shifted), ("Sub", lowered)):
            common = (
                constant_operand(y, op, conv, s, op_attrs, op_id),  # Mul and Add in either order, Sub(conv, s)
                _weighted("Conv", conv, x, w, bias, has_bias, attrs, node_id),
                sole_use(conv),
                static_value(bias),
            )
            for rank in SPATIAL_RANKS:
                # The result keeps the convolution's shape, so s broadcasts without growing it: its
                # size-k axis, lined up with the channel axis by its rank, has k = 1 or k = channels.
                keeps_shape = same_shape(y, conv, rank + 2)
                ones = (1,) * rank
                for shape in (dims_of(k, *ones), dims_of(1, k, *ones)):
                    yield rule(
                        has_shape(s, shape),
                        *common,
                        keeps_shape,
                        name=unique(f"Conv{suffix}+{op}(per channel) -> Conv"),
                    ).then(union(y).with_(rewritten))
                yield rule(
                    value_flag(s, "single"),
                    *common,
                    keeps_shape,
                    name=unique(f"Conv{suffix}+{op}(scalar) -> Conv"),
                ).then(union(y).with_(rewritten))


def _weighted(
    op: str, y: Tensor, x: Tensor, w: Tensor, b: Tensor, has_bias: bool, attrs: Attrs, node_id: String
) -> object:
    """``y = op(x, w, b)`` with a bias, ``y = op(x, w)`` (``b`` absent) without; ``w`` static."""
    return weighted_node(y, op, x, w, b, 3 if has_bias else 2, attrs, node_id)


@weight_folding.register
def _gemm_output_constants(
    y: Tensor,
    a: Tensor,
    w: Tensor,
    c: Tensor,
    s: Tensor,
    gemm: Tensor,
    attrs: Attrs,
    op_attrs: Attrs,
    node_id: String,
    op_id: String,
    n: i64,
) -> object:
    for has_bias in (False, True):
        bias = c if has_bias else Tensor.absent()
        scaled_w = derived("scale_columns", args_of(w, s), attrs)
        scaled_inputs = args_of(a, scaled_w, derived("multiply_values", args_of(c, s), attrs))
        scaled = result("Gemm", attrs, scaled_inputs if has_bias else args_of(a, scaled_w), node_id)
        shifted_c = derived("add_values", args_of(bias, s), attrs)
        shifted = result("Gemm", attrs, args_of(a, w, shifted_c), node_id)
        suffix = "(bias)" if has_bias else ""
        common = (
            _weighted("Gemm", gemm, a, w, bias, has_bias, attrs, node_id),
            sole_use(gemm),
            attr_flag(attrs, "plain"),
            static_value(bias),
        )
        for shape_condition in (
            value_flag(s, "single"),
            has_shape(s, dims_of(n)),
            has_shape(s, dims_of(1, n)),
        ):
            yield rule(
                shape_condition,
                constant_operand(y, "Mul", gemm, s, op_attrs, op_id),
                *common,
                attr_int(attrs, "transB", 0),
                same_shape(y, gemm, 2),  # so s has 1 or N columns
                name=unique(f"Gemm{suffix}+Mul(per column) -> Gemm"),
            ).then(union(y).with_(scaled))
        yield rule(
            constant_operand(y, "Add", gemm, s, op_attrs, op_id),
            *common,
            same_shape(y, gemm, 2),
            name=unique(f"Gemm{suffix}+Add -> Gemm"),
        ).then(union(y).with_(shifted))


@weight_folding.register
def _matmul_constants(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    s: Tensor,
    product: Tensor,
    attrs: Attrs,
    op_attrs: Attrs,
    node_id: String,
    op_id: String,
    k: i64,
    n: i64,
    j: i64,
    rank: i64,
    scaled_x: Tensor,
) -> object:
    scaled = result("MatMul", attrs, args_of(x, derived("scale_columns", args_of(w, s), attrs)), node_id)
    for shape_condition in (value_flag(s, "single"), has_shape(s, dims_of(j)), has_shape(s, dims_of(1, j))):
        yield rule(
            shape_condition,
            constant_operand(y, "Mul", product, s, op_attrs, op_id),
            _weighted("MatMul", product, x, w, Tensor.absent(), False, attrs, node_id),
            sole_use(product),
            has_shape(w, dims_of(k, n)),  # a matrix: the product's last axis is its columns
            same_shape(y, product, rank),  # so s has 1 or n columns
            name=unique("MatMul+Mul(per column) -> MatMul"),
        ).then(union(y).with_(scaled))
    # A scalar applied to the input instead: x * s feeds the product or convolution only.
    yield rule(
        value_flag(s, "single"),
        _weighted("MatMul", y, scaled_x, w, Tensor.absent(), False, attrs, node_id),
        constant_operand(scaled_x, "Mul", x, s, op_attrs, op_id),
        sole_use(scaled_x),
        same_shape(scaled_x, x, rank),
        name=unique("Mul(scalar)+MatMul -> MatMul"),
    ).then(union(y).with_(scaled))


@weight_folding.register
def _conv_input_scalar(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    s: Tensor,
    attrs: Attrs,
    op_attrs: Attrs,
    node_id: String,
    op_id: String,
    scaled_x: Tensor,
    b: Tensor,
    rank: i64,
) -> object:
    scaled_w = derived("multiply_values", args_of(w, s), attrs)
    for has_bias in (False, True):
        bias = b if has_bias else Tensor.absent()
        yield rule(
            value_flag(s, "single"),
            _weighted("Conv", y, scaled_x, w, bias, has_bias, attrs, node_id),
            constant_operand(scaled_x, "Mul", x, s, op_attrs, op_id),
            sole_use(scaled_x),
            same_shape(scaled_x, x, rank),
            name=unique("Mul(scalar)+Conv -> Conv"),
        ).then(union(y).with_(result("Conv", attrs, args_of(x, scaled_w, *((b,) if has_bias else ())), node_id)))


register_family(weight_folding, stage="simplify", order=80, targets=STANDARD)
