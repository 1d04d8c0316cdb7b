"""Rewrite rules, one module per family, and which families each ``--target`` runs.

- ``analysis``: facts derived inside the e-graph (which argument lists are all constant).
- ``bn_folding``: BatchNormalization folded into the Conv/ConvTranspose before it (standard ONNX).
- ``activation_fusion``: Conv+Relu/Clip and Gemm+Relu into ONNX Runtime's com.microsoft fused ops.
"""

from __future__ import annotations

from egglog import Ruleset

from onnxsat.eqsat.rules.activation_fusion import activation_fusion
from onnxsat.eqsat.rules.analysis import analysis
from onnxsat.eqsat.rules.bn_folding import bn_folding
from onnxsat.errors import SettingsError

TARGETS: dict[str, tuple[Ruleset, ...]] = {
    "none": (),
    "portable": (bn_folding,),
    "ort": (bn_folding, activation_fusion),
}
"""``none`` runs no rewrite (a lossless round trip that drops dead nodes); ``portable`` emits standard
ONNX only; ``ort`` may emit com.microsoft ops that ONNX Runtime runs."""


def rulesets_for(target: str) -> tuple[Ruleset, ...]:
    if target not in TARGETS:
        raise SettingsError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    return TARGETS[target]


__all__ = ["TARGETS", "analysis", "rulesets_for"]
