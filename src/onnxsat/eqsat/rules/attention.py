"""Scaled dot-product attention offered as ONNX Runtime's fused com.microsoft op (``--target ort``).

    Reshape(Transpose(MatMul(Softmax(MatMul(Q_heads * c1, K_heads^T * c2) + mask), V_heads)))
        ==>  MultiHeadAttention(Q, K, V, attention_bias=mask, num_heads=N, scale=c1*c2)   [Reshape]

Q, K and V are the [B, S, N*D] projections before their heads are split. The attentions are found in
Python when the model is encoded (``attention_sites``: every condition for the equality is listed
there) and asserted as ``AttentionSite`` facts; the rule here only adds the fused node to the class of
the merged output, so the original graph stays in the e-graph and the cost model decides which form is
extracted. A Reshape follows the fused node when the export flattens the merged heads to another shape
(GPT-2's [B*S, N*D]). Causal masks need nothing of their own: exporters add them to the scores as a
constant mask, which the fused op takes as its ``attention_bias``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import onnx
from egglog import Ruleset, String, bindings, eq, ne, rule, ruleset, union
from onnx import helper

from onnxsat.eqsat.attention_sites import MULTI_HEAD_ATTENTION, AttentionSite
from onnxsat.eqsat.language import Args, Attrs, Dims, Node, Tensor, attention_site, has_shape, has_type, out
from onnxsat.eqsat.rules.families import ORT_ONLY, register_family
from onnxsat.eqsat.rules.patterns import result

if TYPE_CHECKING:  # the encoder calls this module
    from onnxsat.eqsat.encode import EncodedModel

MICROSOFT = "com.microsoft"

attention: Ruleset = ruleset(name="attention")


@attention.register
def _fuse_attention(
    y: Tensor, inputs: Args, attrs: Attrs, fused: Dims, merged: Dims, node_id: String, reshape_id: String
) -> object:
    site = attention_site(y, inputs, attrs, fused, merged, node_id, reshape_id)
    mha = out(Node(MULTI_HEAD_ATTENTION, MICROSOFT, attrs, inputs, Args.nil(), node_id, 1), 0)
    yield rule(site, eq(merged).to(fused), ne(node_id).to(String("")), name="attention -> MultiHeadAttention").then(
        union(y).with_(mha)
    )
    reshaped = result("Reshape", Attrs.none(), Args.cons(mha, Args.cons(Tensor.ints(merged), Args.nil())), reshape_id)
    yield rule(
        site, ne(merged).to(fused), ne(node_id).to(String("")), name="attention -> MultiHeadAttention+Reshape"
    ).then(
        union(y).with_(reshaped),
        has_shape(mha, fused),
        has_type(mha, onnx.TensorProto.FLOAT),
    )


Call = bindings.Call | bindings.Lit
_SPAN = bindings.PanicSpan()


def _call(name: str, *args: Call) -> bindings.Call:
    return bindings.Call(_SPAN, name, list(args))


def _dims(dims: tuple[int, ...]) -> bindings.Call:
    term = _call("DimsNil")
    for dim in reversed(dims):
        term = _call("DimsCons", bindings.Lit(_SPAN, bindings.Int(dim)), term)
    return term


def fused_attributes(site: AttentionSite) -> list[onnx.AttributeProto]:
    """The fused node's attributes: the head count and the scale the export applies (never the default)."""
    return [helper.make_attribute("num_heads", site.num_heads), helper.make_attribute("scale", site.scale)]


def site_facts(
    encoded: EncodedModel, args: Callable[[list[str]], bindings.Call], ref: Callable[[str], bindings.Call]
) -> list[bindings.ActionCommand]:
    """The encoder's ``AttentionSite`` facts for the attentions its facts found (``args`` and ``ref`` are its
    term builders); the fused attribute sets are appended to its attribute table. Declares the relation
    to the e-graph first, on an empty node id that the rules skip, as the encoder declares its own."""
    sites, attributes = encoded.facts.attention_sites, encoded.attributes
    if not sites:
        return []
    node_ids = {position: node_id for node_id, position in encoded.node_position.items()}
    encoded.egraph.register(attention_site(Tensor.ref(-2), Args.nil(), Attrs.none(), Dims.nil(), Dims.nil(), "", ""))
    commands = []
    for site in sites:
        key = len(attributes)
        attributes.append(fused_attributes(site))
        inputs = [site.query, site.key, site.value] + (["", "", site.bias] if site.bias else [])
        fact = _call(
            "AttentionSite",
            ref(site.output),
            args(inputs),
            _call("AttrsTable", bindings.Lit(_SPAN, bindings.Int(key))),
            _dims(site.fused_shape),
            _dims(site.output_shape),
            bindings.Lit(_SPAN, bindings.String(node_ids[site.softmax])),
            bindings.Lit(_SPAN, bindings.String(node_ids[site.reshape])),
        )
        commands.append(bindings.ActionCommand(bindings.Expr_(_SPAN, fact)))
    return commands


register_family(attention, stage="simplify", order=135, targets=ORT_ONLY, requires_op="Softmax")
