"""Layout ops moved below elementwise ops, so that pairs of them meet and cancel (TASO/TENSAT).

    U(L(x))                        ==>  L(U(x))           U elementwise unary, L a layout op
    B(L(a), c), B(c, L(a))         ==>  L(B(a, c))        B elementwise binary, c a one-element constant
    B(L(a), L(b)), a and b of one shape  ==>  L(B(a, b))  the same L (attributes and shape inputs)
    B(T(a), c), B(c, T(a))         ==>  T(B(a, c'))       T a Transpose, c a constant that broadcasts into
                                                          T(a) without growing it, c' = c lined up with
                                                          leading 1s and transposed by T's inverse perm

with L one of Transpose, Reshape, Squeeze, Unsqueeze, Flatten: ops that move or relabel elements
without computing. A converted TensorFlow model wraps every elementwise chain in an NHWC->NCHW
Transpose and its inverse; once the first Transpose has sunk to the second, ``consecutive`` removes
the pair (or composes the two into one), and a Reshape that has sunk to its inverse becomes a no-op.

The Transpose rule is for Keras 3's jax and torch exports, which wrap every Conv in NHWC<->NCHW
Transposes and write the BatchNormalization after it as Mul/Add (Sub) by [1,1,1,C] or [C] constants in
NHWC: sunk below them, the constants become [1,C,1,1], the Transposes meet and cancel, and
``weight_folding`` takes the per-channel affine into the Conv. The new constant is a derived tensor,
computed at decode time (``transpose_constant``); its shape comes from a fact the encoder computes
(``PermutedConstant``), and the sunk node gets the facts ``weight_folding`` needs of the original
(its shape kept, ``SameShape``; one reader and float32, if the original had them).

Both forms stay in the e-graph; on its own a sunk layout op costs the same, so the cost model picks
the sunk form only where something cancelled. The new inner node keeps the shape of its input (the
rules require it known), so the cost model prices it like the original.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from egglog import Ruleset, String, eq, i64, ne, relation, rule, ruleset, union

from onnxsat.eqsat.facts import FLAG_MAX_ELEMENTS
from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    dims_of,
    has_shape,
    is_float32,
    op_kind,
    out,
    permuted_constant,
    same_shape,
    sole_use,
    static_args,
    static_value,
)
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import derived, unique, value_flag
from onnxsat.eqsat.weights import weight_kernel
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


# An op whose output is in its input's own class (``y == z``: a Cast to its own type, an Add of zeros,
# merged with their input by ``noop_removal``) is not sunk: it changes nothing, and each sinking would
# write it again below the layout op, into a class holding it, one level deeper every iteration (the
# Casts of Keras' torch exports grew the e-graph to 26,000 e-nodes in 30 iterations).


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
        ne(y).to(z),
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


BROADCAST_MIN_OPSET = 7
"""Before opset 7, Add/Mul/... broadcast only with ``broadcast=1`` and line operands up by an ``axis``
attribute, not by trailing dims: the Transpose rule's shapes would be wrong, so it is left to later opsets."""


def _perm(attrs: list[onnx.AttributeProto]) -> list[int] | None:
    for attr in attrs:
        if attr.name == "perm":
            return [int(v) for v in attr.ints]
    return None


def permuted_constants(
    graph: onnx.GraphProto,
    shapes: dict[str, tuple[int, ...]],
    static: set[str],
    tables: dict[tuple[str, str, tuple[bytes, ...]], int],
    attributes: list[list[onnx.AttributeProto]],
    opset: int,
) -> Iterator[tuple[str, str, int, tuple[int, ...], int]]:
    """``(x, c, table, dims, rank)`` for the ``PermutedConstant`` facts: ``c`` is an operand of a binary
    elementwise node of the main graph whose other operand is ``x``, and ``table`` a Transpose attribute
    table with an explicit perm of ``x``'s rank.

    ``c`` must be a possible constant (``static``: an initializer, a Constant, or foldable; the rule checks
    that it is static), of known shape, at most ``FLAG_MAX_ELEMENTS`` elements (it is copied, transposed,
    into the file), and line up with ``x`` without growing it: each of its dims, after leading 1s, is 1
    or the known dim of ``x`` it faces. So ``B(x, c)`` has ``x``'s shape whatever an open dim of ``x``
    (a dynamic batch) turns out to be, and so has ``B(a, c')`` below the Transpose. Shapes ``[]`` and
    ``[1]`` are the one-element rule's."""
    if opset < BROADCAST_MIN_OPSET:
        return
    by_rank: dict[int, list[tuple[int, list[int]]]] = {}
    for (domain, op_type, _), index in tables.items():
        perm = _perm(attributes[index]) if domain in ("", "ai.onnx") and op_type == "Transpose" else None
        if perm is not None and sorted(perm) == list(range(len(perm))):
            by_rank.setdefault(len(perm), []).append((index, perm))
    binary = set(ELEMENTWISE_BINARY)
    for node in graph.node:
        if node.op_type not in binary or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        for x, c in (node.input, reversed(node.input)):
            x_dims, c_dims = shapes.get(x), shapes.get(c)
            if x == c or c not in static or x_dims is None or c_dims is None or not by_rank.get(len(x_dims)):
                continue
            if len(c_dims) > len(x_dims) or c_dims in ((), (1,)) or any(d < 1 for d in c_dims):
                continue
            if int(np.prod(c_dims, dtype=np.int64)) > FLAG_MAX_ELEMENTS:
                continue
            aligned = (1,) * (len(x_dims) - len(c_dims)) + tuple(c_dims)
            if not all(want == 1 or want == have for want, have in zip(aligned, x_dims, strict=True)):
                continue
            for index, perm in by_rank[len(x_dims)]:
                inverse = np.argsort(perm)
                yield x, c, index, tuple(aligned[i] for i in inverse), len(x_dims)


@weight_kernel("transpose_constant")
def transpose_constant(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """A constant that broadcast against a Transpose's output, moved to its input: lined up with leading 1s
    to the perm's rank, then transposed by the inverse perm (NHWC [1,1,1,C] -> NCHW [1,C,1,1]). Exact."""
    (value,) = args
    assert value is not None
    perm = [int(v) for v in attrs["perm"].ints]
    aligned = value.reshape((1,) * (len(perm) - value.ndim) + value.shape)
    return np.ascontiguousarray(np.transpose(aligned, np.argsort(perm)))


sinkable_constant = relation("SinkableConstant", Tensor, Tensor, Tensor, Tensor)
"""(y, z, a, c): ``y`` is a binary elementwise op of ``z = Transpose(a)`` and a constant ``c`` that a
``PermutedConstant`` fact lines up with ``z`` under that Transpose's perm (either operand order)."""
sunk_below = relation("SunkBelow", Tensor, Tensor)
"""(inner, y): ``inner`` is the binary node written below the Transpose in place of ``y``."""


@layout_sinking.register
def _through_broadcast_candidates(
    y: Tensor,
    z: Tensor,
    w: Tensor,
    a: Tensor,
    b_op: String,
    b_attrs: Attrs,
    l_attrs: Attrs,
    b_id: String,
    l_id: String,
    d: Dims,
    rank: i64,
) -> object:
    for operands in ((z, w), (w, z)):
        yield rule(
            eq(y).to(_node(b_op, b_attrs, args_of(*operands), b_id)),
            op_kind(b_op, String("binary")),
            eq(z).to(_node("Transpose", l_attrs, args_of(a), l_id)),
            permuted_constant(z, w, l_attrs, d, rank),
            static_value(w),
            ne(a).to(z),
            ne(y).to(z),
            name=unique("binary(Transpose, constant) candidates"),
        ).then(sinkable_constant(y, z, a, w))


@layout_sinking.register
def _through_broadcast(
    y: Tensor,
    z: Tensor,
    a: Tensor,
    c: Tensor,
    b_op: String,
    b_attrs: Attrs,
    l_attrs: Attrs,
    b_id: String,
    l_id: String,
    d: Dims,
    moved_dims: Dims,
    rank: i64,
) -> object:
    moved = derived("transpose_constant", args_of(c), l_attrs)
    for operands, sunk_operands in (((z, c), (a, moved)), ((c, z), (moved, a))):
        sunk = _node(b_op, b_attrs, args_of(*sunk_operands), b_id)
        yield rule(
            sinkable_constant(y, z, a, c),
            eq(y).to(_node(b_op, b_attrs, args_of(*operands), b_id)),
            eq(z).to(_node("Transpose", l_attrs, args_of(a), l_id)),
            op_kind(b_op, String("binary")),
            permuted_constant(z, c, l_attrs, moved_dims, rank),
            has_shape(a, d),
            name=unique("binary(Transpose, constant) -> Transpose(binary)"),
        ).then(
            union(y).with_(_node("Transpose", l_attrs, args_of(sunk), l_id)),
            has_shape(sunk, d),
            has_shape(moved, moved_dims),
            same_shape(sunk, a, rank),
            sunk_below(sunk, y),
        )


@layout_sinking.register
def _sunk_node_facts(inner: Tensor, y: Tensor) -> object:
    """The sunk node is read only by the Transpose above it, or by the next op once that sinks too: one
    reader if ``y`` had one. Without it, the Add after a sunk Mul could not fold into the Conv."""
    yield rule(sunk_below(inner, y), sole_use(y), name="sunk below Transpose: sole use").then(sole_use(inner))
    yield rule(sunk_below(inner, y), is_float32(y), name="sunk below Transpose: float32").then(is_float32(inner))


register_family(
    layout_sinking,
    stage="simplify",
    order=40,
    targets=STANDARD,
    applies=lambda model: has_layout_chain(model.graph),
)
