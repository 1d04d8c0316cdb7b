"""Nodes that return their input unchanged are replaced by that input (Olive's peephole checklist).

    Identity(x), Dropout(x) in inference          ==> x
    Cast(x, to=T)      when x already has type T   ==> x
    Reshape / Expand / Flatten / Squeeze / Slice / Split(1 output)
                       when the output has x's static shape          ==> x
    Reshape / Expand   whose constant target keeps x's known dims, one left open  ==> x
    Slice(x, starts = 0, ends = INT64_MAX-like, unit steps)          ==> x  (any shape: it keeps everything)
    Concat(x), Sum(x), Max(x), Min(x), Mean(x)     ==> x
    Transpose(x, perm = identity)                  ==> x
    Pad(x, pads = 0)                               ==> x

A shape-preserving Slice keeps every element only with unit steps, so Slice needs its steps omitted
or all ones. ONNX Runtime removes some of these itself; removing them here also simplifies what the
other rules see (a Cast between a Conv and its BatchNormalization, for instance).
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Tensor,
    args_of,
    attr_int,
    has_shape,
    has_type,
    returns_input,
    static_dims,
)
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, result, unique, value_flag

noop_removal: Ruleset = ruleset(name="noop_removal")

SHAPE_PRESERVING_IS_IDENTITY = ("Reshape", "Expand", "Flatten", "Squeeze", "Split")
"""Ops whose output equals their first input whenever the two shapes are the same static shape (their
other inputs only describe a shape or sizes). Not Sum: Sum(x, y) of one shape is no more x than x + y."""

# Not here: x + 0 and x * 1. Written as union(x + 0, x), they put x + 0 into x's own class, and the
# folding rules (Conv+Add, reassociation) then match through that loop with a new constant on every
# iteration: the e-graph grew to millions of e-nodes. Constant operands that do nothing are rare in
# exported models; weight folding absorbs the ones that follow a Conv, Gemm or MatMul.


@noop_removal.register
def _identities(y: Tensor, x: Tensor, attrs: Attrs, node_id: String, a: Tensor, b: Tensor, t: i64, c: Tensor) -> object:
    yield rule(eq(y).to(result("Identity", attrs, args_of(x), node_id)), name=unique("Identity -> input")).then(
        union(y).with_(x)
    )
    # Dropout with one output computes nothing in inference: no training_mode input, or a false one.
    for inputs in (args_of(x), args_of(x, a)):
        yield rule(eq(y).to(result("Dropout", attrs, inputs, node_id)), name=unique("Dropout -> input")).then(
            union(y).with_(x)
        )
    yield rule(
        eq(y).to(result("Dropout", attrs, args_of(x, a, b), node_id)),
        value_flag(b, "zeros"),
        name=unique("Dropout -> input"),
    ).then(union(y).with_(x))
    yield rule(
        eq(y).to(result("Cast", attrs, args_of(x), node_id)),
        attr_int(attrs, "to", t),
        has_type(x, t),
        name=unique("Cast to own type -> input"),
    ).then(union(y).with_(x))
    yield rule(
        eq(y).to(result("Transpose", attrs, args_of(x), node_id)),
        attr_flag(attrs, "identity_perm"),
        name=unique("Transpose(identity) -> input"),
    ).then(union(y).with_(x))
    for op in ("Concat", "Sum", "Max", "Min", "Mean"):
        yield rule(eq(y).to(result(op, attrs, args_of(x), node_id)), name=unique(f"{op}(one input) -> input")).then(
            union(y).with_(x)
        )
    for inputs in (args_of(x, a), args_of(x, a, c)):
        yield rule(
            eq(y).to(result("Pad", attrs, inputs, node_id)), value_flag(a, "zeros"), name=unique("Pad(zeros) -> input")
        ).then(union(y).with_(x))


@noop_removal.register
def _same_shape(
    y: Tensor,
    x: Tensor,
    attrs: Attrs,
    node_id: String,
    rest: Args,
    d: Dims,
    c: Tensor,
    s: Tensor,
    e: Tensor,
    step: Tensor,
) -> object:
    for op in SHAPE_PRESERVING_IS_IDENTITY:
        yield rule(
            eq(y).to(result(op, attrs, Args.cons(x, rest), node_id)),
            has_shape(y, d),
            has_shape(x, d),
            static_dims(d),
            name=unique(f"{op} to own shape -> input"),
        ).then(union(y).with_(x))
    # Shown in Python where a dim is open: Reshape(x, [-1, C, 1, 1]) of an [N, C, 1, 1] x.
    for op in ("Reshape", "Expand"):
        yield rule(
            eq(y).to(result(op, attrs, args_of(x, s), node_id)),
            returns_input(y, x),
            name=unique(f"{op} keeping its input's dims -> input"),
        ).then(union(y).with_(x))
    # Slice keeps every element of a same-shaped output only with unit steps (omitted, or all ones).
    for inputs in (args_of(x), args_of(x, s, e), args_of(x, s, e, c), args_of(x, s, e, c, Tensor.absent())):
        yield rule(
            eq(y).to(result("Slice", attrs, inputs, node_id)),
            has_shape(y, d),
            has_shape(x, d),
            static_dims(d),
            name=unique("Slice to own shape -> input"),
        ).then(union(y).with_(x))
    yield rule(
        eq(y).to(result("Slice", attrs, args_of(x, s, e, c, step), node_id)),
        value_flag(step, "ones"),
        has_shape(y, d),
        has_shape(x, d),
        static_dims(d),
        name=unique("Slice to own shape -> input"),
    ).then(union(y).with_(x))
    # From 0 to past any end with unit steps keeps every element whatever the shape (an exporter's x[:, :]).
    for inputs in (args_of(x, s, e), args_of(x, s, e, c), args_of(x, s, e, c, Tensor.absent())):
        yield rule(
            eq(y).to(result("Slice", attrs, inputs, node_id)),
            value_flag(s, "zeros"),
            value_flag(e, "past_any_end"),
            name=unique("Slice over everything -> input"),
        ).then(union(y).with_(x))
    yield rule(
        eq(y).to(result("Slice", attrs, args_of(x, s, e, c, step), node_id)),
        value_flag(s, "zeros"),
        value_flag(e, "past_any_end"),
        value_flag(step, "ones"),
        name=unique("Slice over everything -> input"),
    ).then(union(y).with_(x))


register_family(noop_removal, stage="simplify", order=20, targets=STANDARD)
