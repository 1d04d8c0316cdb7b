"""Facts derived inside the e-graph, run to saturation before every rewrite iteration."""

from __future__ import annotations

from egglog import String, eq, rule, ruleset

from onnxsat.eqsat.language import Args, Attrs, Node, Tensor, out, static_args, static_value

analysis = ruleset(name="analysis")


@analysis.register
def _static_argument_lists(head: Tensor, tail: Args) -> object:
    """An argument list is static when every tensor in it is (Clip's bounds, for example)."""
    yield rule(Args.nil(), name="static: empty list").then(static_args(Args.nil()))
    yield rule(Args.cons(head, tail), static_value(head), static_args(tail), name="static: cons").then(
        static_args(Args.cons(head, tail))
    )


@analysis.register
def _static_tensors(name: String, t: Tensor, attrs: Attrs, captures: Args, node_id: String) -> object:
    """Constant initializers (the encoder writes only non-overridable ones inline) and Constant outputs."""
    yield rule(Tensor.initializer(name), name="static: initializer").then(static_value(Tensor.initializer(name)))
    constant = Node("Constant", "", attrs, Args.nil(), captures, node_id, 1)
    yield rule(eq(t).to(out(constant, 0)), name="static: Constant").then(static_value(t))
