"""Elementwise chains with constants reassociated so the constants meet and fold (TASO-style).

    (x + c1) + c2  ==>  x + (c1 + c2)          (x * c1) * c2  ==>  x * (c1 * c2)

in every operand order. The combined constant is computed at decode time, so two run-time passes over
``x`` become one. Broadcasting is associative, so the result's shape is unchanged; both constants
must be static, and the inner result must have no other reader (otherwise it is computed anyway).
Float32 only: the constants are combined in float64, exact for float32 but not for int64 beyond 2^53.
"""

from __future__ import annotations

from egglog import Ruleset, String, rule, ruleset, union

from onnxsat.eqsat.language import Attrs, Tensor, args_of, is_float32, sole_use
from onnxsat.eqsat.rules.analysis import constant_operand
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import derived, result, unique

reassociation: Ruleset = ruleset(name="reassociation")

COMBINE = {"Add": "add_values", "Mul": "multiply_values"}


@reassociation.register
def _combine_constants(
    y: Tensor, z: Tensor, x: Tensor, c1: Tensor, c2: Tensor, a1: Attrs, a2: Attrs, id1: String, id2: String
) -> object:
    for op, kernel in COMBINE.items():
        combined = derived(kernel, args_of(c1, c2), a1)
        yield rule(  # both in either operand order, c1 and c2 static
            constant_operand(y, op, z, c2, a1, id1),
            constant_operand(z, op, x, c1, a2, id2),
            sole_use(z),
            is_float32(y),
            name=unique(f"({op} c1) {op} c2 -> {op} (c1 {op} c2)"),
        ).then(union(y).with_(result(op, a1, args_of(x, combined), id1)))


register_family(reassociation, stage="simplify", order=110, targets=STANDARD)
