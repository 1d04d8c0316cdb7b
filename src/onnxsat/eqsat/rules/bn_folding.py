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
    out,
    sole_use,
    static_value,
)
from onnxsat.eqsat.rules.patterns import result

bn_folding: Ruleset = ruleset(name="bn_folding")

# Convolution op -> kernel (weights.py) that scales its weight per output channel.
WEIGHT_SCALERS = {"Conv": "scale_conv_weight", "ConvTranspose": "scale_convtranspose_weight"}


@bn_folding.register
def _fold_batchnorm_into_conv(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    b: Tensor,
    conv_attrs: Attrs,
    conv_captures: Args,
    conv_id: String,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    bn_attrs: Attrs,
    bn_captures: Args,
    bn_id: String,
) -> object:
    for conv_op, scaler in WEIGHT_SCALERS.items():
        for has_bias, conv_inputs, bias in ((False, args_of(x, w), Tensor.absent()), (True, args_of(x, w, b), b)):
            conv_out = out(Node(conv_op, "", conv_attrs, conv_inputs, conv_captures, conv_id, 1), 0)
            bn_inputs = args_of(conv_out, gamma, beta, mean, var)
            batchnorm = Node("BatchNormalization", "", bn_attrs, bn_inputs, bn_captures, bn_id, 1)
            scale = Tensor.derived("bn_scale", args_of(gamma, var), bn_attrs)
            new_weight = Tensor.derived(scaler, args_of(w, scale), conv_attrs)
            new_bias = Tensor.derived("bn_fold_bias", args_of(bias, mean, scale, beta, w), bn_attrs)
            folded = Node(conv_op, "", conv_attrs, args_of(x, new_weight, new_bias), conv_captures, conv_id, 1)
            yield rule(
                eq(y).to(out(batchnorm, 0)),
                sole_use(conv_out),
                attr_flag(bn_attrs, "inference"),
                *(static_value(t) for t in (w, bias, gamma, beta, mean, var)),
                name=f"{conv_op}{'(bias)' if has_bias else ''}+BatchNormalization -> {conv_op}",
            ).then(union(y).with_(out(folded, 0)))


@bn_folding.register
def _fold_batchnorm_into_next_conv(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    b: Tensor,
    conv_attrs: Attrs,
    conv_id: String,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    bn_attrs: Attrs,
    bn_id: String,
) -> object:
    normalized = result("BatchNormalization", bn_attrs, args_of(x, gamma, beta, mean, var), bn_id)
    scale = Tensor.derived("bn_scale", args_of(gamma, var), bn_attrs)
    shift = Tensor.derived("bn_shift", args_of(beta, mean, scale), bn_attrs)
    new_weight = Tensor.derived("scale_conv_input_channels", args_of(w, scale), conv_attrs)
    for has_bias in (False, True):
        bias = b if has_bias else Tensor.absent()
        conv_inputs = args_of(normalized, w, b) if has_bias else args_of(normalized, w)
        new_bias = Tensor.derived("conv_input_shift_bias", args_of(bias, w, shift), conv_attrs)
        yield rule(
            eq(y).to(result("Conv", conv_attrs, conv_inputs, conv_id)),
            attr_flag(bn_attrs, "inference"),
            attr_flag(conv_attrs, "no_padding"),
            attr_int(conv_attrs, "group", 1),
            *(static_value(t) for t in (w, bias, gamma, beta, mean, var)),
            name=f"BatchNormalization+Conv{'(bias)' if has_bias else ''} -> Conv",
        ).then(union(y).with_(result("Conv", conv_attrs, args_of(x, new_weight, new_bias), conv_id)))
