"""Nodes of a QDQ model that ONNX Runtime runs in integers: held as they are, out of every rule's reach.

A model quantized in QDQ form (ONNX Runtime's quantizer, PyTorch's QAT export, TensorRT-style fake
quantization) computes in float on paper: ``DequantizeLinear -> Conv -> Relu -> QuantizeLinear``. ORT
turns each such unit into one integer kernel (``QLinearConv``) when it loads the model, and that is what
the user deploys. A rewrite of the middle breaks the unit: fused into ``FusedConv``, the Conv ran in float,
0.81-0.87x, and its outputs moved away from the int8 ones ORT computed before (by up to 7 logits on a
fake-quantized CNN), while a check at ORT's optimizations off, which runs both in float, saw no change.

So a node that reads a ``DequantizeLinear`` output or feeds a ``QuantizeLinear`` is written into the
e-graph under :data:`HELD_DOMAIN` instead of its own domain: every rule matches default-domain nodes only,
so none applies, and the decoder and the cost model read the real domain back (:func:`real_domain`).
Patterns matched in Python before saturation (GELU, layer norm, hard sigmoid, attention written out) do not
go through the rules, so they leave out those that read or write such a tensor (:func:`quantized_edges`): a
float op fused there computes by a rounding apart, and the ``QuantizeLinear`` after it turns that into whole
steps. On an int8 speech transformer, GELUs fused between DQ and Q moved its probability by up to 0.33 on
real inputs and changed one of 38 decisions.
"""

from __future__ import annotations

from typing import TypeVar

import onnx

S = TypeVar("S")

HELD_DOMAIN = "onnxsat.qdq_held"
"""The domain a held node carries inside the e-graph; never written to a model."""


def _edges(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """``DequantizeLinear`` outputs, and the tensors ``QuantizeLinear`` nodes read."""
    dequantized = {out for node in graph.node if node.op_type == "DequantizeLinear" for out in node.output}
    to_quantize = {name for node in graph.node if node.op_type == "QuantizeLinear" for name in node.input[:1]}
    return dequantized, to_quantize


def held_nodes(graph: onnx.GraphProto) -> set[int]:
    """Positions of the default-domain nodes in ``graph`` that a QDQ unit holds: they read a
    ``DequantizeLinear``'s output or feed a ``QuantizeLinear`` (the Q and DQ nodes themselves are free)."""
    dequantized, to_quantize = _edges(graph)
    if not dequantized and not to_quantize:
        return set()
    return {
        position
        for position, node in enumerate(graph.node)
        if node.domain in ("", "ai.onnx")  # rules match no other domain anyway
        and node.op_type not in ("DequantizeLinear", "QuantizeLinear")
        and (any(name in dequantized for name in node.input) or any(name in to_quantize for name in node.output))
    }


def quantized_edges(graph: onnx.GraphProto) -> set[str]:
    """The tensors where float meets int8: ``DequantizeLinear`` outputs and ``QuantizeLinear`` inputs. A pattern
    that reads or writes one holds the nodes beside it; one that reads a held node's output (a projection whose
    weight is dequantized, feeding an attention) leaves that node as it is."""
    dequantized, to_quantize = _edges(graph)
    return dequantized | to_quantize


def outside_held(sites: list[S], edges: set[str]) -> list[S]:
    """The matched patterns (dataclasses of tensor names and settings) that read and write none of ``edges``
    (:func:`quantized_edges`)."""
    return [site for site in sites if not edges & {v for v in vars(site).values() if isinstance(v, str)}]


def real_domain(domain: str, original: str = "") -> str:
    """The domain a node really has: the default one (as ``original`` spells it) for a held node, else the
    one it carries."""
    return original if domain == HELD_DOMAIN else domain
