"""BatchNormalization folded into the Conv, ConvTranspose or Gemm that feeds it, or into the Conv it feeds,
and per-channel scales and shifts after it folded into its parameters.

    y = BN(Conv(x, W, b))  ==>  y = Conv(x, W * s, (b - mean) * s + beta),  s = gamma / sqrt(var + eps)
    y = BN(Gemm(a, B, c))  ==>  y = Gemm(a, B * s[columns], (c - mean) * s + beta)
    y = Conv(BN(x), W, b)  ==>  y = Conv(x, W * s[in], b + sum W * t[in]),    t = beta - mean * s
    y = BN(x) * c          ==>  y = BN(x; gamma * c, beta * c)      c a scalar or one value per channel
    y = BN(x) + c          ==>  y = BN(x; gamma, beta + c)

The second form (BatchNormalization before the convolution, as in pre-activation and DenseNet
blocks, which ONNX Runtime leaves alone) needs a Conv that pads nothing, since the padded border
would see BN's shift in the original but zeros after the fold, and an ungrouped Conv.

The Gemm form is PyTorch's Linear followed by BatchNorm1d (PointNet's and many tabular heads: the
normalization of a [N, C] output is per column); it needs alpha = beta = 1, any transA and transB.

The last two are what Caffe2 conversions write after every BatchNormalization (its learned affine as
separate Mul and Add): in pre-activation blocks (DenseNet), where no convolution can absorb them, they
were two extra passes over the feature map that ONNX Runtime leaves in.

with ``s`` applied per output channel (axis 0 of a Conv weight; for ConvTranspose, column ``j`` of
each group's rows). Applies when the convolution's output has no other reader and is not a graph
output, the BatchNormalization is in inference mode with one output, and every weight is a constant.
Works without a conv bias and with grouped and depthwise convolutions. Standard ONNX in, standard out.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Tensor,
    args_of,
    attr_int,
    dims_of,
    foldable_batchnorm,
    has_shape,
    same_shape,
    sole_use,
    static_args,
    static_value,
)
from onnxsat.eqsat.rules.analysis import constant_operand, weighted_node
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, derived, result, unique, value_flag

bn_folding: Ruleset = ruleset(name="bn_folding")


@bn_folding.register
def _foldable_batchnorm(y: Tensor, x: Tensor, params: Args, bn_attrs: Attrs, bn_id: String) -> object:
    """Stage one: mark each inference-mode BatchNormalization with static parameters. The folds below
    join from these marks; with the node pattern and the static checks in their own bodies, egglog's
    join planner took minutes per iteration on DenseNet's BatchNormalization+Mul+Add chains."""
    yield rule(
        eq(y).to(result("BatchNormalization", bn_attrs, Args.cons(x, params), bn_id)),
        attr_flag(bn_attrs, "inference"),
        static_args(params),
        name="BatchNormalization foldable",
    ).then(foldable_batchnorm(y, x, bn_attrs, params))


# (op, kernel (weights.py) scaling its weight per output channel, transB the rule needs or None): a Gemm's
# weight is [K, N] (its columns scaled) or, with transB = 1, [N, K] (its rows, as a Conv's); a Gemm also needs
# alpha = beta = 1.
PRODUCERS = (
    ("Conv", "scale_conv_weight", None),
    ("ConvTranspose", "scale_convtranspose_weight", None),
    ("Gemm", "scale_columns", 0),
    ("Gemm", "scale_conv_weight", 1),
)


@bn_folding.register
def _fold_batchnorm_into_producer(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    b: Tensor,
    attrs: Attrs,
    captures: Args,
    node_id: String,
    produced: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    bn_attrs: Attrs,
    bn_params: Args,
) -> object:
    scale = derived("bn_scale", args_of(gamma, var), bn_attrs)
    for op, scaler, trans_b in PRODUCERS:
        gemm = () if trans_b is None else (attr_flag(attrs, "plain"), attr_int(attrs, "transB", trans_b))
        for has_bias, bias in ((False, Tensor.absent()), (True, b)):
            new_weight = derived(scaler, args_of(w, scale), attrs)
            new_bias = derived("bn_fold_bias", args_of(bias, mean, scale, beta, w), bn_attrs)
            folded = result(op, attrs, args_of(x, new_weight, new_bias), node_id)
            yield rule(
                foldable_batchnorm(y, produced, bn_attrs, bn_params),
                sole_use(produced),
                weighted_node(produced, op, x, w, bias, 3 if has_bias else 2, attrs, node_id),
                *gemm,
                eq(bn_params).to(args_of(gamma, beta, mean, var)),
                static_value(bias),
                name=unique(f"{op}{'(bias)' if has_bias else ''}+BatchNormalization -> {op}"),
            ).then(union(y).with_(folded))


@bn_folding.register
def _fold_batchnorm_into_next_conv(
    y: Tensor,
    x: Tensor,
    normalized: Tensor,
    w: Tensor,
    b: Tensor,
    conv_attrs: Attrs,
    conv_id: String,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    bn_attrs: Attrs,
    bn_params: Args,
) -> object:
    scale = derived("bn_scale", args_of(gamma, var), bn_attrs)
    shift = derived("bn_shift", args_of(beta, mean, scale), bn_attrs)
    new_weight = derived("scale_conv_input_channels", args_of(w, scale), conv_attrs)
    for has_bias in (False, True):
        bias = b if has_bias else Tensor.absent()
        new_bias = derived("conv_input_shift_bias", args_of(bias, w, shift), conv_attrs)
        yield rule(
            weighted_node(y, "Conv", normalized, w, bias, 3 if has_bias else 2, conv_attrs, conv_id),
            foldable_batchnorm(normalized, x, bn_attrs, bn_params),
            attr_flag(conv_attrs, "no_padding"),
            attr_int(conv_attrs, "group", 1),
            eq(bn_params).to(args_of(gamma, beta, mean, var)),
            static_value(bias),
            name=f"BatchNormalization+Conv{'(bias)' if has_bias else ''} -> Conv",
        ).then(union(y).with_(result("Conv", conv_attrs, args_of(x, new_weight, new_bias), conv_id)))


BATCHNORM_RANKS = (3, 4, 5)
"""Input ranks (N, C, spatial...) for which a per-channel constant is lined up by its shape alone."""


@bn_folding.register
def _fold_constants_into_batchnorm(
    y: Tensor,
    x: Tensor,
    c: Tensor,
    normalized: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    bn_attrs: Attrs,
    bn_params: Args,
    op_attrs: Attrs,
    op_id: String,
    k: i64,
) -> object:
    vector = derived("channel_vector", args_of(c, gamma), bn_attrs)
    scaled = args_of(
        derived("scale_vector", args_of(gamma, vector), bn_attrs),
        derived("scale_vector", args_of(beta, vector), bn_attrs),
        mean,
        var,
    )
    shifted = args_of(gamma, derived("add_channel_bias", args_of(beta, c, gamma), bn_attrs), mean, var)
    for op, params in (("Mul", scaled), ("Add", shifted)):
        rewritten = result("BatchNormalization", bn_attrs, Args.cons(x, params), op_id)
        name = f"BatchNormalization+{op} -> BatchNormalization"
        common = (
            constant_operand(y, op, normalized, c, op_attrs, op_id),  # either operand order, c static
            foldable_batchnorm(normalized, x, bn_attrs, bn_params),
            sole_use(normalized),
            eq(bn_params).to(args_of(gamma, beta, mean, var)),
        )
        for rank in BATCHNORM_RANKS:
            # The result keeps BatchNormalization's shape, so c broadcasts without growing it: its
            # size-k axis, lined up with the channel axis by c's rank, has k = 1 or k = channels.
            keeps_shape = same_shape(y, normalized, rank)
            ones = (1,) * (rank - 2)
            for shape in (dims_of(k, *ones), dims_of(1, k, *ones)):
                yield rule(
                    *common,
                    keeps_shape,
                    has_shape(c, shape),
                    name=unique(name),
                ).then(union(y).with_(rewritten))
            yield rule(
                *common,
                keeps_shape,
                value_flag(c, "single"),
                name=unique(name),
            ).then(union(y).with_(rewritten))


register_family(bn_folding, stage="simplify", order=70, targets=STANDARD, requires_op="BatchNormalization")
