"""The one runner: load, check, run passes, gate on verification, write atomically, report.

Every model-writing entry point goes through :func:`run`: ``onnxsat optimize|sparsify|prune|run``, the
Python API (``onnxsat.optimize(...)`` and friends) and pipeline files. The input file is only read. Nothing
is written until every pass has run and verified (unless forced): a failing pass stops the run, later
passes do not run, and the output path is untouched. The report goes to ``report_path`` as JSON also when
verification refused the result, since that is when it is read. :func:`run_file` runs one pass from a path or
an in-memory model, for the command line and the API alike (here, not in ``api``, which imports every pass).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Union

import onnx

from onnxsat import external_data, model_io
from onnxsat.core import Model, Pass, PassContext, PassResult, ReportBase, RunFacts
from onnxsat.data.model_input import data_input
from onnxsat.data.sources import carried_names
from onnxsat.errors import (
    GuessedSizesError,
    InvalidModelError,
    OnnxSatError,
    SettingsError,
    VerificationFailedError,
)
from onnxsat.inputs import InputSpec
from onnxsat.normal_form import densify_sparse_initializers, working_form
from onnxsat.verification import Tolerance, at_larger_sizes


@dataclass
class RunSettings:
    """What every pass of a run shares: the inputs the user gave and sizes for the random ones, the
    tolerance of lossless checks, the data for the passes that take it, and whether a failing result is
    written anyway."""

    inputs: InputSpec = field(default_factory=InputSpec)
    tolerance: Tolerance = field(default_factory=Tolerance)
    data: str | None = None
    force: bool = False
    run_timeout: float | None = None
    reads: tuple[str, ...] = ()
    """Other files the run reads, which no output may replace: the pipeline file."""


@dataclass
class StepRecord:
    place: str
    kind: str
    seconds: float
    ok: bool
    """The pass's own verification passed (for lossy passes: the result passes the checker and runs), and a
    budgeted pass's result is inside its budget on held-out data."""
    notices: list[str] = field(default_factory=list)
    verification: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    over_budget: str = ""


@dataclass
class PipelineReport(ReportBase):
    """A run of several passes: each pass's checks, notices and own report, in order."""

    sort_json_keys = False

    pipeline: str
    input: str
    output: str
    steps: list[StepRecord] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    """Passes skipped because an earlier one failed verification."""
    written: bool = False

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps) and not self.not_run

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_table(self) -> str:
        lines = [f"pipeline {self.pipeline}: {self.input} -> {self.output}"]
        for step in self.steps:
            status = "ok" if step.ok else ("OVER its budget" if step.over_budget else "FAILED verification")
            lines.append(f"{step.place:<11} {step.kind:<20} {step.seconds:>8.2f} s  {status}")
            lines.extend(f"    {notice}" for notice in step.notices)
            if step.over_budget:
                lines.append(f"    {step.over_budget}")
            elif not step.ok and step.verification:
                lines.append(f"    {_failure(step.verification)}")
        lines.extend(f"{place:<11} not run (an earlier pass failed)" for place in self.not_run)
        lines.append(f"written: {self.output}" if self.written else "nothing was written")
        return "\n".join(lines)


def _failure(verification: dict[str, Any]) -> str:
    if verification.get("error"):
        return str(verification["error"])
    bad = [o for o in verification.get("outputs", []) if not o["ok"]]
    return "; ".join(f"{o['name']}: max abs diff {o['max_abs_diff']:.3g}" for o in bad) or "failed"


def files_read(passes: Sequence[tuple[str, Pass]], settings: RunSettings) -> list[Path]:
    """The files a run reads besides the model: the given inputs' file, the data, each pass's own data."""
    named = [settings.inputs.source, settings.data, *settings.reads]
    found = [Path(name) for name in named if name is not None and Path(name).is_file()]
    return found + [path for _, step in passes for path in step.files_read()]


def run(
    input_path: str | Path,
    output_path: str | Path,
    passes: Sequence[tuple[str, Pass]],
    settings: RunSettings | None = None,
    report_path: str | Path | None = None,
    pipeline: str | None = None,
) -> Any:
    """Run ``passes`` ((place, pass) pairs, in order) on the model at ``input_path``; write ``output_path``.

    Returns the report: the single pass's own report when ``pipeline`` is None and there is one pass,
    else a :class:`PipelineReport` naming ``pipeline``. Raises :class:`VerificationFailedError` (with
    ``.report``) when a pass's result fails verification and nothing is forced; nothing is written then.
    """
    settings = settings or RunSettings()
    model_io.check_input_path(input_path)
    target = model_io.check_output_path(input_path, output_path)
    if report_path is not None:
        model_io.check_report_path(report_path, input_path, output_path)
    read = files_read(passes, settings)
    model_io.check_not_read(target, read, "output path")
    if report_path is not None:
        model_io.check_not_read(report_path, read, "report path")
    start = time.perf_counter()
    on_disk = bool(passes) and all(step.weights_on_disk for _, step in passes)
    proto, loaded = model_io.load_runnable(input_path, weights_on_disk=on_disk)
    load_seconds = time.perf_counter() - start
    base_dir = model_io.model_folder(input_path)
    if not (passes and passes[0][1].checks_input):
        model_io.check_model(proto)
    weights = sorted(external_data.external_paths(proto, base_dir))  # the input's own: replacing one loses it
    model_io.check_data_path(target, weights)
    read_from = model_io.file_states([input_path, *(path for path in weights if path.is_file())])
    model_io.check_not_read(target, weights, "output path")
    if report_path is not None:
        model_io.check_not_read(report_path, weights, "report path")
    proto, normalised, restated = working_form(proto, settings.inputs.given, in_place=True)
    normalised[:0] = loaded
    settings.inputs.check(proto)
    first, sizes_note = Model(proto, base_dir, str(input_path)), ""
    run_passes = partial(_run_passes, first, str(target), passes, restated=restated, pipeline=pipeline)
    try:
        model, steps, pipeline_report = run_passes(settings, normalised)
    except GuessedSizesError as error:
        sized, _, sizes_note = at_larger_sizes(proto, settings.inputs, error, base_dir, settings.run_timeout)
        settings = replace(settings, inputs=sized)
        model, steps, pipeline_report = run_passes(settings, normalised)
    ok = pipeline_report.ok
    single = steps[0][2].report if pipeline is None and len(passes) == 1 else None
    if single is not None:
        single.record_phase("load", load_seconds)
    if ok or settings.force:
        start = time.perf_counter()
        model_io.check_unchanged(read_from)
        model_io.save_model(model.proto, target, base_dir, inline_source=Path(input_path) if on_disk else None)
        pipeline_report.written = True
        for _, _, result in steps:
            if result.report is not None:
                result.report.output, result.report.written = str(target), True
        if single is not None:
            single.record_phase("save", time.perf_counter() - start)
    report = single if single is not None else pipeline_report
    sources = [settings.data, *(getattr(getattr(step, "options", None), "data", None) for _, step in passes)]
    data = next((source for source in sources if source not in (None, "random")), None)  # "random": no data
    report.record_run(_run_facts(proto, settings.inputs, normalised, data, sizes_note))
    if report_path is not None:
        model_io.write_text_atomic(report.to_json() + "\n", report_path)
    if not ok and not settings.force:
        place, step, result = next(failed for failed in steps if not failed[2].ok)
        if result.over_budget:
            where = "" if single is not None else f"{place} ({step.kind}): "
            message = (
                f"{where}{result.over_budget}; nothing was written (give more --data, a looser --max-drop, or "
                "--force to write it anyway)"
            )
        else:
            message = step.refusal() if single is not None else f"{place} failed verification; nothing was written"
        error = VerificationFailedError(message)
        error.report = report
        raise error
    return report


def _run_passes(
    model: Model,
    target: str,
    passes: Sequence[tuple[str, Pass]],
    settings: RunSettings,
    normalised: list[str],
    restated: tuple[str, ...],
    pipeline: str | None,
) -> tuple[Model, list[tuple[str, Pass, PassResult]], PipelineReport]:
    """Each pass in turn on the last one's result, until one fails (unless forced): the last model, each
    step run and the pipeline's record of them. ``normalised`` gains what densifying weights changed."""
    context = PassContext(
        inputs=settings.inputs,
        tolerance=settings.tolerance,
        data=settings.data,
        reference=model.proto,
        run_timeout=settings.run_timeout,
        restated_inputs=restated,
    )
    pipeline_report = PipelineReport(pipeline or "", model.source, target)
    steps: list[tuple[str, Pass, PassResult]] = []
    for index, (place, step) in enumerate(passes):
        begun = time.perf_counter()
        if step.dense_weights:  # lossless, so the model may change in place even where it is the reference
            normalised += densify_sparse_initializers(model.proto, model.base_dir)
        try:
            result = step.run(model, context)
        except OnnxSatError as error:
            if pipeline is None:
                raise
            raise type(error)(f"{place} ({step.kind}): {error}") from None
        steps.append((place, step, result))
        pipeline_report.steps.append(_record(place, step, result, time.perf_counter() - begun))
        model = model.with_proto(result.model)
        context.restated_inputs = ()  # later passes start from a result, not from the file
        if result.rebase:
            context.reference, context.reference_name = result.model, f"the result of {place} ({step.kind})"
        if not result.ok and not settings.force:
            pipeline_report.not_run = [later for later, _ in passes[index + 1 :]]
            break
    return model, steps, pipeline_report


def _run_facts(
    model: onnx.ModelProto, inputs: InputSpec, normalised: list[str], data: str | None, sizes: str = ""
) -> RunFacts:
    """What the report says about the run itself: which inputs were given, which fed from ``data`` (the
    ``--data`` a pass reads: its samples, and the rows its ``.npz`` carries for other inputs), which random,
    and how the loaded model was brought to normal form."""
    described = inputs.described(model)
    if data is None:
        return RunFacts(inputs=described, inputs_file=inputs.source, normal_form=normalised, sizes=sizes)
    carried = [name for name in carried_names(data, described["random"]) if name in described["random"]]
    try:
        fed = data_input(model, [*inputs.given, *carried]).name
    except SettingsError:  # no single data input: the pass said so already, or read none
        fed = None
    fed_data = [name for name in (fed, *carried) if name is not None]
    described["random"] = [name for name in described["random"] if name not in fed_data]
    if fed_data:
        described["data"] = fed_data
    return RunFacts(inputs=described, inputs_file=inputs.source, normal_form=normalised, sizes=sizes)


def _record(place: str, step: Pass, result: PassResult, seconds: float) -> StepRecord:
    verification = result.verification
    return StepRecord(
        place,
        step.kind,
        seconds,
        result.ok,
        result.notices,
        verification.to_dict() if verification is not None else None,
        result.details,
        result.over_budget,
    )


def run_one(
    step: Pass,
    input_path: str | Path,
    output_path: str | Path,
    settings: RunSettings | None = None,
    report_path: str | Path | None = None,
) -> Any:
    """One pass run from file to file; returns the pass's own report (see :func:`run`)."""
    return run(input_path, output_path, [(step.kind, step)], settings, report_path)


PathLike = str | Path
ModelLike = Union[PathLike, onnx.ModelProto]  # noqa: UP007  (a runtime alias)
"""A model file's path, or the model itself."""


def run_file(
    step: Pass,
    input_path: ModelLike,
    output_path: PathLike,
    report: PathLike | None = None,
    inputs: InputSpec | None = None,
    tolerance: Tolerance | None = None,
    force: bool = False,
    run_timeout: float | None = None,
) -> Any:
    """Run one pass from ``input_path`` to ``output_path``; its settings checked before anything is read."""
    options = getattr(step, "options", None)
    if options is not None:
        options.check()
        # settings an options object carries count unless given here
        inputs = inputs or getattr(options, "inputs", None)
        tolerance = tolerance or getattr(options, "tolerance", None)
        force = force or getattr(options, "force", False)
    settings = RunSettings(
        inputs=inputs or InputSpec(), tolerance=tolerance or Tolerance(), force=force, run_timeout=run_timeout
    )
    with model_file(input_path) as path:
        return run_one(step, path, output_path, settings, report)


@contextlib.contextmanager
def model_file(model: ModelLike) -> Iterator[PathLike]:
    """``model`` as a path: a path as it is; a ``ModelProto`` saved in a temporary folder, removed afterwards.

    A model whose weights still point to external data files cannot be saved elsewhere (the paths are relative
    to a folder it no longer knows): it is refused, with the two ways around it."""
    if not isinstance(model, onnx.ModelProto):
        yield model
        return
    with tempfile.TemporaryDirectory(prefix="onnxsat-api-") as folder:
        path = Path(folder) / "model.onnx"
        save_in_memory(model, path)
        yield path


def save_in_memory(model: onnx.ModelProto, path: Path) -> None:
    """``model`` written to ``path``: refused when its weights are in external data files it only names."""
    if external_data.has_external_data(model):
        raise InvalidModelError(
            "the in-memory model's weights are in external data files it only names; load it with its weights "
            "(onnx.load(path), which reads them) or pass the model's path instead"
        )
    model_io.save_model(model, path)
