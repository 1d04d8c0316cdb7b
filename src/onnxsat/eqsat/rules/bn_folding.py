"""BatchNormalization folded into the Conv or ConvTranspose that feeds it, or into the Conv it feeds.

    y = BN(Conv(x, W, b))  ==>  y = Conv(x, W * s, (b - mean) * s + beta),  s = gamma / sqrt(var + eps)
    y = Conv(BN(x), W, b)  ==>  y = Conv(x, W * s[in], b + sum W * t[in]),    t = beta - mean * s

The second form (BatchNormalization before the convolution, as in pre-activation and DenseNet
blocks, which ONNX Runtime leaves alone) needs a Conv that pads nothing, since the padded border
would see BN's shift in the original but zeros after the fold, and an ungrouped Conv.

with ``s`` applied per output channel (axis 0 of a Conv weight; for ConvTranspose, column ``j`` of
each group's rows). Applies when the convolution's output has no other reader and is not a graph
output, the BatchNormalization is in inference mode with one output, and every weight is a constant.
Works without a conv bias and with grouped and depthwise convolutions. Standard ONNX in, standard out.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Node,
    Tensor,
    args_of,
    attr_flag,
    attr_int,
    foldable_batchnorm,
    out,
    sole_use,
    static_args,
)
from onnxsat.eqsat.rules.patterns import result

bn_folding: Ruleset = ruleset(name="bn_folding")

# Convolution op -> kernel (weights.py) that scales its weight per output channel.
WEIGHT_SCALERS = {"Conv": "scale_conv_weight", "ConvTranspose": "scale_convtranspose_weight"}


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


def _static_weights(w: Tensor, b: Tensor, has_bias: bool) -> object:
    return static_args(args_of(w, b) if has_bias else args_of(w))


@bn_folding.register
def _fold_batchnorm_into_conv(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    b: Tensor,
    conv_attrs: Attrs,
    conv_captures: Args,
    conv_id: String,
    conv_out: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    bn_attrs: Attrs,
    bn_params: Args,
) -> object:
    scale = Tensor.derived("bn_scale", args_of(gamma, var), bn_attrs)
    for conv_op, scaler in WEIGHT_SCALERS.items():
        for has_bias, conv_inputs, bias in ((False, args_of(x, w), Tensor.absent()), (True, args_of(x, w, b), b)):
            conv = Node(conv_op, "", conv_attrs, conv_inputs, conv_captures, conv_id, 1)
            new_weight = Tensor.derived(scaler, args_of(w, scale), conv_attrs)
            new_bias = Tensor.derived("bn_fold_bias", args_of(bias, mean, scale, beta, w), bn_attrs)
            folded = Node(conv_op, "", conv_attrs, args_of(x, new_weight, new_bias), conv_captures, conv_id, 1)
            yield rule(
                foldable_batchnorm(y, conv_out, bn_attrs, bn_params),
                sole_use(conv_out),
                eq(conv_out).to(out(conv, 0)),
                eq(bn_params).to(args_of(gamma, beta, mean, var)),
                _static_weights(w, b, has_bias),
                name=f"{conv_op}{'(bias)' if has_bias else ''}+BatchNormalization -> {conv_op}",
            ).then(union(y).with_(out(folded, 0)))


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
    scale = Tensor.derived("bn_scale", args_of(gamma, var), bn_attrs)
    shift = Tensor.derived("bn_shift", args_of(beta, mean, scale), bn_attrs)
    new_weight = Tensor.derived("scale_conv_input_channels", args_of(w, scale), conv_attrs)
    for has_bias in (False, True):
        bias = b if has_bias else Tensor.absent()
        conv_inputs = args_of(normalized, w, b) if has_bias else args_of(normalized, w)
        new_bias = Tensor.derived("conv_input_shift_bias", args_of(bias, w, shift), conv_attrs)
        yield rule(
            eq(y).to(result("Conv", conv_attrs, conv_inputs, conv_id)),
            foldable_batchnorm(normalized, x, bn_attrs, bn_params),
            attr_flag(conv_attrs, "no_padding"),
            attr_int(conv_attrs, "group", 1),
            eq(bn_params).to(args_of(gamma, beta, mean, var)),
            _static_weights(w, b, has_bias),
            name=f"BatchNormalization+Conv{'(bias)' if has_bias else ''} -> Conv",
        ).then(union(y).with_(result("Conv", conv_attrs, args_of(x, new_weight, new_bias), conv_id)))
