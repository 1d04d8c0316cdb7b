"""A zero Pad in front of a convolution becomes part of the convolution's own padding.

    Conv(Pad(x, pads, 0), W, ...)                         ==>  Conv(x, W, ..., pads = own + spatial pads)

Only constant-mode pads with zero value, non-negative, and none on the batch or channel axes
(``spatial_pads``); the Conv's own padding must be explicit (not ``auto_pad``). Pools are left alone:
a MaxPool pads with -inf, an AveragePool may exclude padding from its divisor, and even one that counts
it computes other output sizes in ceil mode and refuses pads wider than its kernel in ONNX Runtime
(both found by the rule tests). Saves one full copy of the activation.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Tensor, args_of, attr_flag, sole_use, value_flag
from onnxsat.eqsat.rules.patterns import result, unique

pad_folding: Ruleset = ruleset(name="pad_folding")


@pad_folding.register
def _pad_into_window_ops(
    y: Tensor,
    p: Tensor,
    x: Tensor,
    pads: Tensor,
    value: Tensor,
    rest: Args,
    attrs: Attrs,
    pad_attrs: Attrs,
    node_id: String,
    pad_id: String,
) -> object:
    merged = Attrs.computed("add_spatial_pads", attrs, Attrs.none(), args_of(pads))
    zero_pad_forms = (
        (eq(p).to(result("Pad", pad_attrs, args_of(x, pads), pad_id)),),
        (eq(p).to(result("Pad", pad_attrs, args_of(x, pads, Tensor.absent()), pad_id)),),
        (eq(p).to(result("Pad", pad_attrs, args_of(x, pads, value), pad_id)), value_flag(value, "zeros")),
    )
    for op, flags in (("Conv", ("explicit_padding",)),):
        for pad_form in zero_pad_forms:
            yield rule(
                eq(y).to(result(op, attrs, Args.cons(p, rest), node_id)),
                *pad_form,
                attr_flag(pad_attrs, "constant_mode"),
                value_flag(pads, "spatial_pads"),
                *(attr_flag(attrs, flag) for flag in flags),
                sole_use(p),
                name=unique(f"Pad+{op} -> {op}"),
            ).then(union(y).with_(result(op, merged, Args.cons(x, rest), node_id)))
