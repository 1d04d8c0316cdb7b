"""Alternatives that ONNX Runtime's own graph optimizer leaves alone (``--target ort``).

    LayerNormalization(Add(a, b), gamma, beta)  ==>  LayerNormalization(Sum(a, b), gamma, beta)

ORT fuses a residual Add feeding LayerNormalization into ``com.microsoft::SkipLayerNormalization`` when
it loads a model. On some machines that fused kernel is several times slower than the two ops it
replaces (614 µs against 104 µs for Add + LayerNormalization, measured on BERT-base). ``Sum`` of two inputs computes
the same values, and ORT's fusion does not match it, so this rule only offers the choice; the
extractor takes it when the cost model prices the fused kernel above Add + LayerNormalization
(``extract.py``, ORT fusion look-ahead).
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Tensor, args_of, sole_use
from onnxsat.eqsat.rules.families import ORT_ONLY, register_family
from onnxsat.eqsat.rules.patterns import result, unique

ort_guards: Ruleset = ruleset(name="ort_guards")


@ort_guards.register
def _residual_add_as_sum(
    y: Tensor,
    s: Tensor,
    a: Tensor,
    b: Tensor,
    rest: Args,
    ln_attrs: Attrs,
    add_attrs: Attrs,
    ln_id: String,
    add_id: String,
) -> object:
    yield rule(
        eq(y).to(result("LayerNormalization", ln_attrs, Args.cons(s, rest), ln_id)),
        eq(s).to(result("Add", add_attrs, args_of(a, b), add_id)),
        sole_use(s),
        name=unique("Add+LayerNormalization -> Sum+LayerNormalization"),
    ).then(union(s).with_(result("Sum", Attrs.none(), args_of(a, b), add_id)))


register_family(ort_guards, stage="simplify", order=140, targets=ORT_ONLY)
