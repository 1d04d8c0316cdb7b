"""Families of ONNX op types that several parts of ONNXSat treat alike, named once."""

from __future__ import annotations

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
