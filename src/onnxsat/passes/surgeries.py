"""``surgeries``: Olive-style surgeons applied in order (the catalogue is ``onnxsat.surgery.surgeons``).

Surgeons that keep the outputs are compared with the model they were given, under its input and output
names (so renames are compared too); a surgeon that changes numerics, or an interface that changes in
number, only has to pass the checker and run, and its result becomes the reference later ``verify``
passes compare against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from onnxsat.core import Model, Pass, PassContext, PassResult, lossless
from onnxsat.errors import SettingsError
from onnxsat.surgery.graph_edit import copy_model, rename_tensor
from onnxsat.surgery.surgeon import Surgeon, build_surgeon
from onnxsat.verification import check_and_run


@dataclass
class SurgeriesPass(Pass, kind="surgeries"):
    result_name = "the edited model"

    surgeries: list[dict[str, Any]]
    built: list[Surgeon] = field(default_factory=list, init=False, repr=False)

    def check(self, place: str) -> None:
        if not self.surgeries:
            raise SettingsError(f"{place}.surgeries: the list is empty")
        self.built = [build_surgeon(config, f"{place}.surgeries[{i}]") for i, config in enumerate(self.surgeries)]

    def run(self, model: Model, context: PassContext) -> PassResult:
        result, notices, exact = model.proto, [], True
        for surgeon in self.built:
            outcome = surgeon.apply(result)
            notices.append(f"{surgeon.name()}: {outcome.notice}")
            result, exact = outcome.model, exact and (surgeon.exact or not outcome.changed)
        renamed = under_names_of(model.proto, result)
        if exact and renamed is not None:
            checked = lossless(context, model, renamed, notices)
            checked.model, checked.rebase = result, renamed is not result
            return checked
        why = "a surgeon changes numerics" if renamed is not None else "the inputs or outputs changed in number"
        notices.append(f"outputs not compared with the input ({why}): checked that the result runs")
        _, verification = check_and_run(result, None, model.base_dir)
        return PassResult(result, verification, notices, rebase=True)


def under_names_of(before: onnx.ModelProto, after: onnx.ModelProto) -> onnx.ModelProto | None:
    """``after`` with its graph inputs and outputs called as ``before`` calls them, so the two can be
    compared: names both have map to themselves (ReorderInputs), the rest pair up in order
    (RenameInputs). ``after`` itself when nothing needs renaming; None when the counts differ."""
    sides = [(before.graph.input, after.graph.input), (before.graph.output, after.graph.output)]
    if any(len(old) != len(new) for old, new in sides):
        return None
    pairs = []
    for old_values, new_values in sides:
        old_names, new_names = [v.name for v in old_values], [v.name for v in new_values]
        unmatched_old = [name for name in old_names if name not in new_names]
        unmatched_new = [name for name in new_names if name not in old_names]
        pairs += list(zip(unmatched_new, unmatched_old, strict=True))
    if not pairs:
        return after
    copy = copy_model(after)
    for new, old in pairs:
        rename_tensor(copy.graph, new, old)
    return copy
