"""Clamps written as Max and Min recognised as the activation ops they are (JAX, Keras 3 and Flax exports).

    Min(Max(x, lo), hi)   lo, hi scalars    ==>  Clip(x, lo, hi)     (either operand order of each)
    Max(x, 0)             0 a scalar        ==>  Relu(x)

ONNX defines ``Clip(x, lo, hi)`` as ``Min(hi, Max(x, lo))`` for any scalar bounds (also when lo > hi),
and ``Relu(x)`` as ``max(x, 0)``; ONNX Runtime computes them that way, NaN included (it propagates in all
four ops). Only the sign of a zero result may differ, which IEEE 754 leaves open for max and min. The
named forms matter because ONNX Runtime fuses Relu and Clip into the Conv or Gemm before them (FusedConv),
and never a Max or a Min: a ReLU6 network exported from JAX ran its clamps as separate passes over memory.

Bounds must be rank-0 tensors (Clip takes scalars; a ``[1]`` bound would also broadcast a rank-0 ``x``),
and the element type float, float16 or double, which Clip (opset 11 on) and Relu take at every opset here.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, rule, ruleset, union

from onnxsat.eqsat.language import Attrs, Dims, Tensor, args_of, has_shape, has_type, opset_at_least
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import result, unique, value_flag
from onnxsat.op_kinds import IEEE_FLOAT_TYPES

clamp_forms: Ruleset = ruleset(name="clamp_forms")

FLOAT_TYPES = sorted(IEEE_FLOAT_TYPES)
"""The element types Clip and Relu take from opset 11 (and 6) on."""


def _operand_orders(x: Tensor, c: Tensor) -> tuple[tuple[Tensor, Tensor], ...]:
    """Max and Min are commutative: the variable operand may come first or second."""
    return ((x, c), (c, x))


@clamp_forms.register
def _clips(
    y: Tensor, m: Tensor, x: Tensor, lo: Tensor, hi: Tensor, a1: Attrs, a2: Attrs, id1: String, id2: String
) -> object:
    for elem in FLOAT_TYPES:
        for max_args in _operand_orders(x, lo):
            for min_args in _operand_orders(m, hi):
                yield rule(
                    eq(y).to(result("Min", a1, args_of(*min_args), id1)),
                    eq(m).to(result("Max", a2, args_of(*max_args), id2)),
                    has_shape(lo, Dims.nil()),
                    has_shape(hi, Dims.nil()),
                    has_type(x, elem),
                    opset_at_least(11),
                    name=unique("Min(Max(x, lo), hi) -> Clip"),
                ).then(union(y).with_(result("Clip", Attrs.none(), args_of(x, lo, hi), id1)))


@clamp_forms.register
def _relus(y: Tensor, x: Tensor, zero: Tensor, attrs: Attrs, node_id: String) -> object:
    for elem in FLOAT_TYPES:
        for max_args in _operand_orders(x, zero):
            yield rule(
                eq(y).to(result("Max", attrs, args_of(*max_args), node_id)),
                has_shape(zero, Dims.nil()),
                value_flag(zero, "zeros"),
                has_type(x, elem),
                name=unique("Max(x, 0) -> Relu"),
            ).then(union(y).with_(result("Relu", Attrs.none(), args_of(x), node_id)))


register_family(clamp_forms, stage="simplify", order=125, targets=STANDARD, requires_op="Max")
