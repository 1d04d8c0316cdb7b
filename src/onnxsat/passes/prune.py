"""``prune``: structured pruning along node association trees (``onnxsat prune``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from onnxsat.core import Model, Pass, PassContext, PassResult, register_pass, run_check
from onnxsat.pruning.prune import PruneOptions, prune_model


@register_pass
@dataclass
class PrunePass(Pass):
    """The keys are ``PruneOptions``' fields, the names of ``onnxsat prune``'s options (``data`` defaults
    to the run's)."""

    kind: ClassVar[str] = "prune"
    result_name: ClassVar[str] = "the pruned model"
    options_class: ClassVar[type] = PruneOptions

    options: PruneOptions

    def check(self, place: str) -> None:
        run_check(place, self.options.check)

    def run(self, model: Model, context: PassContext) -> PassResult:
        options = replace(self.options, data=self.options.data or context.data, input_shapes=context.input_shapes)
        result, report = prune_model(model.proto, options, source=context.source, base_dir=model.base_dir)
        params, macs = report.params, report.macs
        notices = [
            f"{report.mode} {options.criterion} at rate {options.rate:g}: params {params['pruned']:,} of "
            f"{params['original']:,}, MACs {macs['pruned']:,} of {macs['original']:,}",
            *report.notes,
        ]
        return PassResult(result, report.verification, notices, rebase=True, report=report)
