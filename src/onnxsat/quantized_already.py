"""Whether a model came here quantized already, said in a form each refusal can append.

Users hand over what they have, and an int8 model is common: ONNX Runtime's QOperator form (QLinearConv,
MatMulInteger...), its default QDQ form and every TFLite full-integer or dynamic-range conversion (integer
weights behind DequantizeLinear). quantize, sparsify and prune find no float weight in such a model; the
reason is that it is quantized, not that it has no Conv.
"""

from __future__ import annotations

from collections import Counter

import onnx

from onnxsat.proto_fields import all_nodes

QUANTIZED_OPS = frozenset(
    {"ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "MatMulNBits", "DynamicQuantizeLinear"}
    | {"GatherBlockQuantized"}
)
"""Ops a quantizer leaves behind: a model holding them was quantized before it came here."""
INTEGER_TYPES = frozenset(
    {
        onnx.TensorProto.INT8,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.INT16,
        onnx.TensorProto.UINT16,
        onnx.TensorProto.INT4,
        onnx.TensorProto.UINT4,
    }
)


NARROW_TYPES = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "INT4", "UINT4", "FLOAT4E2M1")
    if hasattr(onnx.TensorProto, name)
)
"""Weight types ORT's graph optimizations fuse around quantized nodes into ops that do not take them (a float8
weight behind a DequantizeLinear became a QLinearMatMul that ORT then refuses to load)."""


def narrow_weight_readers(graph: onnx.GraphProto) -> set[str]:
    """Names of the nodes reading a DequantizeLinear of a float8/int4/float4 initializer: quantized already, in a
    type ORT's int8 kernels do not take, so quantizing them again writes a model ORT refuses."""
    narrow = {t.name for t in graph.initializer if t.data_type in NARROW_TYPES}
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in narrow}
    return {node.name for node in graph.node if dequantized & set(node.input)}


def quantized_parts(model: onnx.ModelProto) -> str:
    """ "3 QLinearConv, 5 DequantizeLinear of integer weights" for a model some quantizer made; "" otherwise.
    Float8 and float4 weights behind DequantizeLinear count too: a quantizer made them as well."""
    integer_weights = {t.name for t in model.graph.initializer if t.data_type in INTEGER_TYPES}
    narrow_floats = {t.name for t in model.graph.initializer if t.data_type in NARROW_TYPES - INTEGER_TYPES}
    found: Counter[str] = Counter()
    for node in all_nodes(model.graph):
        if node.op_type in QUANTIZED_OPS:
            found[node.op_type] += 1
        elif node.op_type == "DequantizeLinear" and node.input and node.input[0] in integer_weights:
            found["DequantizeLinear of integer weights"] += 1
        elif node.op_type == "DequantizeLinear" and node.input and node.input[0] in narrow_floats:
            found["DequantizeLinear of float8 or float4 weights"] += 1
    return ", ".join(f"{count} {op}" for op, count in sorted(found.items()))


def quantized_note(model: onnx.ModelProto, verb: str) -> str:
    """What a refusal adds for such a model: "; it is quantized already (...): {verb} its float original instead"."""
    parts = quantized_parts(model)
    return f"; it is quantized already ({parts}): {verb} its float original instead" if parts else ""


def quantized_nodes(graph: onnx.GraphProto) -> set[str]:
    """Names of the nodes an earlier quantizer left in QDQ form: an output of theirs feeds a QuantizeLinear.
    ORT's quantizer would quantize that output again under the names the earlier pass gave it (a model
    with duplicate tensor names), and the node is quantized already: it is left as it is."""
    quantized = {name for node in graph.node if node.op_type == "QuantizeLinear" for name in node.input[:1]}
    return {node.name for node in graph.node if node.op_type != "DequantizeLinear" and quantized & set(node.output)}


def integer_op(op_type: str) -> bool:
    """Whether ``op_type`` quantizes, dequantizes or computes in integers, as ORT's quantizer writes them: QDQ
    pairs, ``DynamicQuantize*`` and ``*Integer*`` ops, ``QLinear*``, ``QGemm``, ``QAttention``,
    ``QEmbedLayerNormalization``, ``MatMulNBits`` and ``GatherBlockQuantized``."""
    return (
        op_type in QUANTIZED_OPS
        or op_type in ("QuantizeLinear", "DequantizeLinear", "QGemm", "QAttention", "QEmbedLayerNormalization")
        or op_type.startswith(("DynamicQuantize", "QLinear"))
        or "Integer" in op_type
    )


def integer_nodes(model: onnx.ModelProto) -> int:
    """How many nodes quantize, dequantize or compute in integers (a model from a QAT export has some already)."""
    return sum(integer_op(node.op_type) for node in all_nodes(model.graph))


def runs_in_integers(model: onnx.ModelProto) -> bool:
    """Whether ONNX Runtime may run part of ``model`` in integer kernels: it quantizes values (QDQ pairs, which
    ORT fuses with the ops between them from its extended level on) or holds integer ops. Such a model's
    outputs differ between optimization levels by rounding, by design. A DequantizeLinear alone (integer
    weights read as float) quantizes nothing at run time."""
    return any(integer_op(node.op_type) and node.op_type != "DequantizeLinear" for node in all_nodes(model.graph))
