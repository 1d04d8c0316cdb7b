"""Consecutive ops of one kind collapsed into one (Olive's peephole checklist).

    Transpose(Transpose(x, p), q)                    ==>  Transpose(x, composed), or x when q undoes p
    R1(R2(x)), R1, R2 in Reshape/Squeeze/Unsqueeze/Flatten, static result shape  ==>  Reshape(x, shape)
    LogSoftmax(LogSoftmax(x)) along the same axis    ==>  LogSoftmax(x)
    Concat(Concat(a, b), c...) along the same axis   ==>  Concat(a, b, c...)   (inner list first or second,
                                                          read by the outer Concat only)

Reshape chains cover consecutive Squeezes and Unsqueezes and any mix with Reshape and Flatten: data
order never changes in these ops, so only the final shape matters.
"""

from __future__ import annotations

from egglog import Ruleset, String, i64, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Tensor,
    args_of,
    attr_int,
    has_shape,
    inverse_perms,
    opset_at_least,
    sole_use,
    static_dims,
)
from onnxsat.eqsat.rules.analysis import concat_parts, node_input, second_input
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, computed, result, unique

consecutive: Ruleset = ruleset(name="consecutive")

SHAPE_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


@consecutive.register
def _transposes(y: Tensor, z: Tensor, x: Tensor, outer: Attrs, inner: Attrs, id1: String, id2: String) -> object:
    pair = (
        node_input(y, "Transpose", z, Args.nil(), outer, id1),
        node_input(z, "Transpose", x, Args.nil(), inner, id2),
    )
    yield rule(
        *pair,
        attr_flag(outer, "explicit_perm"),
        attr_flag(inner, "explicit_perm"),
        name=unique("Transpose+Transpose -> Transpose"),
    ).then(union(y).with_(result("Transpose", computed("compose_perm", outer, inner, Args.nil()), args_of(x), id1)))
    yield rule(
        *pair,
        inverse_perms(outer, inner),
        name=unique("Transpose+Transpose(inverse) -> input"),
    ).then(union(y).with_(x))


@consecutive.register
def _shape_chains(
    y: Tensor, z: Tensor, x: Tensor, a1: Attrs, a2: Attrs, r1: Args, r2: Args, id1: String, id2: String, d: Dims
) -> object:
    reshape = result("Reshape", Attrs.none(), args_of(x, Tensor.ints(d)), id1)
    for outer in SHAPE_OPS:
        for inner in SHAPE_OPS:
            yield rule(
                node_input(y, outer, z, r1, a1, id1),
                node_input(z, inner, x, r2, a2, id2),
                has_shape(y, d),
                static_dims(d),
                opset_at_least(5),
                name=unique(f"{inner}+{outer} -> Reshape"),
            ).then(union(y).with_(reshape))


@consecutive.register
def _log_softmax(y: Tensor, z: Tensor, x: Tensor, a1: Attrs, a2: Attrs, id1: String, id2: String, k: i64) -> object:
    yield rule(
        node_input(y, "LogSoftmax", z, Args.nil(), a1, id1),
        node_input(z, "LogSoftmax", x, Args.nil(), a2, id2),
        attr_int(a1, "axis", k),
        attr_int(a2, "axis", k),
        name=unique("LogSoftmax+LogSoftmax -> LogSoftmax"),
    ).then(union(y).with_(z))


@consecutive.register
def _concats(
    y: Tensor,
    z: Tensor,
    h: Tensor,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    rest: Args,
    a1: Attrs,
    a2: Attrs,
    id1: String,
    id2: String,
    k: i64,
) -> object:
    for inner_tensors in ((a, b), (a, b, c)):
        count = len(inner_tensors)
        inner = concat_parts(z, a, b, c if count == 3 else Tensor.absent(), count, a2, id2)
        # An inner Concat read elsewhere is computed anyway: splicing it saves nothing and only grows
        # the e-graph (DenseNet chains every block's Concats).
        same_axis = (attr_int(a1, "axis", k), attr_int(a2, "axis", k), sole_use(z))
        spliced = _followed_by(inner_tensors, rest)
        yield rule(
            node_input(y, "Concat", z, rest, a1, id1),
            inner,
            *same_axis,
            name=unique("Concat+Concat -> Concat"),
        ).then(union(y).with_(result("Concat", a1, spliced, id1)))
        yield rule(
            second_input(y, "Concat", h, z, rest, a1, id1),
            inner,
            *same_axis,
            name=unique("Concat+Concat -> Concat"),
        ).then(union(y).with_(result("Concat", a1, Args.cons(h, spliced), id1)))


def _followed_by(tensors: tuple[Tensor, ...], rest: Args) -> Args:
    """The list ``tensors..., rest...``."""
    spliced = rest
    for tensor in reversed(tensors):
        spliced = Args.cons(tensor, spliced)
    return spliced


register_family(consecutive, stage="simplify", order=30, targets=STANDARD)
