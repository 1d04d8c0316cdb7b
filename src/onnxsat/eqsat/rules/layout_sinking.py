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


# The rules join the nodes they rewrite through three relations, each read off one node: ``LayoutInput``,
# ``UnaryInput`` and ``BinaryOperands``. egglog's planner binds one variable at a time, the one whose
# smallest table is smallest, and in a body naming two nodes no table is small: it bound the layout node's
# output and the other node each from the whole Node table before any atom tied them together, a product
# of the two (16 s for the scalar candidates and 200 s for the pair candidates, whose second operand was
# any node, on MaxViT-T's 2,500 nodes; 0.2 s per iteration for the unary rule with nothing to match). The
# relations are short and share the tensors, so every variable is bound from one already bound. A rewrite
# asserts the relations of the nodes it writes: the next op of a chain matches in the next iteration.

layout_input = relation("LayoutInput", Tensor, Tensor, String, Attrs, Args, String)
"""(z, a, op, attrs, rest, id): ``z`` is the output of the layout node ``op(a, *rest)``, ``a`` not ``z`` itself."""
unary_input = relation("UnaryInput", Tensor, Tensor, String, Attrs, Args, String)
"""(y, z, op, attrs, rest, id): ``y`` is the output of the unary elementwise node ``op(z, *rest)``, ``rest``
static (Clip's bounds)."""
binary_operands = relation("BinaryOperands", Tensor, Tensor, Tensor, String, Attrs, String)
"""(y, first, second, op, attrs, id): ``y`` is the output of the binary elementwise node ``op(first, second)``."""


@layout_sinking.register
def _node_relations(y: Tensor, z: Tensor, w: Tensor, op: String, attrs: Attrs, rest: Args, node_id: String) -> object:
    yield rule(
        eq(y).to(_node(op, attrs, Args.cons(z, rest), node_id)),
        op_kind(op, String("layout")),
        ne(z).to(y),
        name="layout node",
    ).then(layout_input(y, z, op, attrs, rest, node_id))
    yield rule(
        eq(y).to(_node(op, attrs, Args.cons(z, rest), node_id)),
        op_kind(op, String("unary")),
        static_args(rest),
        name="unary node",
    ).then(unary_input(y, z, op, attrs, rest, node_id))
    yield rule(
        eq(y).to(_node(op, attrs, args_of(z, w), node_id)),
        op_kind(op, String("binary")),
        name="binary node",
    ).then(binary_operands(y, z, w, op, attrs, node_id))


def _laid_out(y: Tensor, sunk: Tensor, l_op: String, l_attrs: Attrs, l_rest: Args, l_id: String) -> tuple[object, ...]:
    """``y`` is also the layout op of the sunk node, and its ``LayoutInput`` holds at once."""
    return (
        union(y).with_(_node(l_op, l_attrs, Args.cons(sunk, l_rest), l_id)),
        layout_input(y, sunk, l_op, l_attrs, l_rest, l_id),
    )


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
        unary_input(y, z, u_op, u_attrs, u_rest, u_id),
        layout_input(z, x, l_op, l_attrs, l_rest, l_id),
        ne(x).to(z),
        ne(y).to(z),
        has_shape(x, d),
        name="unary(layout) -> layout(unary)",
    ).then(
        *_laid_out(y, sunk, l_op, l_attrs, l_rest, l_id),
        unary_input(sunk, x, u_op, u_attrs, u_rest, u_id),
        has_shape(sunk, d),
    )


sinkable_scalar = relation("SinkableScalar", Tensor, Tensor, Tensor, Tensor)
"""(y, z, a, c): ``y`` is a binary elementwise op of the layout op ``z = L(a, ...)`` and a one-element
constant ``c`` (either operand order)."""
sinkable_pair = relation("SinkablePair", Tensor, Tensor, Tensor, Tensor, Tensor)
"""(y, z, w, a, b): ``y = B(z, w)`` with ``z = L(a, ...)`` and ``w = L(b, ...)`` the same layout op (same
attributes and shape inputs)."""

# A binary rewrite is two rules: the first finds the candidates in the short relations and records their
# e-classes, the second joins from that shorter one to read the shapes. In one body the shape lists matched
# as ``Dims.cons`` (one per known shape suffix of the model) may be smaller than the relations, and then be
# bound first, none tied to another.


@layout_sinking.register
def _binary_candidates(
    y: Tensor,
    z: Tensor,
    w: Tensor,
    a: Tensor,
    b: Tensor,
    b_op: String,
    l_op: String,
    b_attrs: Attrs,
    l_attrs: Attrs,
    l_rest: Args,
    b_id: String,
    l_id: String,
    l_id2: String,
) -> object:
    laid_out = layout_input(z, a, l_op, l_attrs, l_rest, l_id)
    for operands in ((z, w), (w, z)):
        yield rule(
            binary_operands(y, *operands, b_op, b_attrs, b_id),
            laid_out,
            value_flag(w, "single"),
            ne(a).to(z),
            name=unique("binary(layout, scalar) candidates"),
        ).then(sinkable_scalar(y, z, a, w))
    yield rule(
        binary_operands(y, z, w, b_op, b_attrs, b_id),
        laid_out,
        layout_input(w, b, l_op, l_attrs, l_rest, l_id2),
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
    binary = (b_op, b_attrs, b_id)
    laid_out = layout_input(z, a, l_op, l_attrs, l_rest, l_id)
    for operands, sunk_operands in (((z, c), (a, c)), ((c, z), (c, a))):
        sunk = _node(b_op, b_attrs, args_of(*sunk_operands), b_id)
        # A [1]-shaped constant would raise a rank-0 layout output to rank 1 (Squeeze to a scalar, then
        # Mul by [c]): the sunk form must then see a layout output of rank 1 or more as well.
        for scalar, z_rank in ((Dims.nil(), ()), (dims_of(1), (has_shape(z, Dims.cons(k2, tail2)),))):
            yield rule(
                sinkable_scalar(y, z, a, c),
                binary_operands(y, *operands, *binary),
                laid_out,
                has_shape(c, scalar),
                *z_rank,
                has_shape(a, d),
                name=unique("binary(layout, scalar) -> layout(binary)"),
            ).then(
                *_laid_out(y, sunk, l_op, l_attrs, l_rest, l_id),
                binary_operands(sunk, *sunk_operands, *binary),
                has_shape(sunk, d),
            )
    sunk = _node(b_op, b_attrs, args_of(a, b), b_id)
    yield rule(
        sinkable_pair(y, z, w, a, b),
        binary_operands(y, z, w, *binary),
        laid_out,
        layout_input(w, b, l_op, l_attrs, l_rest, l_id2),
        has_shape(a, d),
        has_shape(b, d),
        name="binary(layout, layout) -> layout(binary)",
    ).then(
        *_laid_out(y, sunk, l_op, l_attrs, l_rest, l_id),
        binary_operands(sunk, a, b, *binary),
        has_shape(sunk, d),
    )


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
            binary_operands(y, *operands, b_op, b_attrs, b_id),
            _transposed(z, a, l_attrs, l_id),
            permuted_constant(z, w, l_attrs, d, rank),
            static_value(w),
            ne(a).to(z),
            ne(y).to(z),
            name=unique("binary(Transpose, constant) candidates"),
        ).then(sinkable_constant(y, z, a, w))


def _transposed(z: Tensor, a: Tensor, attrs: Attrs, node_id: String) -> object:
    """``z`` is the output of a Transpose of ``a``."""
    return layout_input(z, a, String("Transpose"), attrs, Args.nil(), node_id)


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
            binary_operands(y, *operands, b_op, b_attrs, b_id),
            _transposed(z, a, l_attrs, l_id),
            permuted_constant(z, c, l_attrs, moved_dims, rank),
            has_shape(a, d),
            name=unique("binary(Transpose, constant) -> Transpose(binary)"),
        ).then(
            *_laid_out(y, sunk, String("Transpose"), l_attrs, Args.nil(), l_id),
            binary_operands(sunk, *sunk_operands, b_op, b_attrs, b_id),
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
