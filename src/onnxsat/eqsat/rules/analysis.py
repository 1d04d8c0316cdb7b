"""Facts derived inside the e-graph, run to saturation before every rewrite iteration."""

from __future__ import annotations

from egglog import rule, ruleset

from onnxsat.eqsat.language import Args, Tensor, static_args, static_value

analysis = ruleset(name="analysis")


@analysis.register
def _static_argument_lists(head: Tensor, tail: Args) -> object:
    """An argument list is static when every tensor in it is (Clip's bounds, for example)."""
    yield rule(Args.nil(), name="static: empty list").then(static_args(Args.nil()))
    yield rule(Args.cons(head, tail), static_value(head), static_args(tail), name="static: cons").then(
        static_args(Args.cons(head, tail))
    )
