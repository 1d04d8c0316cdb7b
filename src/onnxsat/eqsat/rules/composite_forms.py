"""Ops written out elementwise offered as the one standard op that computes them.

    LayerNormSite(y, [x, g(, b)], {epsilon}, id)   ==>   y = LayerNormalization(x, g(, b), epsilon)   (opset 17+)
    GeluSite(y, x, tanh, id)                       ==>   y = Gelu(x[, approximate="tanh"])            (opset 20+)
    HardSite(y, x, 0, id)                          ==>   y = HardSigmoid(x, alpha=1/6, beta=0.5)
    HardSite(y, x, 1, id)                          ==>   y = x * HardSigmoid(x, 1/6, 0.5);  y = HardSwish(x) (14+)

The sites are found in Python when the graph is encoded (``layer_norm_sites``, ``gelu_sites``, ``hard_sites``: the forms
matched and the conditions under which the op computes the same values are in their docstrings); the rules
only add the op as an equivalent term, and the extractor decides. Flax (jax2onnx) writes the variance by
moments, which ONNX Runtime does not fuse: the op replaces about twelve passes over the activations (1.29x
on a small jax2onnx ViT). Before opset 20 the ``ort`` target offers com.microsoft Gelu instead
(``activation_fusion``). Paddle2ONNX writes hard swish as four ops (an Add, a Clip, a Mul and a Div): the
two ops (x * HardSigmoid(x)) made PP-OCR's text-direction classifier 1.31-1.37x faster, its recognizer 1.04-1.09x.
"""

from __future__ import annotations

import onnx
from egglog import Ruleset, String, ne, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Tensor,
    args_of,
    gelu_site,
    hard_site,
    has_shape,
    has_type,
    layer_norm_site,
    opset_at_least,
)
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


@composite_forms.register
def _hard(y: Tensor, x: Tensor, node_id: String, dims: Dims) -> object:
    sixth = computed("hard_sigmoid_sixth", Attrs.none(), Attrs.none(), Args.nil())
    gate = result("HardSigmoid", sixth, args_of(x), node_id)
    site = (ne(node_id).to(String("")), has_shape(x, dims))  # the gate is costed at x's size, not an unknown one
    yield rule(hard_site(y, x, 0, node_id), *site, name=unique("elementwise hard sigmoid -> HardSigmoid")).then(
        union(y).with_(gate)
    )
    yield rule(hard_site(y, x, 1, node_id), *site, name=unique("elementwise hard swish -> x * HardSigmoid")).then(
        union(y).with_(result("Mul", Attrs.none(), args_of(x, gate), node_id)),
        has_shape(gate, dims),
        has_type(gate, onnx.TensorProto.FLOAT),
    )
    yield rule(
        hard_site(y, x, 1, node_id), *site, opset_at_least(14), name=unique("elementwise hard swish -> HardSwish")
    ).then(union(y).with_(result("HardSwish", Attrs.none(), args_of(x), node_id)))


def _has_composites(outline: ModelOutline) -> bool:
    return bool({"ReduceMean", "Erf", "Tanh", "Clip", "Min", "HardSigmoid"} & outline.op_types)


register_family(composite_forms, stage="simplify", order=127, targets=STANDARD, applies=_has_composites)
