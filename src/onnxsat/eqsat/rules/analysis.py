"""Facts derived inside the e-graph, run to saturation before every rewrite iteration."""

from __future__ import annotations

from egglog import Ruleset, String, StringLike, eq, i64, relation, rule, ruleset

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    out,
    static_args,
    static_dims,
    static_value,
)

analysis: Ruleset = ruleset(name="analysis")


@analysis.register
def _static_argument_lists(head: Tensor, tail: Args) -> object:
    """An argument list is static when every tensor in it is (Clip's bounds, for example)."""
    yield rule(Args.nil(), name="static: empty list").then(static_args(Args.nil()))
    yield rule(Args.cons(head, tail), static_value(head), static_args(tail), name="static: cons").then(
        static_args(Args.cons(head, tail))
    )


@analysis.register
def _static_tensors(
    name: String, t: Tensor, attrs: Attrs, captures: Args, node_id: String, args: Args, kernel: String
) -> object:
    """Constant initializers (the encoder writes only non-overridable ones inline), Constant outputs, and
    every constant a rule makes (folded weights, folded node outputs, known shapes)."""
    yield rule(Tensor.initializer(name), name="static: initializer").then(static_value(Tensor.initializer(name)))
    constant = Node("Constant", "", attrs, Args.nil(), captures, node_id, 1)
    yield rule(eq(t).to(out(constant, 0)), name="static: Constant").then(static_value(t))
    derived = Tensor.derived(kernel, args, attrs)
    yield rule(eq(t).to(derived), name="static: derived").then(static_value(t))


@analysis.register
def _static_made_constants(t: Tensor, node: Node, index: i64, dims: Dims, attrs: Attrs) -> object:
    yield rule(eq(t).to(Tensor.folded(node, index)), name="static: folded").then(static_value(t))
    yield rule(eq(t).to(Tensor.shape_of(dims, attrs)), name="static: shape").then(static_value(t))
    yield rule(eq(t).to(Tensor.ints(dims)), name="static: ints").then(static_value(t))


@analysis.register
def _static_shapes(dim: i64, tail: Dims) -> object:
    """A shape is static when every dimension is known (shape inference writes -1 for the others) and not
    zero, so it can be written as a Reshape target (where 0 would mean "copy the input's dimension")."""
    yield rule(Dims.nil(), name="static dims: empty").then(static_dims(Dims.nil()))
    yield rule(Dims.cons(dim, tail), dim >= 1, static_dims(tail), name="static dims: cons").then(
        static_dims(Dims.cons(dim, tail))
    )


# One-node relations the rewrite families join instead of node patterns (as ``layout_sinking`` joins its
# own). A body that names two nodes (a node and its producer) gave egglog's planner no small table to start
# from: it bound each node's variables from the whole Node table before any atom tied the two together.
# On MaxViT-T (2,500 nodes) and Swin-V2-T that cost 0.1-0.65 s per iteration per family with nothing to
# match: weight folding, consecutive ops, BatchNormalization folding, reassociation, Slice composition and
# MatMul+Add; with weight folding alone rewritten, MatMul+Add (``linear``), which joins the same two
# patterns, took over its time. Each relation holds one node's output and the inputs a rule reads, so
# every variable is bound from one already bound. They are derived here, before every iteration, so a
# node any rewrite makes is in them when the next iteration searches, as the node patterns saw it.
# Missing optional inputs are ``Tensor.absent()``; where a rewrite writes a node back with as many inputs
# as it had, the count is kept (``inputs``).

CHAIN_OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "LogSoftmax", "Concat")
"""The ops of ``NodeInput``: those a rule finds feeding another of a chain (``consecutive``)."""
CONSTANT_OPS = ("Mul", "Add", "Sub")
"""The ops of ``ConstantOperand``: a scale or a shift."""
WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
"""The ops of ``WeightedNode``: those that read a weight as their second input."""
OPERAND_OPS = ("Add", "MatMul")
"""The ops of ``Operands``: MatMul+Add, whatever the operands (``linear``)."""

node_input = relation("NodeInput", Tensor, String, Tensor, Args, Attrs, String)
"""(y, op, x, rest, attrs, id): ``y`` is the output of the plain node ``op(x, *rest)``, op in ``CHAIN_OPS``."""
second_input = relation("SecondInput", Tensor, String, Tensor, Tensor, Args, Attrs, String)
"""(y, op, h, z, rest, attrs, id): ``y`` is the output of the plain node ``op(h, z, *rest)`` (a Concat)."""
concat_parts = relation("ConcatParts", Tensor, Tensor, Tensor, Tensor, i64, Attrs, String)
"""(y, a, b, c, inputs, attrs, id): ``y`` is the output of ``Concat(a, b)`` (``c`` absent, inputs 2) or
``Concat(a, b, c)`` (inputs 3)."""
constant_operand = relation("ConstantOperand", Tensor, String, Tensor, Tensor, Attrs, String)
"""(y, op, z, c, attrs, id): ``y`` is the output of ``op(z, c)``, ``c`` static: Mul or Add in either operand
order, Sub with ``c`` second."""
weighted_node = relation("WeightedNode", Tensor, String, Tensor, Tensor, Tensor, i64, Attrs, String)
"""(y, op, x, w, b, inputs, attrs, id): ``y`` is the output of the plain node ``op(x, w)`` (``b`` absent,
inputs 2) or ``op(x, w, b)`` (inputs 3), op in ``WEIGHTED_OPS``, ``w`` static."""
operands = relation("Operands", Tensor, String, Tensor, Tensor, Attrs, String)
"""(y, op, a, b, attrs, id): ``y`` is the output of the plain node ``op(a, b)``, op in ``OPERAND_OPS``."""
slice_params = relation("SliceParams", Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Attrs, String)
"""(y, x, starts, ends, axes, steps, attrs, id): ``y`` is the output of the Slice (opset 10 on) of ``x``,
the axes and steps absent where the node has none (how the composing kernels read them)."""


def _plain(op: StringLike, attrs: Attrs, inputs: Args, node_id: String) -> Tensor:
    return out(Node(op, "", attrs, inputs, Args.nil(), node_id, 1), 0)


@analysis.register
def _node_relations(
    y: Tensor,
    x: Tensor,
    w: Tensor,
    b: Tensor,
    c: Tensor,
    rest: Args,
    attrs: Attrs,
    node_id: String,
) -> object:
    for op in CHAIN_OPS:
        yield rule(eq(y).to(_plain(op, attrs, Args.cons(x, rest), node_id)), name=f"node input: {op}").then(
            node_input(y, op, x, rest, attrs, node_id)
        )
    yield rule(
        eq(y).to(_plain("Concat", attrs, Args.cons(x, Args.cons(w, rest)), node_id)),
        name="second input: Concat",
    ).then(second_input(y, "Concat", x, w, rest, attrs, node_id))
    yield rule(eq(y).to(_plain("Concat", attrs, args_of(x, w), node_id)), name="Concat parts: 2").then(
        concat_parts(y, x, w, Tensor.absent(), 2, attrs, node_id)
    )
    yield rule(eq(y).to(_plain("Concat", attrs, args_of(x, w, c), node_id)), name="Concat parts: 3").then(
        concat_parts(y, x, w, c, 3, attrs, node_id)
    )
    for op in CONSTANT_OPS:
        orders = ((x, c), (c, x)) if op != "Sub" else ((x, c),)
        for first, second in orders:
            yield rule(
                eq(y).to(_plain(op, attrs, args_of(first, second), node_id)),
                static_value(c),
                name=f"constant operand: {op}{'' if first is x else ' (first)'}",
            ).then(constant_operand(y, op, x, c, attrs, node_id))
    for op in OPERAND_OPS:
        yield rule(eq(y).to(_plain(op, attrs, args_of(x, w), node_id)), name=f"operands: {op}").then(
            operands(y, op, x, w, attrs, node_id)
        )
    for op in WEIGHTED_OPS:
        yield rule(eq(y).to(_plain(op, attrs, args_of(x, w), node_id)), static_value(w), name=f"weighted: {op}").then(
            weighted_node(y, op, x, w, Tensor.absent(), 2, attrs, node_id)
        )
        yield rule(
            eq(y).to(_plain(op, attrs, args_of(x, w, b), node_id)), static_value(w), name=f"weighted: {op}(bias)"
        ).then(weighted_node(y, op, x, w, b, 3, attrs, node_id))


@analysis.register
def _slice_params(
    y: Tensor, x: Tensor, s: Tensor, e: Tensor, axes: Tensor, steps: Tensor, attrs: Attrs, node_id: String
) -> object:
    absent = Tensor.absent()
    for params in ((s, e), (s, e, axes), (s, e, axes, steps)):
        padded = params + (absent,) * (4 - len(params))
        yield rule(
            eq(y).to(_plain("Slice", attrs, args_of(x, *params), node_id)), name=f"Slice params: {len(params)}"
        ).then(slice_params(y, x, *padded, attrs, node_id))
