"""Layout ops moved below elementwise ops, so that pairs of them meet and cancel (TASO/TENSAT).

    U(L(x))                        ==>  L(U(x))           U elementwise unary, L a layout op
    B(L(a), c), B(c, L(a))         ==>  L(B(a, c))        B elementwise binary, c a one-element constant
    B(L(a), L(b)), a and b of one shape  ==>  L(B(a, b))  the same L (attributes and shape inputs)

with L one of Transpose, Reshape, Squeeze, Unsqueeze, Flatten: ops that move or relabel elements
without computing. A converted TensorFlow model wraps every elementwise chain in an NHWC->NCHW
Transpose and its inverse; once the first Transpose has sunk to the second, ``consecutive`` removes
the pair (or composes the two into one), and a Reshape that has sunk to its inverse becomes a no-op.

Both forms stay in the e-graph; on its own a sunk layout op costs the same, so the cost model picks
the sunk form only where something cancelled. The new inner node keeps the shape of its input (the
rules require it known), so the cost model prices it like the original.
"""

from __future__ import annotations

import onnx
from egglog import Ruleset, String, eq, i64, ne, relation, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    dims_of,
    has_shape,
    op_kind,
    out,
    static_args,
)
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import unique, value_flag
from onnxsat.op_kinds import ELEMENTWISE_UNARY

layout_sinking: Ruleset = ruleset(name="layout_sinking")

LAYOUT_OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")
"""Ops that only move or relabel elements: their extra inputs (a target shape, axes) describe layout."""


ELEMENTWISE_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")


OP_KINDS = {"layout": LAYOUT_OPS, "unary": ELEMENTWISE_UNARY, "binary": ELEMENTWISE_BINARY}
"""What ``OpKind`` facts (asserted by the encoder) say: one rule then covers every pair of ops, where a
rule per pair (several hundred) took longer to compile than to run."""


def has_layout_chain(graph: onnx.GraphProto) -> bool:
    """Whether a layout op reaches another through elementwise ops only: where sinking can make two meet.

    Sinking elsewhere only adds equivalent forms the extractor will not take, and the extra iterations
    cost seconds on transformer exports (BERT's Reshape, Mul-by-scalar chains); the family is skipped.
    """
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    elementwise = {*ELEMENTWISE_UNARY, *ELEMENTWISE_BINARY}
    for node in graph.node:
        if node.op_type not in LAYOUT_OPS or node.domain not in ("", "ai.onnx"):
            continue
        frontier, seen = [r for r in readers.get(node.output[0], []) if r.op_type in elementwise], set()
        while frontier:
            current = frontier.pop()
            if id(current) in seen or current.domain not in ("", "ai.onnx"):
                continue
            seen.add(id(current))
            for reader in readers.get(current.output[0], []):
                if reader.op_type in LAYOUT_OPS and reader.domain in ("", "ai.onnx"):
                    return True
                if reader.op_type in elementwise:
                    frontier.append(reader)
    return False


def _node(op: String, attrs: Attrs, inputs: Args, node_id: String) -> Tensor:
    return out(Node(op, "", attrs, inputs, Args.nil(), node_id, 1), 0)


@layout_sinking.register
def _through_unary(
    y: Tensor,
    z: Tensor,
    x: Tensor,
    u_op: String,
    l_op: String,
    u_attrs: Attrs,
    u_rest: Args,
    l_attrs: Attrs,
    l_rest: Args,
    u_id: String,
    l_id: String,
    d: Dims,
) -> object:
    sunk = _node(u_op, u_attrs, Args.cons(x, u_rest), u_id)
    yield rule(
        eq(y).to(_node(u_op, u_attrs, Args.cons(z, u_rest), u_id)),
        op_kind(u_op, String("unary")),
        eq(z).to(_node(l_op, l_attrs, Args.cons(x, l_rest), l_id)),
        op_kind(l_op, String("layout")),
        static_args(u_rest),
        ne(x).to(z),
        has_shape(x, d),
        name="unary(layout) -> layout(unary)",
    ).then(union(y).with_(_node(l_op, l_attrs, Args.cons(sunk, l_rest), l_id)), has_shape(sunk, d))


sinkable_scalar = relation("SinkableScalar", Tensor, Tensor, Tensor, Tensor)
"""(y, z, a, c): ``y`` is a binary elementwise op of the layout op ``z = L(a, ...)`` and a one-element
constant ``c`` (either operand order). Found by a first rule that binds only these e-classes."""
sinkable_pair = relation("SinkablePair", Tensor, Tensor, Tensor, Tensor, Tensor)
"""(y, z, w, a, b): ``y = B(z, w)`` with ``z = L(a, ...)`` and ``w = L'(b, ...)`` both layout ops (the
second rule checks that L and L' are the same op with the same attributes and shape inputs)."""

# Every binary rewrite is two rules. The first finds the candidates and records only their e-classes; the
# second joins from that short relation to read the ops' attributes, ids and shapes. In one rule, egglog's
# planner had to enumerate every binding of the layout node's id and attributes while joining the whole
# Node table: 8-18 s per iteration on GPT-2 (8,000 e-nodes) for 12 matches; split, milliseconds.


@layout_sinking.register
def _binary_candidates(
    y: Tensor,
    z: Tensor,
    w: Tensor,
    a: Tensor,
    b: Tensor,
    b_op: String,
    l_op: String,
    l_op2: String,
    b_attrs: Attrs,
    l_attrs: Attrs,
    l_attrs2: Attrs,
    l_rest: Args,
    l_rest2: Args,
    b_id: String,
    l_id: String,
    l_id2: String,
) -> object:
    binary_kind = op_kind(b_op, String("binary"))
    laid_out = eq(z).to(_node(l_op, l_attrs, Args.cons(a, l_rest), l_id))
    for operands in ((z, w), (w, z)):
        yield rule(
            eq(y).to(_node(b_op, b_attrs, args_of(*operands), b_id)),
            binary_kind,
            laid_out,
            op_kind(l_op, String("layout")),
            value_flag(w, "single"),
            ne(a).to(z),
            name=unique("binary(layout, scalar) candidates"),
        ).then(sinkable_scalar(y, z, a, w))
    yield rule(
        eq(y).to(_node(b_op, b_attrs, args_of(z, w), b_id)),
        binary_kind,
        laid_out,
        op_kind(l_op, String("layout")),
        eq(w).to(_node(l_op2, l_attrs2, Args.cons(b, l_rest2), l_id2)),
        ne(a).to(z),
        ne(b).to(w),
        name="binary(layout, layout) candidates",
    ).then(sinkable_pair(y, z, w, a, b))


@layout_sinking.register
def _through_binary(
    y: Tensor,
    z: Tensor,
    w: Tensor,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    b_op: String,
    l_op: String,
    b_attrs: Attrs,
    l_attrs: Attrs,
    l_rest: Args,
    b_id: String,
    l_id: String,
    l_id2: String,
    k: i64,
    tail: Dims,
    k2: i64,
    tail2: Dims,
) -> object:
    d = Dims.cons(k, tail)
    laid_out = eq(z).to(_node(l_op, l_attrs, Args.cons(a, l_rest), l_id))
    # The kinds again: the candidate fixed the e-classes, but y's and z's classes may hold other nodes.
    kinds = (op_kind(b_op, String("binary")), op_kind(l_op, String("layout")))
    for operands, sunk_operands in (((z, c), (a, c)), ((c, z), (c, a))):
        sunk = _node(b_op, b_attrs, args_of(*sunk_operands), b_id)
        # A [1]-shaped constant would raise a rank-0 layout output to rank 1 (Squeeze to a scalar, then
        # Mul by [c]): the sunk form must then see a layout output of rank 1 or more as well.
        for scalar, z_rank in ((Dims.nil(), ()), (dims_of(1), (has_shape(z, Dims.cons(k2, tail2)),))):
            yield rule(
                sinkable_scalar(y, z, a, c),
                eq(y).to(_node(b_op, b_attrs, args_of(*operands), b_id)),
                laid_out,
                *kinds,
                has_shape(c, scalar),
                *z_rank,
                has_shape(a, d),
                name=unique("binary(layout, scalar) -> layout(binary)"),
            ).then(union(y).with_(_node(l_op, l_attrs, Args.cons(sunk, l_rest), l_id)), has_shape(sunk, d))
    sunk = _node(b_op, b_attrs, args_of(a, b), b_id)
    yield rule(
        sinkable_pair(y, z, w, a, b),
        eq(y).to(_node(b_op, b_attrs, args_of(z, w), b_id)),
        laid_out,
        *kinds,
        eq(w).to(_node(l_op, l_attrs, Args.cons(b, l_rest), l_id2)),
        has_shape(a, d),
        has_shape(b, d),
        name="binary(layout, layout) -> layout(binary)",
    ).then(union(y).with_(_node(l_op, l_attrs, Args.cons(sunk, l_rest), l_id)), has_shape(sunk, d))


register_family(
    layout_sinking,
    stage="simplify",
    order=40,
    targets=STANDARD,
    applies=lambda model: has_layout_chain(model.graph),
)
