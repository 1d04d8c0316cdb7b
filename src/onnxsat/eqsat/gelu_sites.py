"""GELU written out elementwise (PyTorch's ``nn.GELU`` before opset 20, timm, Keras), found for the rules that
offer it as one op.

    x * 0.5 * (1 + Erf(x / sqrt(2)))        the product in any order and grouping, or x * (1/sqrt(2)) inside
    x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))     the tanh approximation (``gelu_new``), x^3 as
                                                                Pow(x, 3) or x * x * x

ONNX Runtime fuses this form into its com.microsoft Gelu itself, but only while the ``* 0.5`` is a node of
its own; weight folding moves that factor into the next layer's weights (a MatMul's or a 1x1 Conv's), after
which ORT runs the five ops unfused: ConvNeXt and PoolFormer came out 6-9% slower than they went in.
Matched here once, in Python (the grouping varies, and each form would be its own long rule body); the rule
families add Gelu (standard from opset 20) or com.microsoft Gelu as an equivalent term, and the extractor
takes it over both the written-out and the folded forms. x must be float32; the constants are read, so
the match is exact up to float32 rounding of sqrt(2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx

from onnxsat.eqsat.site_graph import Reader, SiteGraph, other_operand

if TYPE_CHECKING:  # facts.py calls this module while collecting its facts
    from onnxsat.eqsat.facts import GraphFacts

ROUNDING = 1e-6
"""Relative tolerance on sqrt(2) and 1/sqrt(2): exporters write them rounded to float32 (or from float64)."""


@dataclass(frozen=True)
class GeluSite:
    """``output`` equals Gelu(x): the exact erf form, or with ``tanh`` its tanh approximation."""

    output: str
    x: str
    position: int
    """Position of the node that writes ``output``: the fused node takes its id."""
    tanh: bool = False


def _scaled_input(g: SiteGraph, name: str) -> str | None:
    """x when ``name`` is x / sqrt(2) or x * (1/sqrt(2))."""
    divide = g.node(name, "Div")
    if divide is not None and g.is_value(divide.input[1], math.sqrt(2.0), ROUNDING):
        return divide.input[0]
    multiply = g.node(name, "Mul")
    if multiply is not None:
        for x, c in (multiply.input, reversed(multiply.input)):
            if g.is_value(c, math.sqrt(0.5), ROUNDING):
                return x
    return None


def _product_end(g: SiteGraph, one_plus: str, x: str) -> str | None:
    """The output of the Muls that multiply ``one_plus`` = 1 + erf(...) by x and by 0.5, in any grouping."""
    first = g.sole_reader(one_plus, "Mul")
    if first is None:
        return None
    partner = other_operand(first, one_plus)
    if partner == x:  # (x * a) * 0.5
        last = g.sole_reader(first.output[0], "Mul")
        return (
            last.output[0] if last is not None and g.is_value(other_operand(last, first.output[0]) or "", 0.5) else None
        )
    if partner is not None and g.is_value(partner, 0.5):  # (a * 0.5) * x
        last = g.sole_reader(first.output[0], "Mul")
        return last.output[0] if last is not None and other_operand(last, first.output[0]) == x else None
    half = g.node(partner or "", "Mul")  # a * (x * 0.5)
    if half is not None and other_operand(half, x) is not None and g.is_value(other_operand(half, x) or "", 0.5):
        return first.output[0]
    return None


TANH_SCALE = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _cubed(g: SiteGraph, name: str) -> str | None:
    """t when ``name`` is Pow(t, 3) or t * t * t (either grouping)."""
    power = g.node(name, "Pow")
    if power is not None:
        return power.input[0] if g.is_value(power.input[1], 3.0) else None
    product = g.node(name, "Mul")
    if product is None:
        return None
    for single, square in (product.input, reversed(product.input)):
        inner = g.node(square, "Mul")
        if inner is not None and inner.input[0] == inner.input[1] == single:
            return single
    return None


def _tanh_input(g: SiteGraph, name: str) -> str | None:
    """x when ``name`` is sqrt(2/pi) * (x + 0.044715 * x^3), each product in either order."""
    scaled = g.node(name, "Mul")
    if scaled is None:
        return None
    for c, inner in (scaled.input, reversed(scaled.input)):
        add = g.node(inner, "Add") if g.is_value(c, TANH_SCALE, ROUNDING) else None
        for x, term in (add.input, reversed(add.input)) if add is not None else ():
            cubic = g.node(term, "Mul")
            for k, cube in (cubic.input, reversed(cubic.input)) if cubic is not None else ():
                if g.is_value(k, CUBIC, ROUNDING) and _cubed(g, cube) == x:
                    return x
    return None


def gelu_sites(graph: onnx.GraphProto, facts: GraphFacts, read: Reader) -> list[GeluSite]:
    """Every written-out GELU of the main graph on float32 values, in graph order."""
    if not any(node.op_type in ("Erf", "Tanh") for node in graph.node):
        return []
    g = SiteGraph(graph, read)
    sites = []
    for node in graph.node:
        if node.op_type not in ("Erf", "Tanh") or node.domain not in ("", "ai.onnx") or len(node.input) != 1:
            continue
        tanh = node.op_type == "Tanh"
        x = _tanh_input(g, node.input[0]) if tanh else _scaled_input(g, node.input[0])
        if x is None or facts.types.get(x) != onnx.TensorProto.FLOAT:
            continue
        add = g.sole_reader(node.output[0], "Add")
        if add is None or not g.is_value(other_operand(add, node.output[0]) or "", 1.0):
            continue
        end = _product_end(g, add.output[0], x)
        if end is not None:
            sites.append(GeluSite(end, x, g.producer[end][0], tanh))
    return sites
