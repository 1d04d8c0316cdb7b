"""Activations fused into ONNX Runtime's com.microsoft FusedConv and FusedGemm (``--target ort``).

    Relu(Conv(...))          ==>  FusedConv(...,  activation="Relu")
    Clip(Conv(...), lo, hi)  ==>  FusedConv(...,  activation="Clip", activation_params=[lo, hi])
    Relu(Gemm(...))          ==>  FusedGemm(...,  activation="Relu")
    GeluSite(y, x, tanh)     ==>  y = Gelu(x), or FastGelu(x) for the tanh approximation (com.microsoft, any
                                  opset: a GELU written out, ``gelu_sites``)

Applies when the producer's output has no other reader and is not a graph output, the tensor is
float32 (the type ORT's fused CPU kernels implement), and Clip's bounds, if given, are constants.
After BatchNormalization folding the folded Conv matches too, which gives Conv+BN+Relu.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, ne, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Node,
    Tensor,
    args_of,
    gelu_site,
    is_float32,
    out,
    sole_use,
    static_args,
)
from onnxsat.eqsat.rules.families import ORT_ONLY, register_family

MICROSOFT = "com.microsoft"

activation_fusion: Ruleset = ruleset(name="activation_fusion")

# (producer op, activation op) -> fused com.microsoft op
FUSIONS = {
    ("Conv", "Relu"): "FusedConv",
    ("Conv", "Clip"): "FusedConv",
    ("Gemm", "Relu"): "FusedGemm",
}


@activation_fusion.register
def _fuse_activation(
    y: Tensor,
    inputs: Args,
    attrs: Attrs,
    captures: Args,
    node_id: String,
    act_attrs: Attrs,
    act_captures: Args,
    act_id: String,
    act_extra: Args,
) -> object:
    for (producer_op, act_op), fused_op in FUSIONS.items():
        produced = out(Node(producer_op, "", attrs, inputs, captures, node_id, 1), 0)
        act_inputs = Args.cons(produced, act_extra)
        activation = Node(act_op, "", act_attrs, act_inputs, act_captures, act_id, 1)
        fused_attrs = attrs.with_activation(act_op, act_attrs, act_extra)
        fused = Node(fused_op, MICROSOFT, fused_attrs, inputs, captures, node_id, 1)
        yield rule(
            eq(y).to(out(activation, 0)),
            sole_use(produced),
            is_float32(produced),
            static_args(act_extra),
            name=f"{producer_op}+{act_op} -> {fused_op}",
        ).then(union(y).with_(out(fused, 0)))


@activation_fusion.register
def _gelu(y: Tensor, x: Tensor, node_id: String) -> object:
    """ONNX Runtime fuses this form itself, but not once weight folding has moved its ``* 0.5`` away."""
    for flag, op in ((0, "Gelu"), (1, "FastGelu")):
        fused = Node(op, MICROSOFT, Attrs.none(), args_of(x), Args.nil(), node_id, 1)
        site = gelu_site(y, x, flag, node_id)
        yield rule(site, ne(node_id).to(String("")), name=f"elementwise GELU -> com.microsoft::{op}").then(
            union(y).with_(out(fused, 0))
        )


register_family(activation_fusion, stage="simplify", order=130, targets=ORT_ONLY)
