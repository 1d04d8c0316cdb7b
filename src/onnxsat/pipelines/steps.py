"""The passes a pipeline file can list, one dataclass each: its fields are the pass's keys in the file.

Each pass checks its settings in ``check`` (run for every pass before the first one runs) and edits
the model in ``run``, which returns a :class:`StepOutcome` with what it verified. Lossless passes
(surgeries that keep the outputs, eqsat, ORT, peephole, sparse storage) compare their result with the
model they were given (under the given model's input and output names, so renames are compared too);
lossy ones (sparsify, prune, inexact surgeons) check that the result passes the checker and runs. Lossy
results and renamed interfaces become the reference later ``verify`` passes compare against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import onnx

from onnxsat.config_check import checked_keys
from onnxsat.errors import SettingsError
from onnxsat.pipelines.context import Context, StepOutcome
from onnxsat.surgery.graph_edit import copy_model, rename_tensor
from onnxsat.surgery.surgeon import Surgeon, build_surgeon
from onnxsat.verification import Tolerance, check_and_run, verify


class Step(ABC):
    """A pass of a pipeline file. Subclasses are dataclasses registered in :data:`STEPS`."""

    kind: ClassVar[str]

    @classmethod
    def build(cls, config: Mapping[str, Any], place: str) -> Step:
        """The pass ``config`` (a mapping from the file) describes, every key checked (``place`` names it)."""
        step = cls(**checked_keys(cls, config, place, f"the {cls.kind} pass", ignore=("type",)))
        step.check(place)
        return step

    def check(self, place: str) -> None:  # noqa: B027  (most passes have nothing beyond the types to check)
        """Raise a SettingsError naming ``place`` for settings the types alone do not rule out."""

    @abstractmethod
    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        """The pass applied to ``model`` (never modified)."""


def _lossless(context: Context, before: onnx.ModelProto, after: onnx.ModelProto, notices: list[str]) -> StepOutcome:
    """A result that must compute what ``before`` computed, compared on seeded inputs."""
    result = verify(before, after, context.input_shapes, context.tolerance, base_dir=context.base_dir)
    return StepOutcome(after, result, notices)


def _options_step(options_class: type, config: Mapping[str, Any], place: str, kind: str) -> Any:
    """``options_class`` (SparsifyOptions, PruneOptions) built from a pass's keys: the file uses the same
    names as the command line's options, and the pipeline supplies ``input_shapes``."""
    options = options_class(**checked_keys(options_class, config, place, f"the {kind} pass", ("type",), SHARED))
    _place_errors(place, options.check)
    return options


SHARED = ("input_shapes",)
"""Option fields a pipeline sets once for every pass, not per pass."""


def _place_errors(place: str, check: Any) -> None:
    """Run ``check()`` and prefix a SettingsError it raises with ``place``."""
    try:
        check()
    except SettingsError as error:
        raise SettingsError(f"{place}: {error}") from None


@dataclass
class SurgeriesStep(Step):
    """``surgeries``: Olive-style surgeons applied in order (see ``onnxsat.surgery.surgeons``)."""

    kind: ClassVar[str] = "surgeries"
    surgeries: list[dict[str, Any]]
    built: list[Surgeon] = field(default_factory=list, init=False, repr=False)

    def check(self, place: str) -> None:
        if not self.surgeries:
            raise SettingsError(f"{place}.surgeries: the list is empty")
        self.built = [build_surgeon(config, f"{place}.surgeries[{i}]") for i, config in enumerate(self.surgeries)]

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        result, notices, exact = model, [], True
        for surgeon in self.built:
            outcome = surgeon.apply(result)
            notices.append(f"{surgeon.name()}: {outcome.notice}")
            result, exact = outcome.model, exact and (surgeon.exact or not outcome.changed)
        renamed = _under_names_of(model, result)
        if exact and renamed is not None:
            outcome = _lossless(context, model, renamed, notices)
            outcome.model, outcome.rebase = result, renamed is not result
            return outcome
        why = "a surgeon changes numerics" if renamed is not None else "the inputs or outputs changed in number"
        notices.append(f"outputs not compared with the input ({why}): checked that the result runs")
        _, verification = check_and_run(result, None, context.base_dir)
        return StepOutcome(result, verification, notices, rebase=True)


def _under_names_of(before: onnx.ModelProto, after: onnx.ModelProto) -> onnx.ModelProto | None:
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


@dataclass
class EqsatStep(Step):
    """``eqsat``: ONNXSat's equality-saturation optimizer (``onnxsat optimize``)."""

    kind: ClassVar[str] = "eqsat"
    target: str = "ort"
    cost_model: str | None = None
    max_iterations: int | None = None
    max_enodes: int | None = None
    max_seconds: float | None = None

    def check(self, place: str) -> None:
        from onnxsat.eqsat.costs import COST_MODELS
        from onnxsat.eqsat.rules import rulesets_for

        _place_errors(place, lambda: rulesets_for(self.target))
        if self.cost_model is not None and self.cost_model not in COST_MODELS:
            raise SettingsError(
                f"{place}.cost_model: unknown {self.cost_model!r}; choose from {', '.join(COST_MODELS)}"
            )

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from dataclasses import replace

        from onnxsat.eqsat.costs import DEFAULT_COST_MODEL
        from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
        from onnxsat.eqsat.saturate import SaturationLimits

        limits = SaturationLimits()
        chosen = {"max_iterations": self.max_iterations, "max_enodes": self.max_enodes, "max_seconds": self.max_seconds}
        limits = replace(limits, **{key: value for key, value in chosen.items() if value is not None})
        options = OptimizeOptions(
            target=self.target,
            cost_model=self.cost_model or DEFAULT_COST_MODEL,
            input_shapes=context.input_shapes,
            tolerance=context.tolerance,
            limits=limits,
        )
        result, report = optimize_model(model, options, base_dir=context.base_dir)
        fused = ", ".join(f"{op} {count}" for op, count in sorted(report.fusions.items())) or "none"
        notices = [f"{sum(report.nodes_before.values())} -> {sum(report.nodes_after.values())} nodes; fusions: {fused}"]
        return StepOutcome(result, report.verification, notices, details=report.to_dict())


@dataclass
class SparsifyStep(Step):
    """``sparsify``: unstructured sparsity; the keys are ``SparsifyOptions``' fields, the names of
    ``onnxsat sparsify``'s options (``data`` defaults to the pipeline's)."""

    kind: ClassVar[str] = "sparsify"
    options: Any

    @classmethod
    def build(cls, config: Mapping[str, Any], place: str) -> Step:
        from onnxsat.sparsity.sparsify import SparsifyOptions

        return cls(_options_step(SparsifyOptions, config, place, cls.kind))

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from onnxsat.sparsity.sparsify import sparsify_model

        options = replace(self.options, data=self.options.data or context.data, input_shapes=context.input_shapes)
        result, report = sparsify_model(model, options, base_dir=context.base_dir)
        notices = [f"{options.method}: {report.overall:.1%} of the prunable weights are zero"]
        if report.baseline is not None and report.accuracy is not None:
            before, after = report.baseline.top1, report.accuracy.top1
            notices.append(f"{report.baseline.kind} top-1 on {report.data}: {before:.2%} -> {after:.2%}")
        notices.extend(report.notes)
        return StepOutcome(result, report.verification, notices, rebase=True, details=_as_dict(report))


@dataclass
class PruneStep(Step):
    """``prune``: structured pruning; the keys are ``PruneOptions``' fields, the names of ``onnxsat
    prune``'s options (``data`` defaults to the pipeline's)."""

    kind: ClassVar[str] = "prune"
    options: Any

    @classmethod
    def build(cls, config: Mapping[str, Any], place: str) -> Step:
        from onnxsat.pruning.prune import PruneOptions

        return cls(_options_step(PruneOptions, config, place, cls.kind))

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from onnxsat.pruning.prune import prune_model

        options = replace(self.options, data=self.options.data or context.data, input_shapes=context.input_shapes)
        result, report = prune_model(model, options, base_dir=context.base_dir)
        params, macs = report.params, report.macs
        notices = [
            f"{report.mode} {options.criterion} at rate {options.rate:g}: params {params['pruned']:,} of "
            f"{params['original']:,}, MACs {macs['pruned']:,} of {macs['original']:,}",
            *report.notes,
        ]
        return StepOutcome(result, report.verification, notices, rebase=True, details=_as_dict(report))


@dataclass
class OrtStep(Step):
    """``ort``: ONNX Runtime's offline graph optimization at ``level`` basic, extended or all."""

    kind: ClassVar[str] = "ort"
    level: str = "extended"

    def check(self, place: str) -> None:
        from onnxsat.runtime.offline import LEVELS

        if self.level not in LEVELS:
            raise SettingsError(f"{place}.level: unknown {self.level!r}; choose from {', '.join(LEVELS)}")

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from onnxsat.runtime.offline import optimize_offline

        return _lossless(context, model, *optimize_offline(model, self.level, context.base_dir))


@dataclass
class PeepholeStep(Step):
    """``peephole``: a well-kept peephole optimizer (onnxscript's, or onnxoptimizer)."""

    kind: ClassVar[str] = "peephole"
    tool: str = "onnxscript"

    def check(self, place: str) -> None:
        from onnxsat.runtime.peephole import TOOLS

        if self.tool not in TOOLS:
            raise SettingsError(f"{place}.tool: unknown {self.tool!r}; choose from {', '.join(TOOLS)}")

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from onnxsat.runtime.peephole import peephole

        return _lossless(context, model, *peephole(model, self.tool, context.base_dir))


@dataclass
class OrtTransformersStep(Step):
    """``ort-transformers``: ONNX Runtime's transformers optimizer (Olive's OrtTransformersOptimization)."""

    kind: ClassVar[str] = "ort-transformers"
    model_type: str | None = None
    num_heads: int = 0
    hidden_size: int = 0
    opt_level: int = 0

    def check(self, place: str) -> None:
        from onnxsat.runtime.transformers import OPT_LEVELS

        if self.opt_level not in OPT_LEVELS:
            raise SettingsError(f"{place}.opt_level: must be one of {', '.join(map(str, OPT_LEVELS))}")

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from onnxsat.runtime.transformers import optimize_transformer

        optimized = optimize_transformer(
            model, self.model_type, self.num_heads, self.hidden_size, self.opt_level, context.base_dir
        )
        return _lossless(context, model, *optimized)


@dataclass
class SparseInitializersStep(Step):
    """``sparse-initializers``: weights at or above ``min_sparsity`` stored in COO form when smaller."""

    kind: ClassVar[str] = "sparse-initializers"
    min_sparsity: float = 0.5

    def check(self, place: str) -> None:
        if not 0.0 <= self.min_sparsity <= 1.0:
            raise SettingsError(f"{place}.min_sparsity: must be in [0, 1], got {self.min_sparsity:g}")

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        from onnxsat.sparsity.storage import to_sparse_initializers
        from onnxsat.surgery.graph_edit import copy_model

        result = copy_model(model)
        storage = to_sparse_initializers(result, [t.name for t in model.graph.initializer], self.min_sparsity)
        exact = Tolerance(rtol=0.0, atol=0.0)
        verification = verify(model, result, context.input_shapes, exact, base_dir=context.base_dir)
        notices = [f"{len(storage.moved)} initializers stored sparse, {len(storage.kept_dense)} kept dense"]
        notices.extend(f"{name} kept dense: {why}" for name, why in storage.kept_dense.items())
        return StepOutcome(result, verification, notices, details={"moved": storage.moved})


@dataclass
class VerifyStep(Step):
    """``verify``: compare the model with the reference (the input, or the last lossy pass's result)."""

    kind: ClassVar[str] = "verify"
    rtol: float | None = None
    atol: float | None = None

    def run(self, model: onnx.ModelProto, context: Context) -> StepOutcome:
        tolerance = Tolerance(
            rtol=context.tolerance.rtol if self.rtol is None else self.rtol,
            atol=context.tolerance.atol if self.atol is None else self.atol,
        )
        result = verify(context.reference, model, context.input_shapes, tolerance, base_dir=context.base_dir)
        worst = max((c.max_abs_diff for c in result.outputs), default=0.0)
        notices = [f"against {context.reference_name}: largest output difference {worst:.3g}"]
        return StepOutcome(model, result, notices)


def _as_dict(report: Any) -> dict[str, Any]:
    import json

    return json.loads(report.to_json())


STEPS: dict[str, type[Step]] = {
    step.kind: step
    for step in (
        SurgeriesStep,
        EqsatStep,
        SparsifyStep,
        PruneStep,
        OrtStep,
        PeepholeStep,
        OrtTransformersStep,
        SparseInitializersStep,
        VerifyStep,
    )
}
"""Pass type (the ``type`` key in the file) -> its dataclass."""
