"""Facts derived inside the e-graph, run to saturation before every rewrite iteration."""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, rule, ruleset

from onnxsat.eqsat.language import Args, Attrs, Dims, Node, Tensor, out, static_args, static_dims, static_value

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
