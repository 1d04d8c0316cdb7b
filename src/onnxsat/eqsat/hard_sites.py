"""Hard sigmoid and hard swish written out elementwise (Paddle2ONNX's MobileNetV3 and PP-OCR exports, Keras,
PyTorch before opset 14), found for the rules that offer them as one op.

    relu6(x + 3) / 6          hard sigmoid: relu6 as Clip(., 0, 6), Min(Max(., 0), 6), Max(Min(., 6), 0) or
                              Min(Relu(.), 6); the 1/6 as Div by 6 or Mul by 1/6, either operand order
    x * relu6(x + 3) / 6      hard swish: the product in either grouping, (x * r) / 6 or x * (r / 6)
    x * HardSigmoid(x)        hard swish, with HardSigmoid's alpha 1/6 and beta 0.5 (PyTorch before opset 14)

``HardSigmoid(x; alpha=1/6, beta=0.5)`` is ``max(0, min(1, x / 6 + 0.5))``, the same function: each written-out
form is four passes over the activations where the op is one (two for the swish as ``x * HardSigmoid(x)``,
one as ``HardSwish``, from opset 14). ONNX Runtime fuses none of these forms: on PP-OCR's text-direction
classifier the four passes were a quarter of its run time. Matched here once, in Python (the clamp and the
grouping vary); the rule family adds the ops as equivalent terms and the extractor decides. x must be
float32; the constants are read, so the match is exact up to float32 rounding of 1/6.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx

from onnxsat.eqsat.site_graph import Reader, SiteGraph, other_operand

if TYPE_CHECKING:  # facts.py calls this module while collecting its facts
    from onnxsat.eqsat.facts import GraphFacts

ROUNDING = 1e-6
"""Relative tolerance on 1/6: exporters write it rounded to float32 (or from float64)."""
ALPHA, BETA = 1.0 / 6.0, 0.5
"""HardSigmoid's attributes that make it relu6(x + 3) / 6."""


@dataclass(frozen=True)
class HardSite:
    """``output`` equals HardSigmoid(x; 1/6, 0.5), or with ``swish`` x times that (HardSwish(x))."""

    output: str
    x: str
    position: int
    """Position of the node that writes ``output``: the fused node takes its id."""
    swish: bool = False


def _binary(node: onnx.NodeProto | None) -> bool:
    return node is not None and len(node.input) == 2


def _bounds(g: SiteGraph, clip: onnx.NodeProto) -> tuple[float, float] | None:
    """A Clip's bounds: its min and max inputs (opset 11 on) or attributes (before), None when unread."""
    attrs = {a.name: a.f for a in clip.attribute}
    if "min" in attrs or "max" in attrs or len(clip.input) == 1:
        return attrs.get("min", float("-inf")), attrs.get("max", float("inf"))
    values = []
    for name, missing in zip([*clip.input[1:3], "", ""][:2], (float("-inf"), float("inf")), strict=True):
        value = g.single(name) if name else None
        if name and (value is None or value.dtype.kind != "f"):
            return None
        values.append(float(value.reshape(-1)[0]) if value is not None else missing)
    return values[0], values[1]


def _plus_three(g: SiteGraph, name: str) -> str | None:
    """x when ``name`` is x + 3 (either operand order)."""
    add = g.node(name, "Add")
    if add is None:
        return None
    for x, c in (add.input, reversed(add.input)):
        if g.is_value(c, 3.0):
            return x
    return None


def _relu6_input(g: SiteGraph, name: str) -> str | None:
    """a when ``name`` is relu6(a): Clip(a, 0, 6), Min(Max(a, 0), 6), Max(Min(a, 6), 0) or Min(Relu(a), 6)."""
    clip = g.node(name, "Clip")
    if clip is not None:
        return clip.input[0] if _bounds(g, clip) == (0.0, 6.0) else None
    for outer_op, inner_op, outer_bound, inner_bound in (("Min", "Max", 6.0, 0.0), ("Max", "Min", 0.0, 6.0)):
        outer = g.node(name, outer_op)  # Min and Max take any number of inputs: two here
        for inner_name, bound in (outer.input, reversed(outer.input)) if _binary(outer) else ():
            if not g.is_value(bound, outer_bound):
                continue
            relu = g.node(inner_name, "Relu") if outer_op == "Min" else None
            if relu is not None:
                return relu.input[0]
            inner = g.node(inner_name, inner_op)
            for a, c in (inner.input, reversed(inner.input)) if _binary(inner) else ():
                if g.is_value(c, inner_bound):
                    return a
    return None


def _sixth(g: SiteGraph, name: str) -> onnx.NodeProto | None:
    """The one node dividing ``name`` by 6 or multiplying it by 1/6, or None."""
    readers = g.readers.get(name, [])
    node = readers[0] if len(readers) == 1 else None
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Div" and node.input[0] == name and g.is_value(node.input[1], 6.0):
        return node
    if node.op_type == "Mul" and g.is_value(other_operand(node, name) or "", ALPHA, ROUNDING):
        return node
    return None


def _float32(facts: GraphFacts, name: str) -> bool:
    return facts.types.get(name) == onnx.TensorProto.FLOAT


def hard_sites(graph: onnx.GraphProto, facts: GraphFacts, read: Reader) -> list[HardSite]:
    """Every written-out hard sigmoid and hard swish of the main graph on float32 values, in graph order."""
    if not any(node.op_type in ("Clip", "Min", "Max", "HardSigmoid") for node in graph.node):
        return []
    g = SiteGraph(graph, read)
    sites = []
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or not node.output or not node.output[0]:
            continue
        r = node.output[0]
        if node.op_type == "HardSigmoid":
            attrs = {a.name: a.f for a in node.attribute}
            matches = abs(attrs.get("alpha", 0.2) - ALPHA) <= ROUNDING * ALPHA and attrs.get("beta", 0.5) == BETA
            x = node.input[0] if matches else None
            gate = r
        elif node.op_type in ("Clip", "Min", "Max"):
            x = _plus_three(g, _relu6_input(g, r) or "")
            sixth = _sixth(g, r) if x is not None else None
            gate = sixth.output[0] if sixth is not None else None
            if gate is not None and x is not None and _float32(facts, x):  # relu6(x + 3) / 6
                sites.append(HardSite(gate, x, g.producer[gate][0]))
        else:
            continue
        if x is None or not _float32(facts, x):
            continue
        swish = g.sole_reader(gate, "Mul") if gate is not None else None
        if swish is not None and other_operand(swish, gate) == x:  # x * (relu6(x + 3) / 6), x * HardSigmoid(x)
            sites.append(HardSite(swish.output[0], x, g.producer[swish.output[0]][0], swish=True))
        product = g.sole_reader(r, "Mul") if node.op_type != "HardSigmoid" else None
        if product is not None and other_operand(product, r) == x:  # (x * relu6(x + 3)) / 6
            end = _sixth(g, product.output[0])
            if end is not None:
                sites.append(HardSite(end.output[0], x, g.producer[end.output[0]][0], swish=True))
    return sorted(sites, key=lambda site: site.position)
