"""``eqsat``: ONNXSat's equality-saturation optimizer (``onnxsat optimize``): lossless, verified inside."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from onnxsat.core import Model, Pass, PassContext, PassResult, register_pass, run_check
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model


@register_pass
@dataclass
class EqsatPass(Pass):
    kind: ClassVar[str] = "eqsat"
    result_name: ClassVar[str] = "the optimized model"
    options_class: ClassVar[type] = OptimizeOptions
    checks_input: ClassVar[bool] = True
    """``optimize_model`` runs the checker itself (its ``check`` phase)."""

    options: OptimizeOptions

    def check(self, place: str) -> None:
        run_check(place, self.options.check)

    def run(self, model: Model, context: PassContext) -> PassResult:
        options = replace(self.options, input_shapes=context.input_shapes, tolerance=context.tolerance)
        if context.run_timeout is not None:
            options = replace(options, run_timeout=context.run_timeout)
        result, report = optimize_model(model.proto, options, source=context.source, base_dir=model.base_dir)
        fused = ", ".join(f"{op} {count}" for op, count in sorted(report.fusions.items())) or "none"
        before, after = sum(report.nodes_before.values()), sum(report.nodes_after.values())
        notices = [f"{before} -> {after} nodes; fusions: {fused}"]
        return PassResult(result, report.verification, notices, report=report)

    def refusal(self) -> str:
        return "the optimized model does not match the original; nothing was written (use --force to write it anyway)"
