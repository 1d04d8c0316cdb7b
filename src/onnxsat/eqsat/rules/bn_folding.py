"""BatchNormalization folded into the Conv or ConvTranspose that feeds it.

    y = BN(Conv(x, W, b))  ==>  y = Conv(x, W * s, (b - mean) * s + beta),  s = gamma / sqrt(var + eps)

with ``s`` applied per output channel (axis 0 of a Conv weight; for ConvTranspose, column ``j`` of
each group's rows). Applies when the convolution's output has no other reader and is not a graph
output, the BatchNormalization is in inference mode with one output, and every weight is a constant.
Works without a conv bias and with grouped and depthwise convolutions. Standard ONNX in, standard out.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Node, Tensor, args_of, attr_flag, out, sole_use, static_value

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
