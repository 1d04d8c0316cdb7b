"""Ops written out elementwise offered as the one standard op that computes them.

    LayerNormSite(y, [x, g(, b)], {epsilon}, id)   ==>   y = LayerNormalization(x, g(, b), epsilon)   (opset 17+)
    GeluSite(y, x, tanh, id)                       ==>   y = Gelu(x[, approximate="tanh"])            (opset 20+)

The sites are found in Python when the graph is encoded (``layer_norm_sites`` and ``gelu_sites``: the forms
matched and the conditions under which the op computes the same values are in their docstrings); the rules
only add the op as an equivalent term, and the extractor decides. Flax (jax2onnx) writes the variance by
moments, which ONNX Runtime does not fuse: the op replaces about twelve passes over the activations (1.29x
on a small jax2onnx ViT). Before opset 20 the ``ort`` target offers com.microsoft Gelu instead
(``activation_fusion``).
"""

from __future__ import annotations

from egglog import Ruleset, String, ne, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Tensor, args_of, gelu_site, layer_norm_site, opset_at_least
from onnxsat.eqsat.rules.families import STANDARD, ModelOutline, register_family
from onnxsat.eqsat.rules.patterns import computed, result, unique

composite_forms: Ruleset = ruleset(name="composite_forms")


@composite_forms.register
def _layer_norm(y: Tensor, inputs: Args, attrs: Attrs, node_id: String) -> object:
    yield rule(
        layer_norm_site(y, inputs, attrs, node_id),
        ne(node_id).to(String("")),
        name=unique("elementwise layer norm -> LayerNormalization"),
    ).then(union(y).with_(result("LayerNormalization", attrs, inputs, node_id)))


@composite_forms.register
def _gelu(y: Tensor, x: Tensor, node_id: String) -> object:
    tanh = computed("tanh_approximation", Attrs.none(), Attrs.none(), Args.nil())
    for flag, attrs in ((0, Attrs.none()), (1, tanh)):
        yield rule(
            gelu_site(y, x, flag, node_id),
            ne(node_id).to(String("")),
            opset_at_least(20),
            name=unique("elementwise GELU -> Gelu"),
        ).then(union(y).with_(result("Gelu", attrs, args_of(x), node_id)))


def _has_composites(outline: ModelOutline) -> bool:
    return bool({"ReduceMean", "Erf", "Tanh"} & outline.op_types)


register_family(composite_forms, stage="simplify", order=127, targets=STANDARD, applies=_has_composites)
