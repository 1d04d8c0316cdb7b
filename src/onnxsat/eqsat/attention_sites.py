"""Scaled dot-product attention found in a graph's export forms, for the ``attention`` rule family.

The pattern spans about fifteen nodes (heads split by Reshape and Transpose, K transposed through a
Reshape/Transpose/Reshape chain, the scale as one Mul or Div or as a square root on both Q and K, an
optional additive mask, Softmax, an optional NaN guard, the product with V and the heads merged again).
As one egglog rule body it would join a dozen Node patterns, and egglog's join planner is sensitive to
bodies that size (see ``language.py``). It is matched here once, in Python, on the original graph, with
the shapes shape inference gave; the rule family then adds the fused node as an equivalent term from
the short ``AttentionSite`` relation, and the extractor decides whether it is taken.

What must hold for the fused form to compute the same values:
  * Q, K, V are [B, S, N*D] tensors whose heads are split by a Reshape to [B, S, N, D] and a Transpose
    [0, 2, 1, 3], or reach the products as [B, N, S, D] by other means (rotary embeddings applied after
    the split, a grouped K/V head repeated N times): the fused op then reads K and V in that layout and Q
    transposed and reshaped back; the result's heads are merged by the inverse Transpose and a Reshape;
  * K reaches the product transposed on its last two axes (directly or through the exporter's
    Reshape [B*N, T, D] / Transpose [0, 2, 1] / Reshape [B, N, D, T] chain);
  * the scale is a product of constant scalars (Mul) and reciprocals (Div) on Q, K or the scores;
  * the mask, if any, is added to the scores and has shape [1 or B, 1 or N, S, T] (the op's
    ``attention_bias``);
  * Softmax runs over the last axis, and everything is float32.
The NaN guard after Softmax (``Where(IsNaN(p), 0, p)``) is dropped only when the mask is known to be
finite (absent, a ``Where`` of two finite constants as exporters write it, or a finite constant): Softmax
then gives NaN only for a NaN or infinite score, which finite inputs do not produce. A mask that may hold
-inf could mask a whole row, which the guard turns into zeros and the fused op would not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from onnxsat.eqsat.site_graph import Reader, SiteGraph

if TYPE_CHECKING:  # facts.py calls this module while collecting its facts
    from onnxsat.eqsat.facts import GraphFacts


@dataclass(frozen=True)
class AttentionSite:
    """One attention found: ``output`` equals MultiHeadAttention(query, key, value, bias) [reshaped]."""

    output: str
    """The tensor the fused form stands for: the output of the Reshape that merges the heads."""
    query: str
    key: str
    value: str
    bias: str
    """The additive mask (``attention_bias``), or "" when the scores are not masked."""
    num_heads: int
    scale: float
    fused_shape: tuple[int, ...]
    """[B, S, N*Dv]: the fused node's output shape."""
    output_shape: tuple[int, ...]
    """The merged output's shape: a Reshape follows the fused node where it differs (GPT-2 flattens to 2-D)."""
    softmax: int
    """Position of the Softmax node: the fused node takes its place and name."""
    reshape: int
    """Position of the merging Reshape node."""
    query_merge: bool = False
    """``query`` is [B, N, S, D] (rotary embeddings applied after the head split): the fused node reads it
    transposed to [B, S, N, D] and reshaped to [B, S, N*D]."""
    kv_heads: bool = False
    """``key`` and ``value`` are [B, N, T, D], the layout the fused op also takes, not [B, T, N*D]."""
    key_regroup: tuple[int, ...] = ()
    """The [B, N, T, D] shape ``key`` is reshaped to when it holds those values in another shape (the
    exporter's expanded [B, Nkv, N/Nkv, T, D] key of grouped-query attention); () when it has it."""
    transpose: int = -1
    """Position of the Transpose that merges the heads: a Transpose the fused form adds takes its id."""
    projections: tuple[str, ...] = ()
    """(x, Wq, Wk, Wv, bq, bk, bv) when Q, K and V are ``x @ W + b`` of one [B, S, K] input with constant
    weights of one width: then com.microsoft Attention, which projects x itself, can stand for it too."""
    bias_expand: tuple[int, ...] = ()
    """The [1 or B, 1 or N, S, T] shape ``bias`` is expanded to when it broadcasts over the query positions
    ([.., .., 1, T]: a padding mask, as PyTorch's TorchScript export of SDPA adds it); () when it has it."""


class _Graph(SiteGraph):
    """The shared lookups, and the attributes, static shapes and scalars the matcher reads."""

    def __init__(self, graph: onnx.GraphProto, facts: GraphFacts, read: Reader, constants: set[str]) -> None:
        super().__init__(graph, read)
        self.facts = facts
        self.constants = constants

    def shape(self, name: str) -> tuple[int, ...] | None:
        dims = self.facts.shapes.get(name)
        return None if dims is None or any(d <= 0 for d in dims) else dims

    def perm(self, node: onnx.NodeProto) -> list[int] | None:
        for attr in node.attribute:
            if attr.name == "perm":
                return list(attr.ints)
        return None

    def scalar(self, name: str) -> float | None:
        value = self.read(name)
        if value is None or value.size != 1 or value.dtype != np.float32:
            return None
        return float(value.reshape(()))


def _scaled(g: _Graph, name: str) -> tuple[str, float]:
    """Strip constant scalar Muls and Divs off ``name``: the tensor under them and the factor they apply."""
    factor = 1.0
    while True:
        mul, div = g.node(name, "Mul"), g.node(name, "Div")
        if mul is not None and len(mul.input) == 2:
            a, b = mul.input
            if (c := g.scalar(b)) is not None:
                name, factor = a, factor * c
                continue
            if (c := g.scalar(a)) is not None:
                name, factor = b, factor * c
                continue
        if div is not None and len(div.input) == 2 and (c := g.scalar(div.input[1])) is not None and c != 0:
            name, factor = div.input[0], factor / c
            continue
        return name, factor


def _split_under(g: _Graph, name: str, perm: list[int]) -> onnx.NodeProto | None:
    """The Reshape that splits heads under ``name``, a Transpose of ``perm``, or None."""
    transpose = g.node(name, "Transpose")
    if transpose is None or g.perm(transpose) != perm:
        return None
    return g.node(transpose.input[0], "Reshape")


def _heads_of(g: _Graph, name: str) -> str | None:
    """The [B, S, N*D] tensor that ``name`` ([B, N, S, D]) splits into heads, or None."""
    reshape = _split_under(g, name, [0, 2, 1, 3])
    if reshape is None:
        return None
    source, split = g.shape(reshape.input[0]), g.shape(reshape.output[0])
    if source is None or split is None or len(source) != 3 or len(split) != 4:
        return None
    if source[:2] != split[:2] or source[2] != split[2] * split[3]:
        return None
    return reshape.input[0]


def _untransposed_key(g: _Graph, name: str) -> str | None:
    """The key whose last two axes ``name`` ([B, N, D, T]) swaps: [B, N, T, D], or for the exporter's chain
    any tensor its first Reshape reads (the same values in row-major order), or None."""
    transpose = g.node(name, "Transpose")
    if transpose is not None and g.perm(transpose) == [0, 1, 3, 2]:
        return transpose.input[0]
    outer = g.node(name, "Reshape")
    if outer is None:
        return None
    middle = g.node(outer.input[0], "Transpose")
    if middle is None or g.perm(middle) != [0, 2, 1]:
        return None
    inner = g.node(middle.input[0], "Reshape")
    if inner is None:
        return None
    flat, swapped = g.shape(inner.output[0]), g.shape(name)
    if flat is None or swapped is None or len(swapped) != 4:
        return None
    b, n, d, t = swapped
    return inner.input[0] if flat == (b * n, t, d) else None


def _heads_transposed_of(g: _Graph, name: str, heads: tuple[int, int, int, int]) -> str | None:
    """The [B, T, N*D] tensor whose heads ``name`` holds as [B, N, D, T] in one Transpose (perm [0, 2, 3, 1] of
    its Reshape to [B, T, N, D]: PyTorch's TorchScript export of scaled_dot_product_attention), or None."""
    reshape = _split_under(g, name, [0, 2, 3, 1])
    if reshape is None:
        return None
    b, n, t, d = heads
    source, split = g.shape(reshape.input[0]), g.shape(reshape.output[0])
    return reshape.input[0] if source == (b, t, n * d) and split == (b, t, n, d) else None


def _is_attention_bias(mask: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """The mask has the shape the fused op's ``attention_bias`` takes, [1 or B, 1 or N, S, T], or is one
    expanded to it (1 for S)."""
    return (
        len(mask) == 4
        and mask[0] in (1, scores[0])
        and mask[1] in (1, scores[1])
        and mask[2] in (1, scores[2])
        and mask[3] == scores[3]
    )


def _match(g: _Graph, position: int, softmax: onnx.NodeProto) -> AttentionSite | None:
    """The attention around ``softmax``, or None when any condition of the module docstring fails."""
    scores_shape = g.shape(softmax.input[0])
    if scores_shape is None or len(scores_shape) != 4:
        return None
    axis = next((a.i for a in softmax.attribute if a.name == "axis"), -1)
    if axis not in (-1, 3):
        return None
    b, n, s, t = scores_shape
    scores, bias = softmax.input[0], ""
    add = g.node(scores, "Add")
    if add is not None and len(add.input) == 2:
        for product, mask in (tuple(add.input), tuple(reversed(add.input))):
            mask_shape = g.shape(mask)
            if g.node(_scaled(g, product)[0], "MatMul") is not None and mask_shape is not None:
                if _is_attention_bias(mask_shape, (b, n, s, t)) and g.facts.is_float32(mask):
                    scores, bias = product, mask
                break
    scores, factor = _scaled(g, scores)
    matmul = g.node(scores, "MatMul")
    if matmul is None:
        return None
    q_heads, q_factor = _scaled(g, matmul.input[0])
    k_source, k_factor = _scaled(g, matmul.input[1])
    key = _untransposed_key(g, k_source)
    probabilities = softmax.output[0]
    readers = g.readers.get(probabilities, [])
    guard = _nan_guard(g, probabilities, readers)
    if guard is not None:
        if bias and not _finite_mask(g, bias):
            return None
        probabilities = guard
        readers = g.readers.get(probabilities, [])
    merged = _merged_output(g, probabilities, readers)
    head_shape = g.shape(q_heads)
    if merged is None or head_shape is None or len(head_shape) != 4:
        return None
    value, output, transpose_position, reshape_position = merged
    d, out_shape, v_heads = head_shape[3], g.shape(output), g.shape(value)
    if head_shape != (b, n, s, d) or out_shape is None or v_heads is None or v_heads[:3] != (b, n, t):
        return None
    fused_shape = (b, s, n * v_heads[3])
    query = _heads_of(g, q_heads)
    value3 = _heads_of(g, value)
    if key is None:  # K^T in one Transpose of its head split: only the [B, T, N*D] form can be fed
        key = key3 = _heads_transposed_of(g, k_source, (b, n, t, d))
        if key is None or value3 is None:
            return None
    else:
        key3 = _heads_of(g, key) if g.shape(key) == (b, n, t, d) else None
    key_regroup: tuple[int, ...] = ()
    if key3 is not None and value3 is not None:
        key, value = key3, value3
    elif g.shape(key) != (b, n, t, d):
        key_regroup = (b, n, t, d)
    operands = [query or q_heads, key, value, output]
    if int(np.prod(out_shape)) != int(np.prod(fused_shape)) or not all(g.facts.is_float32(x) for x in operands):
        return None
    scale = factor * q_factor * k_factor
    kv_heads = key3 is None or value3 is None
    projections = _projections(g, (query, key, value)) if query is not None and not kv_heads else ()
    return AttentionSite(
        output,
        query or q_heads,
        key,
        value,
        bias,
        n,
        scale,
        fused_shape,
        out_shape,
        position,
        reshape_position,
        query_merge=query is None,
        kv_heads=kv_heads,
        key_regroup=key_regroup,
        transpose=transpose_position,
        projections=projections,
        bias_expand=_bias_expand(g.shape(bias), s) if bias else (),
    )


def _bias_expand(mask: tuple[int, ...] | None, s: int) -> tuple[int, ...]:
    assert mask is not None
    return (*mask[:2], s, mask[3]) if mask[2] != s else ()


def _projections(g: _Graph, qkv: tuple[str, str, str]) -> tuple[str, ...]:
    """(x, Wq, Wk, Wv, bq, bk, bv) if each of ``qkv`` is ``Add(MatMul(x, W), b)`` of one 3-D x, with constant
    [K, H] weights and [H] biases of one H; () otherwise."""
    found = []
    for name in qkv:
        add = g.node(name, "Add")
        if add is None or len(add.input) != 2:
            return ()
        for product, bias in (tuple(add.input), tuple(reversed(add.input))):
            matmul = g.node(product, "MatMul")
            if matmul is not None and bias in g.constants:
                found.append((matmul.input[0], matmul.input[1], bias))
                break
        else:
            return ()
    inputs = {x for x, _, _ in found}
    (x,) = inputs if len(inputs) == 1 else ("",)
    x_shape = g.shape(x) if x else None
    if x_shape is None or len(x_shape) != 3 or not all(w in g.constants for _, w, _ in found):
        return ()
    widths = {(g.shape(w), g.shape(b)) for _, w, b in found}
    if len(widths) != 1:
        return ()
    ((w_shape, b_shape),) = widths
    if w_shape is None or b_shape is None or len(w_shape) != 2 or w_shape[0] != x_shape[2] or b_shape != w_shape[1:]:
        return ()
    return (x, *(w for _, w, _ in found), *(b for _, _, b in found))


def _finite_mask(g: _Graph, mask: str) -> bool:
    """The mask holds finite values only: a finite constant, or a ``Where`` choosing between two."""
    where = g.node(mask, "Where")
    if where is not None and len(where.input) == 3:
        values = [g.scalar(name) for name in where.input[1:]]
        return all(v is not None and np.isfinite(v) for v in values)
    value = g.read(mask)
    return value is not None and bool(np.all(np.isfinite(value)))


def _nan_guard(g: _Graph, probabilities: str, readers: list[onnx.NodeProto]) -> str | None:
    """The output of ``Where(IsNaN(p), 0, p)`` over the probabilities, if that is what reads them."""
    is_nan = [r for r in readers if r.op_type == "IsNaN"]
    where = [r for r in readers if r.op_type == "Where" and len(r.input) == 3 and r.input[2] == probabilities]
    if len(is_nan) != 1 or len(where) != 1 or where[0].input[0] != is_nan[0].output[0]:
        return None
    return where[0].output[0] if g.scalar(where[0].input[1]) == 0.0 else None


def _merged_output(g: _Graph, probabilities: str, readers: list[onnx.NodeProto]) -> tuple[str, str, int, int] | None:
    """(value [B, N, T, Dv], merged output, the merging Transpose's and Reshape's positions) or None."""
    matmuls = [r for r in readers if r.op_type == "MatMul" and r.input[0] == probabilities]
    if len(matmuls) != 1:
        return None
    transposes = [r for r in g.readers.get(matmuls[0].output[0], []) if r.op_type == "Transpose"]
    if len(transposes) != 1 or g.perm(transposes[0]) != [0, 2, 1, 3]:
        return None
    reshapes = [r for r in g.readers.get(transposes[0].output[0], []) if r.op_type == "Reshape"]
    if len(reshapes) != 1:
        return None
    transpose, reshape = transposes[0].output[0], reshapes[0].output[0]
    return matmuls[0].input[1], reshape, g.producer[transpose][0], g.producer[reshape][0]


def attention_sites(
    graph: onnx.GraphProto, facts: GraphFacts, read: Reader, constants: set[str]
) -> list[AttentionSite]:
    """Every attention of the graph the fused op can stand for (see the module docstring), in graph order.

    ``read`` gives the value of a small constant; ``constants`` names the initializers that cannot be
    overridden at run time."""
    if not any(node.op_type == "Softmax" for node in graph.node):
        return []
    g = _Graph(graph, facts, read, constants)
    sites = []
    for position, node in enumerate(graph.node):
        if node.op_type == "Softmax" and node.domain in ("", "ai.onnx") and len(node.input) == 1:
            site = _match(g, position, node)
            if site is not None:
                sites.append(site)
    return sites
