"""``verify``: compare the model with the reference (the run's input, or the last lossy pass's result)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from onnxsat.core import Model, Pass, PassContext, PassResult
from onnxsat.verification import verify


@dataclass
class VerifyPass(Pass, kind="verify"):
    weights_on_disk = True  # ORT reads the weights from the model's folder
    rtol: float | None = None
    atol: float | None = None
    ort_rounding: float | None = None

    def run(self, model: Model, context: PassContext) -> PassResult:
        tolerance = replace(
            context.tolerance,
            rtol=context.tolerance.rtol if self.rtol is None else self.rtol,
            atol=context.tolerance.atol if self.atol is None else self.atol,
            ort_rounding=context.tolerance.ort_rounding if self.ort_rounding is None else self.ort_rounding,
        )
        assert context.reference is not None
        result = verify(context.reference, model.proto, context.inputs, tolerance, base_dir=model.base_dir)
        worst = max((c.max_abs_diff for c in result.outputs), default=0.0)
        notices = [f"against {context.reference_name}: largest output difference {worst:.3g}"]
        return PassResult(model.proto, result, notices)
