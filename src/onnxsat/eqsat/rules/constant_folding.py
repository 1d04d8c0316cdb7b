"""Constant folding: whatever depends only on constants is computed once, at optimization time.

    y = Op(c1, c2, ...)   with every input static  ==>  y = folded(Op(c1, c2, ...))
    y = Shape(x)          with x's shape static     ==>  y = the shape, as a constant
    y = CastLike(c, x)    with c static, x's type T  ==>  y = folded(Cast(c, to=T))

The folded value is computed by ONNX Runtime when the extracted graph is decoded (``folding.py``), so
it is exactly what the original computed at run time. Static inputs include earlier folds, so whole
initializer-only subgraphs fold (an exporter's ``Expand(CastLike(...))`` bias chains, a
``ConstantOfShape``-built weight, the transpose of a tied weight). Only outputs the encoder marked
foldable qualify: a deterministic standard op whose output size is known and bounded
(``facts.FOLD_MAX_ELEMENTS``, ``facts.FOLD_MAX_GROWTH``), so folding never bloats the file. With
``Shape`` folded, ``Shape -> Gather -> Concat -> Reshape`` chains on static shapes fold down to a
constant Reshape target.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    dims_of,
    foldable,
    has_shape,
    has_type,
    out,
    static_args,
    static_dims,
    static_value,
)
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import computed, plain, result, unique

constant_folding: Ruleset = ruleset(name="constant_folding")


@constant_folding.register
def _fold(
    y: Tensor,
    op: String,
    attrs: Attrs,
    inputs: Args,
    node_id: String,
    n_outputs: i64,
    index: i64,
    x: Tensor,
    dims: Dims,
    c: Tensor,
    t: i64,
) -> object:
    node = Node(op, "", attrs, inputs, Args.nil(), node_id, n_outputs)
    yield rule(
        eq(y).to(out(node, index)), foldable(y), static_args(inputs), name=unique("fold: static inputs -> constant")
    ).then(union(y).with_(Tensor.folded(node, index)))
    # CastLike reads its second input for its type only: with a static first input it is a constant.
    cast = plain(
        "Cast",
        computed("cast_to", Attrs.none(), Attrs.none(), args_of(Tensor.ints(dims_of(t)))),
        args_of(c),
        node_id,
    )
    yield rule(
        eq(y).to(result("CastLike", attrs, args_of(c, x), node_id)),
        foldable(y),
        static_value(c),
        has_type(x, t),
        name=unique("fold: CastLike(constant) -> constant"),
    ).then(union(y).with_(Tensor.folded(cast, 0)))
    shape = Node("Shape", "", attrs, args_of(x), Args.nil(), node_id, 1)
    yield rule(
        eq(y).to(out(shape, 0)), has_shape(x, dims), static_dims(dims), name=unique("fold: Shape -> constant")
    ).then(union(y).with_(Tensor.shape_of(dims, attrs)))


register_family(constant_folding, stage="simplify", order=10, targets=STANDARD)
