"""Parallel products of one input merged into one wider product followed by a Split (TASO/TENSAT).

    MatMul(x, W1), MatMul(x, W2)        ==>  Split(MatMul(x, [W1 W2]), [N1, N2], axis=-1)
    Gemm(x, W1, c1), Gemm(x, W2, c2)    ==>  Split(Gemm(x, [W1 W2], [c1 c2]), [N1, N2], axis=-1)
    Conv(x, W1, b1), Conv(x, W2, b2)    ==>  Split(Conv(x, [W1; W2], [b1; b2]), [M1, M2], axis=1)

A multi-pattern rule: two roots that share ``x``, taken from the pairs the encoder found
(``facts.parallel_pairs``, in graph order, so each pair is merged one way). Q/K/V projections,
Inception and SqueezeNet branches have this shape. The merged weights are constants made at decode
time, never a Concat of the weights left in the graph, which would run again on every inference. Whether
the merge pays is the cost model's call: one wider product reads ``x`` once and uses the cores
better, but the Split copies the result. Convolutions must share every attribute (kernel, strides,
pads, dilations) and be ungrouped; the Split takes its sizes as an input, so the model's opset must
be 13 or later.
"""

from __future__ import annotations

from collections.abc import Callable

from egglog import Ruleset, String, Unit, eq, i64, ne, relation, rule, ruleset, union, var

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    attr_int,
    dims_of,
    has_shape,
    opset_at_least,
    out,
    parallel_pair,
    static_args,
)
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import computed, derived, plain, result, unique

parallel_merge: Ruleset = ruleset(name="parallel_merge")


def _split(merged: Tensor, axis_kernel: str, sizes: list[i64], node_id: String) -> Node:
    attrs = computed(axis_kernel, Attrs.none(), Attrs.none(), Args.nil())
    return Node("Split", "", attrs, args_of(merged, Tensor.ints(dims_of(*sizes))), Args.nil(), node_id, len(sizes))


@parallel_merge.register
def _merge_matmuls(
    y1: Tensor,
    y2: Tensor,
    y3: Tensor,
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    w3: Tensor,
    s1: String,
    s2: String,
    s3: String,
    a1: Attrs,
    a2: Attrs,
    a3: Attrs,
    id1: String,
    id2: String,
    id3: String,
    k: i64,
    n1: i64,
    n2: i64,
    n3: i64,
    m: i64,
    batch: i64,
) -> object:
    """Two products of initializer weights; merged weights are never merged again.

    Written for any count, but run for pairs only: the three-way rule (Q, K and V at once) made egglog's
    join take 12 s on a 4-layer BERT, against 0.7 s for the whole rule library without it.
    """
    roots = ((y1, w1, s1, a1, id1, n1), (y2, w2, s2, a2, id2, n2), (y3, w3, s3, a3, id3, n3))
    for count in (2,):
        chosen = roots[:count]
        sizes = [r[5] for r in chosen]
        total = sizes[0] + sizes[1] if count == 2 else sizes[0] + sizes[1] + sizes[2]
        weight = derived("concat_last", args_of(*(r[1] for r in chosen)), a1)
        merged = out(plain("MatMul", a1, args_of(x, weight), id1), 0)
        split = _split(merged, "last_axis", sizes, id2)
        conditions = [parallel_pair(y1, y2), opset_at_least(13)]
        for y, w, name, attrs, node_id, n in chosen:
            conditions += [
                eq(y).to(result("MatMul", attrs, args_of(x, w), node_id)),
                eq(w).to(Tensor.initializer(name)),
                has_shape(w, dims_of(k, n)),
            ]
        conditions += [ne(id1).to(id2)] + ([ne(id1).to(id3), ne(id2).to(id3)] if count == 3 else [])
        for x_shape, merged_shape in (
            (dims_of(m, k), dims_of(m, total)),
            (dims_of(batch, m, k), dims_of(batch, m, total)),
        ):
            yield rule(*conditions, has_shape(x, x_shape), name=unique(f"{count} x MatMul -> MatMul+Split")).then(
                *(union(r[0]).with_(out(split, i)) for i, r in enumerate(chosen)),
                has_shape(weight, dims_of(k, total)),
                has_shape(merged, merged_shape),
            )


merged_conv = relation("MergedConv", Tensor, Tensor)
"""(merged output, first original output): written by the Conv merge for the shape rule below."""
parallel_convs = relation("ParallelConvs", Tensor, Tensor, Args, Args)
"""(first output, second output, first's inputs after x, second's): a pair of the encoder's found to be two
Convs with equal attributes reading one x. A stage of its own: with the static bias checks in the same
body, egglog's join planner took 17 s per iteration on GoogLeNet."""
parallel_gemms = relation("ParallelGemms", Tensor, Tensor, Args, Args)
"""The same for two Gemms: with the shape and initializer checks in the merge's body, every iteration
cost 0.6 s on a 4-layer BERT."""


@parallel_merge.register
def _parallel_products(
    y1: Tensor, y2: Tensor, x: Tensor, attrs: Attrs, r1: Args, r2: Args, id1: String, id2: String
) -> object:
    for op, found in (("Conv", parallel_convs), ("Gemm", parallel_gemms)):
        yield rule(
            parallel_pair(y1, y2),
            eq(y1).to(result(op, attrs, Args.cons(x, r1), id1)),
            eq(y2).to(result(op, attrs, Args.cons(x, r2), id2)),
            ne(id1).to(id2),
            name=f"{op} || {op} found",
        ).then(found(y1, y2, r1, r2))


_Product = tuple[Tensor, Args, Tensor, Tensor, String, String]
"""(output, inputs after x, weight, bias, node id, weight initializer name) of one side of a found pair."""


def _found_pair(
    found: Callable[[Tensor, Tensor, Args, Args], Unit],
    op: str,
    attrs: Attrs,
    x: Tensor,
    with_bias: bool,
    first: _Product,
    second: _Product,
) -> list[object]:
    """Conditions shared by the Gemm and Conv merges: a found pair whose inputs after x are an initializer
    weight and, ``with_bias``, a bias."""
    conditions: list[object] = [found(first[0], second[0], first[1], second[1])]
    for y, rest, weight, bias, node_id, name in (first, second):
        conditions += [
            eq(rest).to(args_of(weight, bias) if with_bias else args_of(weight)),
            eq(y).to(result(op, attrs, Args.cons(x, rest), node_id)),
            eq(weight).to(Tensor.initializer(name)),
        ]
    return conditions


@parallel_merge.register
def _merge_gemms(
    y1: Tensor,
    y2: Tensor,
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    c1: Tensor,
    c2: Tensor,
    r1: Args,
    r2: Args,
    attrs: Attrs,
    s1: String,
    s2: String,
    t1: String,
    t2: String,
    id1: String,
    id2: String,
    m: i64,
    n1: i64,
    n2: i64,
    k: i64,
) -> object:
    """Pairs of Gemms with equal attributes, initializer weights and initializer biases of one form ([N] or
    [1, N], checked when the pair is found), or no biases: weights and biases concatenated along N."""
    for trans_b, concat, merged_weight_shape in (
        (0, "concat_last", dims_of(k, n1 + n2)),
        (1, "concat_first", dims_of(n1 + n2, k)),
    ):
        weight = derived(concat, args_of(w1, w2), attrs)
        for with_bias in (False, True):
            bias = derived("concat_last", args_of(c1, c2), attrs)
            merged = result("Gemm", attrs, args_of(x, weight, bias) if with_bias else args_of(x, weight), id1)
            split = _split(merged, "last_axis", [n1, n2], id2)
            yield rule(
                *_found_pair(
                    parallel_gemms, "Gemm", attrs, x, with_bias, (y1, r1, w1, c1, id1, s1), (y2, r2, w2, c2, id2, s2)
                ),
                attr_int(attrs, "transB", trans_b),
                *((eq(c1).to(Tensor.initializer(t1)), eq(c2).to(Tensor.initializer(t2))) if with_bias else ()),
                has_shape(y1, dims_of(m, n1)),
                has_shape(y2, dims_of(m, n2)),
                has_shape(w1, dims_of(n1, k) if trans_b else dims_of(k, n1)),
                opset_at_least(13),
                name=unique("Gemm || Gemm -> Gemm+Split"),
            ).then(
                union(y1).with_(out(split, 0)),
                union(y2).with_(out(split, 1)),
                has_shape(weight, merged_weight_shape),
                has_shape(merged, dims_of(m, n1 + n2)),
            )


@parallel_merge.register
def _merge_convs(
    y1: Tensor,
    y2: Tensor,
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    b1: Tensor,
    b2: Tensor,
    r1: Args,
    r2: Args,
    attrs: Attrs,
    id1: String,
    id2: String,
    m1: i64,
    m2: i64,
    w_tail: Dims,
    t2: Dims,
    s1: String,
    s2: String,
) -> object:
    """Pairs of convolutions whose filters are initializers (so merged ones are never merged again).

    That the two are ungrouped and have equal attributes and filter shapes apart from their counts is
    checked in Python when the pair is found (``facts.parallel_pairs``): as conditions here, the join
    on the shared filter shape went quadratic in egglog (all 3x3 filters of a network share it).
    """
    weight = derived("concat_first", args_of(w1, w2), attrs)
    bias = derived("concat_first", args_of(b1, b2), attrs)
    for with_bias in (False, True):
        merged = result("Conv", attrs, args_of(x, weight, bias) if with_bias else args_of(x, weight), id1)
        split = _split(merged, "channel_axis", [m1, m2], id2)
        yield rule(
            *_found_pair(
                parallel_convs, "Conv", attrs, x, with_bias, (y1, r1, w1, b1, id1, s1), (y2, r2, w2, b2, id2, s2)
            ),
            *((static_args(r1), static_args(r2)) if with_bias else ()),
            has_shape(w1, Dims.cons(m1, w_tail)),
            has_shape(w2, Dims.cons(m2, t2)),
            opset_at_least(13),
            name=unique("Conv || Conv -> Conv+Split"),
        ).then(
            union(y1).with_(out(split, 0)),
            union(y2).with_(out(split, 1)),
            has_shape(weight, Dims.cons(m1 + m2, w_tail)),
            merged_conv(merged, y1),
        )


_attrs, _x, _rest, _id = var("attrs", Attrs), var("x", Tensor), var("rest", Args), var("node_id", String)


@parallel_merge.register
def _merged_conv_shape(
    t: Tensor, y1: Tensor, wd: Tensor, n: i64, m1: i64, h: i64, w: i64, mm: i64, tail: Dims
) -> object:
    """The merged Conv's output shape: the first output's, with the merged filter count. A rule of its own,
    starting from the merges made: as a condition of the merge, egglog's join planner took seconds."""
    yield rule(
        merged_conv(t, y1),
        has_shape(y1, dims_of(n, m1, h, w)),
        eq(t).to(out(Node("Conv", "", _attrs, Args.cons(_x, Args.cons(wd, _rest)), Args.nil(), _id, 1), 0)),
        has_shape(wd, Dims.cons(mm, tail)),
        name=unique("shape of merged Conv"),
    ).then(has_shape(t, dims_of(n, mm, h, w)))


register_family(
    parallel_merge,
    stage="grow",
    order=150,
    targets=STANDARD,
    applies=lambda model: model.has_parallel_pairs,
)
