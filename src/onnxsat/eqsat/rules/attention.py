"""Scaled dot-product attention offered as ONNX Runtime's fused com.microsoft ops (``--target ort``).

    Reshape(Transpose(MatMul(Softmax(MatMul(Q_heads * c1, K_heads^T * c2) + mask), V_heads)))
        ==>  MultiHeadAttention(Q, K, V, attention_bias=mask, num_heads=N, scale=c1*c2)   [Reshape]
        ==>  Attention(x, [Wq Wk Wv], [bq bk bv], attention_bias=mask, ...)               [Reshape]
             where Q, K, V = x @ Wq + bq, x @ Wk + bk, x @ Wv + bv with constant weights

Q, K and V are the [B, S, N*D] projections before their heads are split. The attentions are found in
Python when the model is encoded (``attention_sites``: every condition for the equality is listed
there) and asserted as ``AttentionSite`` (and ``AttentionProjection``) facts; the rules here only add
the fused nodes to the class of the merged output, so the original graph stays in the e-graph and the
cost model decides which of the three forms is extracted: Attention also does the projections, so it
saves three products and three bias additions, but its weights are a new constant per layer (the
originals go when nothing else reads them). A Reshape follows the fused node when the export flattens
the merged heads to another shape (GPT-2's [B*S, N*D]). Causal masks need nothing of their own:
exporters add them to the scores as a constant mask, which the fused ops take as ``attention_bias``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import onnx
from egglog import Ruleset, String, bindings, eq, i64, ne, rule, ruleset, union
from onnx import helper

from onnxsat.eqsat.attention_sites import AttentionSite
from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    attention_projection,
    attention_site,
    dims_of,
    has_shape,
    has_type,
    node_id_at,
    out,
)
from onnxsat.eqsat.rules.families import ORT_ONLY, register_family
from onnxsat.eqsat.rules.patterns import derived, result

if TYPE_CHECKING:  # the encoder calls this module
    from onnxsat.eqsat.encode import EncodedModel

MICROSOFT = "com.microsoft"
MULTI_HEAD_ATTENTION = "MultiHeadAttention"
ATTENTION = "Attention"

attention: Ruleset = ruleset(name="attention")


@attention.register
def _fuse_attention(
    y: Tensor,
    inputs: Args,
    attrs: Attrs,
    fused: Dims,
    merged: Dims,
    node_id: String,
    reshape_id: String,
    x: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    tail: Args,
    weights: Args,
    biases: Args,
    k_dim: i64,
    width: i64,
) -> object:
    """One rule per fused op, and per whether a Reshape must follow it (the merged output's shape differs)."""
    site = [attention_site(y, inputs, attrs, fused, merged, node_id, reshape_id), ne(node_id).to(String(""))]
    mha = out(Node(MULTI_HEAD_ATTENTION, MICROSOFT, attrs, inputs, Args.nil(), node_id, 1), 0)
    weight = derived("concat_last", weights, Attrs.none())
    bias = derived("concat_last", biases, Attrs.none())
    projected = Args.cons(x, Args.cons(weight, Args.cons(bias, tail)))
    attention_node = out(Node(ATTENTION, MICROSOFT, attrs, projected, Args.nil(), node_id, 1), 0)
    projection = [
        attention_projection(y, x, weights, biases, k_dim, width),
        eq(inputs).to(Args.cons(q, Args.cons(k, Args.cons(v, tail)))),
    ]
    weight_shapes = [has_shape(weight, dims_of(k_dim, width)), has_shape(bias, dims_of(width))]
    for op, fused_output, conditions, shapes in (
        (MULTI_HEAD_ATTENTION, mha, [], []),
        (ATTENTION, attention_node, projection, weight_shapes),
    ):
        yield rule(*site, *conditions, eq(merged).to(fused), name=f"attention -> {op}").then(
            union(y).with_(fused_output), *shapes
        )
        reshaped = result("Reshape", Attrs.none(), args_of(fused_output, Tensor.ints(merged)), reshape_id)
        yield rule(*site, *conditions, ne(merged).to(fused), name=f"attention -> {op}+Reshape").then(
            union(y).with_(reshaped),
            has_shape(fused_output, fused),
            has_type(fused_output, onnx.TensorProto.FLOAT),
            *shapes,
        )


Call = bindings.Call | bindings.Lit
_SPAN = bindings.PanicSpan()
_ABSENT = bindings.Call(_SPAN, "TensorAbsent", [])


def _call(name: str, *args: Call) -> bindings.Call:
    return bindings.Call(_SPAN, name, list(args))


def _int(value: int) -> bindings.Lit:
    return bindings.Lit(_SPAN, bindings.Int(value))


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
    inert = Tensor.ref(-2)
    encoded.egraph.register(
        attention_site(inert, Args.nil(), Attrs.none(), Dims.nil(), Dims.nil(), "", ""),
        attention_projection(inert, inert, Args.nil(), Args.nil(), -1, -1),
    )
    commands: list[bindings.ActionCommand] = []
    for site in sites:
        key = len(attributes)
        attributes.append(fused_attributes(site))
        helpers = _Helpers(commands, attributes, node_id_at(site.transpose), node_id_at(site.reshape))
        query = ref(site.query)
        if site.query_merge:  # [B, N, S, D] -> [B, S, N, D] -> [B, S, N*D]
            b, s, hidden = site.fused_shape[0], site.fused_shape[1], site.num_heads * _head_size(encoded, site)
            query = helpers.transpose(query, [0, 2, 1, 3], (b, s, site.num_heads, hidden // site.num_heads))
            query = helpers.reshape(query, (b, s, hidden))
        key_term = helpers.reshape(ref(site.key), site.key_regroup) if site.key_regroup else ref(site.key)
        tail = args(["", "", site.bias] if site.bias else [])
        if site.bias_expand:  # [.., .., 1, T] -> [.., .., S, T]
            bias = helpers.expand(ref(site.bias), site.bias_expand)
            tail = _call("ArgsCons", _ABSENT, _call("ArgsCons", _ABSENT, _call("ArgsCons", bias, _call("ArgsNil"))))
        inputs = _call("ArgsCons", query, _call("ArgsCons", key_term, _call("ArgsCons", ref(site.value), tail)))
        fact = _call(
            "AttentionSite",
            ref(site.output),
            inputs,
            _call("AttrsTable", _int(key)),
            _dims(site.fused_shape),
            _dims(site.output_shape),
            _string(node_id_at(site.softmax)),
            _string(node_id_at(site.reshape)),
        )
        commands.append(_fact(fact))
        if site.projections:
            x, weights, biases = site.projections[0], site.projections[1:4], site.projections[4:]
            k_dim, width = encoded.facts.shapes[weights[0]]
            projection = _call(
                "AttentionProjection",
                ref(site.output),
                ref(x),
                args(list(weights)),
                args(list(biases)),
                _int(k_dim),
                _int(3 * width),
            )
            commands.append(_fact(projection))
    return commands


def _head_size(encoded: EncodedModel, site: AttentionSite) -> int:
    return encoded.facts.shapes[site.query][3]


class _Helpers:
    """Terms for the Transpose and Reshape nodes a fused form adds around its inputs, with their shapes
    (the cost model reads them); they take the ids of the merging Transpose and Reshape they resemble."""

    def __init__(
        self,
        commands: list[bindings.ActionCommand],
        attributes: list[list[onnx.AttributeProto]],
        transpose_id: str,
        reshape_id: str,
    ) -> None:
        self.commands, self.attributes = commands, attributes
        self.transpose_id, self.reshape_id = transpose_id, reshape_id

    def output(self, node: bindings.Call, dims: tuple[int, ...]) -> bindings.Call:
        term = _call("Out", node, _int(0))
        self.commands.append(_fact(_call("HasShape", term, _dims(dims))))
        self.commands.append(_fact(_call("HasType", term, _int(onnx.TensorProto.FLOAT))))
        return term

    def transpose(self, x: bindings.Call, perm: list[int], dims: tuple[int, ...]) -> bindings.Call:
        key = len(self.attributes)
        self.attributes.append([helper.make_attribute("perm", perm)])
        inputs = _call("ArgsCons", x, _call("ArgsNil"))
        return self.output(_node("Transpose", _call("AttrsTable", _int(key)), inputs, self.transpose_id), dims)

    def expand(self, x: bindings.Call, dims: tuple[int, ...]) -> bindings.Call:
        inputs = _call("ArgsCons", x, _call("ArgsCons", _call("TensorInts", _dims(dims)), _call("ArgsNil")))
        return self.output(_node("Expand", _call("AttrsNone"), inputs, self.reshape_id), dims)

    def reshape(self, x: bindings.Call, dims: tuple[int, ...]) -> bindings.Call:
        inputs = _call("ArgsCons", x, _call("ArgsCons", _call("TensorInts", _dims(dims)), _call("ArgsNil")))
        return self.output(_node("Reshape", _call("AttrsNone"), inputs, self.reshape_id), dims)


def _node(op_type: str, attrs: bindings.Call, inputs: bindings.Call, node_id: str) -> bindings.Call:
    return _call("Node", _string(op_type), _string(""), attrs, inputs, _call("ArgsNil"), _string(node_id), _int(1))


def _string(value: str) -> bindings.Lit:
    return bindings.Lit(_SPAN, bindings.String(value))


def _fact(expr: bindings.Call) -> bindings.ActionCommand:
    return bindings.ActionCommand(bindings.Expr_(_SPAN, expr))


register_family(attention, stage="simplify", order=135, targets=ORT_ONLY, requires_op="Softmax")
