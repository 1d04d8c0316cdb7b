"""``sparsify``: unstructured sparsity (``onnxsat sparsify``), optionally inside an accuracy budget."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from onnxsat.core import Model, Pass, PassContext, PassResult, register_pass, run_check
from onnxsat.sparsity.sparsify import SparsifyOptions, sparsify_model


@register_pass
@dataclass
class SparsifyPass(Pass):
    """The keys are ``SparsifyOptions``' fields, the names of ``onnxsat sparsify``'s options (``data``
    defaults to the run's)."""

    kind: ClassVar[str] = "sparsify"
    result_name: ClassVar[str] = "the sparsified model"
    options_class: ClassVar[type] = SparsifyOptions

    options: SparsifyOptions

    def check(self, place: str) -> None:
        run_check(place, self.options.check)

    def run(self, model: Model, context: PassContext) -> PassResult:
        options = replace(self.options, data=self.options.data or context.data, input_shapes=context.input_shapes)
        result, report = sparsify_model(model.proto, options, source=context.source, base_dir=model.base_dir)
        notices = [f"{options.method}: {report.overall:.1%} of the prunable weights are zero"]
        if report.baseline is not None and report.accuracy is not None:
            before, after = report.baseline.top1, report.accuracy.top1
            notices.append(f"{report.baseline.kind} top-1 on {report.data}: {before:.2%} -> {after:.2%}")
        notices.extend(report.notes)
        return PassResult(result, report.verification, notices, rebase=True, report=report)
