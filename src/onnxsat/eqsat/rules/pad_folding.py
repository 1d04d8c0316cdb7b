"""A Pad in front of a convolution or pool becomes part of the op's own padding.

    Conv(Pad(x, pads, 0), W, ...)                         ==>  Conv(x, W, ..., pads = own + spatial pads)
    AveragePool(Pad(x, pads, 0))                          ==>  AveragePool(x, pads = ..., count_include_pad=1)
    MaxPool(Pad(x, pads, -inf))                           ==>  MaxPool(x, pads = ...)

For Conv: only constant-mode pads with zero value, non-negative, and none on the batch or channel axes
(``spatial_pads``); the Conv's own padding must be explicit (not ``auto_pad``). Before opset 11 a Pad
holds its pads and value as attributes (``zero_attribute_pads`` checks them); old exports (tf2onnx at
opset 7-10, Keras' ZeroPadding2D in MobileNets) pad that way. Pools pad differently
(a MaxPool as if with -inf, an AveragePool may exclude padding from its divisor, ONNX Runtime refuses
pads as wide as the kernel, ceil mode sizes outputs differently): whether a Pad fits the pool after it
is decided in Python (``window_pads``) and asserted as ``PadIntoPool``. Saves one full copy of the
activation.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Tensor, args_of, pad_into_pool, sole_use
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, computed, result, unique, value_flag

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
    merged = computed("add_spatial_pads", attrs, Attrs.none(), args_of(pads))
    zero_pad_forms = (
        (eq(p).to(result("Pad", pad_attrs, args_of(x, pads), pad_id)),),
        (eq(p).to(result("Pad", pad_attrs, args_of(x, pads, Tensor.absent()), pad_id)),),
        (eq(p).to(result("Pad", pad_attrs, args_of(x, pads, value), pad_id)), value_flag(value, "zeros")),
    )
    for pad_form in zero_pad_forms:
        yield rule(
            eq(y).to(result("Conv", attrs, Args.cons(p, rest), node_id)),
            *pad_form,
            attr_flag(pad_attrs, "constant_mode"),
            value_flag(pads, "spatial_pads"),
            attr_flag(attrs, "explicit_padding"),
            sole_use(p),
            name=unique("Pad+Conv -> Conv"),
        ).then(union(y).with_(result("Conv", merged, Args.cons(x, rest), node_id)))
    yield rule(
        eq(y).to(result("Conv", attrs, Args.cons(p, rest), node_id)),
        eq(p).to(result("Pad", pad_attrs, args_of(x), pad_id)),
        attr_flag(pad_attrs, "zero_attribute_pads"),
        attr_flag(attrs, "explicit_padding"),
        sole_use(p),
        name=unique("Pad+Conv -> Conv"),
    ).then(
        union(y).with_(
            result("Conv", computed("add_spatial_pads", attrs, pad_attrs, Args.nil()), Args.cons(x, rest), node_id)
        )
    )


@pad_folding.register
def _pad_into_pools(
    y: Tensor,
    p: Tensor,
    x: Tensor,
    pads: Tensor,
    tail: Args,
    attrs: Attrs,
    pad_attrs: Attrs,
    node_id: String,
    pad_id: String,
) -> object:
    for op, kernel in (("AveragePool", "add_counted_pads"), ("MaxPool", "add_spatial_pads")):
        merged = computed(kernel, attrs, Attrs.none(), args_of(pads))
        yield rule(
            eq(y).to(result(op, attrs, args_of(p), node_id)),
            pad_into_pool(p),
            eq(p).to(result("Pad", pad_attrs, Args.cons(x, Args.cons(pads, tail)), pad_id)),
            name=unique(f"Pad+{op} -> {op}"),
        ).then(union(y).with_(result(op, merged, args_of(x), node_id)))
        yield rule(  # before opset 11: the pads are the Pad's attribute
            eq(y).to(result(op, attrs, args_of(p), node_id)),
            pad_into_pool(p),
            eq(p).to(result("Pad", pad_attrs, args_of(x), pad_id)),
            name=unique(f"Pad+{op} -> {op}"),
        ).then(union(y).with_(result(op, computed(kernel, attrs, pad_attrs, Args.nil()), args_of(x), node_id)))


register_family(pad_folding, stage="simplify", order=90, targets=STANDARD)
