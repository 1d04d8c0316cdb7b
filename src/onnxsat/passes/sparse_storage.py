"""``sparse-initializers``: weights at or above ``min_sparsity`` zeros stored in COO form when smaller."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.core import Model, Pass, PassContext, PassResult
from onnxsat.errors import SettingsError
from onnxsat.sparsity.storage import to_sparse_initializers
from onnxsat.surgery.graph_edit import copy_model
from onnxsat.verification import Tolerance, verify


@dataclass
class SparseInitializersPass(Pass, kind="sparse-initializers"):
    min_sparsity: float = 0.5

    def check(self, place: str) -> None:
        if not 0.0 <= self.min_sparsity <= 1.0:
            raise SettingsError(f"{place}.min_sparsity: must be in [0, 1], got {self.min_sparsity:g}")

    def run(self, model: Model, context: PassContext) -> PassResult:
        result = copy_model(model.proto)
        storage = to_sparse_initializers(result, [t.name for t in model.proto.graph.initializer], self.min_sparsity)
        exact = Tolerance(rtol=0.0, atol=0.0, ort_rounding=0.0)
        verification = verify(model.proto, result, context.inputs, exact, base_dir=model.base_dir)
        notices = [f"{len(storage.moved)} initializers stored sparse, {len(storage.kept_dense)} kept dense"]
        notices.extend(f"{name} kept dense: {why}" for name, why in storage.kept_dense.items())
        return PassResult(result, verification, notices, report=StorageReport(storage.moved))


@dataclass
class StorageReport:
    """The initializers moved to COO storage (the pipeline report's details of this pass)."""

    moved: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {"moved": self.moved}
