"""The form a lossy technique starts from: ONNXSat's own lossless optimization for the portable target
(constants folded, BatchNormalization folded into convolutions, shapes computed from constants made
constant, standard ops only), kept only when it verifies.

Exports compute much of their structure at run time (Paddle2ONNX's ``Shape -> Gather -> Concat ->
Reshape``, YOLO heads), which hides what a channel walk or a quantizer needs to see: on the PP-OCR
orientation classifier, pruning finds 7 prunable channel groups in the export and 25 after this.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.inputs import InputsLike, InputSpec


@dataclass
class PortableForm:
    """The model to work on, and what became of the normalisation (``folded`` nodes, or why not used)."""

    model: onnx.ModelProto
    folded: int = 0
    not_used: str | None = None
    """Why the model is used as given: the optimization failed or did not verify."""


def portable_form(model: onnx.ModelProto, inputs: InputsLike = None, base_dir: Path | None = None) -> PortableForm:
    """``model`` optimized for the portable target when that verifies, else ``model`` itself (never
    modified) with the reason; normalising improves a lossy pass, it is never a reason for it to fail."""
    try:
        optimized, report = optimize_model(
            model,
            OptimizeOptions(target="portable", inputs=InputSpec.of(inputs), widen_weights=True),
            base_dir=base_dir,
        )
    except Exception as error:  # any failure of an optional step: say which, and go on with the model as given
        return PortableForm(model, not_used=f"normalisation failed ({type(error).__name__})")
    if report.verification is None or not report.verification.ok:
        return PortableForm(model, not_used="ONNXSat's own normalisation did not verify on this model")
    return PortableForm(optimized, sum(report.nodes_before.values()) - sum(report.nodes_after.values()))
