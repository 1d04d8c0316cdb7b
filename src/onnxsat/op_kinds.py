"""Families of ONNX op types, and the standard domain, that several parts of ONNXSat treat alike, named once."""

from __future__ import annotations

import onnx

DEFAULT_DOMAINS = ("", "ai.onnx")
"""The standard ONNX domain's two spellings."""
IEEE_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE})
"""float, float16, double: the float element types every float op takes at every opset (not bfloat16, which
many gained only later)."""
FLOAT_TYPES = IEEE_FLOAT_TYPES | {onnx.TensorProto.BFLOAT16}
"""Every float element type a tensor of an ONNX model may have."""


def qualified_op(domain: str, op_type: str, separator: str = "::") -> str:
    """``Conv`` in the standard domain, ``com.microsoft::FusedConv`` (or with another ``separator``) elsewhere:
    how reports, counts and pictures name an op so a contrib op is never mistaken for a standard one."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}{separator}{op_type}"


def default_opset_version(model: onnx.ModelProto, missing: int = 1) -> int:
    """The standard-domain opset ``model`` imports (the first such import), ``missing`` when it has none."""
    return next((entry.version for entry in model.opset_import if entry.domain in DEFAULT_DOMAINS), missing)


ELEMENTWISE_UNARY = (
    "Relu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Mish",
    "Softplus",
    "Softsign",
    "ThresholdedRelu",
    "Clip",
    "Tanh",
    "Erf",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
    "Not",
    "Cast",
)
"""Ops applied to each element alone, output shape = input shape (Clip's bounds are extra scalar inputs):
they commute with layout ops (``layout_sinking``) and carry channels through unchanged (pruning)."""
