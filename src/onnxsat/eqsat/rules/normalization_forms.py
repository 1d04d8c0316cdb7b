"""Layer normalizations written out elementwise offered as one LayerNormalization (standard from opset 17).

    LayerNormSite(y, [x, g(, b)], {epsilon}, id)   ==>   y = LayerNormalization(x, g(, b), epsilon)

The sites are found in Python when the graph is encoded (``layer_norm_sites``: the forms matched and
the conditions under which the op computes the same values are in its docstring); this rule only adds
the fused node as an equivalent term, and the extractor decides. Flax (jax2onnx) writes the variance by
moments, which ONNX Runtime does not fuse: the op replaces about twelve passes over the activations
(1.29x on a small jax2onnx ViT).
"""

from __future__ import annotations

from egglog import Ruleset, String, ne, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Tensor, layer_norm_site
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import result, unique

normalization_forms: Ruleset = ruleset(name="normalization_forms")


@normalization_forms.register
def _layer_norm(y: Tensor, inputs: Args, attrs: Attrs, node_id: String) -> object:
    yield rule(
        layer_norm_site(y, inputs, attrs, node_id),
        ne(node_id).to(String("")),
        name=unique("elementwise layer norm -> LayerNormalization"),
    ).then(union(y).with_(result("LayerNormalization", attrs, inputs, node_id)))


register_family(normalization_forms, stage="simplify", order=127, targets=STANDARD, requires_op="ReduceMean")
