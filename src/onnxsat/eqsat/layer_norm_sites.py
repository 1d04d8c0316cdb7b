"""Layer normalizations written out elementwise, found for the ``composite_forms`` rule family.

Exporters that have no LayerNormalization op, or do not use it, write one as about a dozen nodes:

    mu  = ReduceMean(x)                          over x's last axis, kept
    c   = x - mu
    var = ReduceMean(c * c)   or  ReduceMean(Pow(c, 2))                    (the definition)
        | Max(ReduceMean(x * x) - mu * mu, 0)   (Max or Relu optional)    (by moments: Flax, jax2onnx)
    y   = c / Sqrt(var + eps) * g [+ b]

ONNX Runtime fuses only the definition's form with ``Pow`` itself. Matched here once, in Python, on the
original graph (as one egglog rule the body joins a dozen node patterns, and took over a minute to plan);
the rule family adds ``LayerNormalization(x, g, b, epsilon)`` as an equivalent term and the extractor decides.

What must hold for LayerNormalization (axis -1) to compute the same values: both means run over x's last
axis alone with ``keepdims``; eps is one static value; g and b (if any) have shape ``[D]``, D the size of
that axis, as ONNX Runtime's kernel requires; x is float32; the model imports opset 17 or later. The variance
by moments equals the definition's in exact arithmetic; the Max only removes rounding below zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from onnxsat.eqsat.site_graph import Reader, SiteGraph

if TYPE_CHECKING:  # facts.py calls this module while collecting its facts
    from onnxsat.eqsat.facts import GraphFacts

NUMBERS = "biuf"
"""A Max's zero and a Pow's exponent may be constants of any number type (Pow's exponent an integer)."""
LAYER_NORM_MIN_OPSET = 17
"""LayerNormalization is standard ONNX from opset 17."""


@dataclass(frozen=True)
class LayerNormSite:
    """``output`` equals LayerNormalization(x, scale, bias, axis=-1, epsilon)."""

    output: str
    x: str
    scale: str
    bias: str
    """"" when the normalized values are only scaled."""
    epsilon: float
    position: int
    """Position of the node that writes ``output``: the fused node takes its id."""


class _Graph(SiteGraph):
    """The shared lookups, and the means, squares and deviations a layer norm is written with."""

    def __init__(self, graph: onnx.GraphProto, facts: GraphFacts, read: Reader, opset: int) -> None:
        super().__init__(graph, read)
        self.facts, self.opset = facts, opset

    def last_axis_mean(self, name: str) -> tuple[str, int] | None:
        """(x, D) when ``name`` is a ReduceMean of x over its last axis alone, of known size D, kept."""
        node = self.node(name, "ReduceMean")
        if node is None or not node.input:
            return None
        dims = self.facts.shapes.get(node.input[0])
        attrs = {a.name: a for a in node.attribute}
        if not dims or dims[-1] < 1 or ("keepdims" in attrs and attrs["keepdims"].i != 1):
            return None
        if self.opset >= 18:
            given = self.read(node.input[1]) if len(node.input) > 1 and node.input[1] else None
            axes = None if given is None else [int(a) for a in np.asarray(given).reshape(-1)]
        else:
            axes = [int(a) for a in attrs["axes"].ints] if "axes" in attrs else None
        if axes is None or len(axes) != 1 or not -len(dims) <= axes[0] < len(dims):
            return None
        return (node.input[0], dims[-1]) if axes[0] % len(dims) == len(dims) - 1 else None

    def square_of(self, name: str) -> str | None:
        """t when ``name`` is t * t or Pow(t, 2)."""
        node = self.node(name, "Mul", "Pow")
        if node is None or len(node.input) != 2:
            return None
        if node.op_type == "Mul":
            return node.input[0] if node.input[0] == node.input[1] else None
        return node.input[0] if self.is_value(node.input[1], 2.0, kinds=NUMBERS) else None

    def centered(self, name: str) -> tuple[str, str, int] | None:
        """(x, mu, D) when ``name`` is x - mu, mu x's mean over its last axis."""
        node = self.node(name, "Sub")
        if node is None or len(node.input) != 2:
            return None
        mean = self.last_axis_mean(node.input[1])
        if mean is None or mean[0] != node.input[0]:
            return None
        return node.input[0], node.input[1], mean[1]


def _operands(node: onnx.NodeProto) -> list[tuple[str, str]]:
    return [(node.input[0], node.input[1]), (node.input[1], node.input[0])] if len(node.input) == 2 else []


def _variance_of(g: _Graph, var: str, x: str, mu: str) -> bool:
    """``var`` is x's variance over its last axis, by the definition or by moments (see the module docstring)."""
    if g.node(var, "Relu") is not None:
        var = g.producer[var][1].input[0]
    clamp = g.node(var, "Max")
    if clamp is not None:
        kept = [a for a, zero in _operands(clamp) if g.is_value(zero, 0.0, kinds=NUMBERS)]
        if not kept:
            return False
        var = kept[0]
    mean = g.last_axis_mean(var)
    if mean is not None:  # the definition: mean of (x - mu)^2
        square = g.square_of(g.producer[var][1].input[0])
        centered = g.centered(square) if square is not None else None
        return centered is not None and centered[:2] == (x, mu)
    moments = g.node(var, "Sub")
    if moments is None or len(moments.input) != 2:
        return False
    second = g.last_axis_mean(moments.input[0])
    if second is None or g.square_of(g.producer[moments.input[0]][1].input[0]) != x:
        return False
    return g.square_of(moments.input[1]) == mu


def _match(g: _Graph, divide: onnx.NodeProto) -> LayerNormSite | None:
    centered = g.centered(divide.input[0])
    sqrt = g.node(divide.input[1], "Sqrt")
    if centered is None or sqrt is None:
        return None
    x, mu, size = centered
    if g.facts.types.get(x) != onnx.TensorProto.FLOAT:
        return None
    shifted = g.node(sqrt.input[0], "Add")
    found = [(v, e) for v, e in _operands(shifted) if g.single(e) is not None] if shifted is not None else []
    if not found or not _variance_of(g, found[0][0], x, mu):
        return None
    epsilon = float(np.asarray(g.single(found[0][1])).reshape(-1)[0])

    def following(name: str, op_type: str) -> tuple[onnx.NodeProto, str] | None:
        """The one reader of ``name``, if it is ``op_type`` with a ``[D]`` other operand."""
        nodes = g.readers.get(name, [])
        if len(nodes) != 1 or nodes[0].op_type != op_type or nodes[0].domain not in ("", "ai.onnx"):
            return None
        for own, other in _operands(nodes[0]):
            if own == name and g.facts.shapes.get(other) == (size,):
                return nodes[0], other
        return None

    scaled = following(divide.output[0], "Mul")
    if scaled is None:
        return None
    shifted_out = following(scaled[0].output[0], "Add")
    last, bias = shifted_out if shifted_out is not None else (scaled[0], "")
    if g.facts.shapes.get(last.output[0]) != g.facts.shapes.get(x):
        return None
    return LayerNormSite(last.output[0], x, scaled[1], bias, epsilon, g.producer[last.output[0]][0])


def layer_norm_sites(graph: onnx.GraphProto, facts: GraphFacts, read: Reader, opset: int) -> list[LayerNormSite]:
    """Every written-out layer normalization of the main graph that LayerNormalization computes, in graph order."""
    if opset < LAYER_NORM_MIN_OPSET or not any(node.op_type == "ReduceMean" for node in graph.node):
        return []
    g = _Graph(graph, facts, read, opset)
    sites = []
    for node in graph.node:
        if node.op_type == "Div" and node.domain in ("", "ai.onnx") and len(node.input) == 2:
            site = _match(g, node)
            if site is not None:
                sites.append(site)
    return sites
