"""Running a checked pipeline: passes in order, one report, the output written once at the end.

Nothing is written until every pass has run and verified (unless ``force``): a failing pass stops the
pipeline, the report says which pass failed and which did not run, and the output path is untouched.
The output is written atomically, like every model ONNXSat writes.
"""

from __future__ import annotations

import time
from pathlib import Path

from onnxsat import model_io
from onnxsat.errors import OnnxSatError, VerificationFailedError
from onnxsat.pipelines.context import Context
from onnxsat.pipelines.file import Pipeline
from onnxsat.pipelines.report import PipelineReport, StepRecord
from onnxsat.verification import Tolerance


def run_pipeline(pipeline: Pipeline, force: bool = False) -> PipelineReport:
    """Run ``pipeline`` and write its output; ``force`` (or the file's ``force``) writes a failing result.

    Raises :class:`VerificationFailedError` (with ``.report``) when a pass fails and nothing is forced.
    """
    settings = pipeline.settings
    force = force or settings.force
    model = model_io.load_model(pipeline.input_path)
    model_io.check_model(model)
    base_dir = model_io.model_folder(pipeline.input_path)
    model_io.check_data_path(pipeline.output_path, model, base_dir)
    context = Context(
        base_dir=base_dir,
        input_shapes={name: list(dims) for name, dims in settings.input_shapes.items()},
        tolerance=Tolerance(settings.rtol, settings.atol),
        data=settings.data,
        reference=model,
    )
    report = PipelineReport(str(pipeline.source), str(pipeline.input_path), str(pipeline.output_path))
    for index, (place, step) in enumerate(pipeline.steps):
        start = time.perf_counter()
        try:
            outcome = step.run(model, context)
        except OnnxSatError as error:
            raise type(error)(f"{place} ({step.kind}): {error}") from None
        verification = outcome.verification
        ok = verification is not None and verification.ok
        report.steps.append(
            StepRecord(
                place,
                step.kind,
                time.perf_counter() - start,
                ok,
                outcome.notices,
                verification.to_dict() if verification is not None else None,
                outcome.details,
            )
        )
        model = outcome.model
        if outcome.rebase:
            context.reference, context.reference_name = model, f"the result of {place} ({step.kind})"
        if not ok and not force:
            report.not_run = [later for later, _ in pipeline.steps[index + 1 :]]
            break
    if report.ok or force:
        model_io.save_model(model, pipeline.output_path, base_dir)
        report.written = True
    if pipeline.report_path is not None:
        model_io.write_text_atomic(report.to_json() + "\n", pipeline.report_path)
    if not report.ok and not force:
        failed = next(step.place for step in report.steps if not step.ok)
        error = VerificationFailedError(f"{failed} failed verification; nothing was written")
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report


def run_pipeline_file(
    path: str | Path,
    input_model: str | Path | None = None,
    output_model: str | Path | None = None,
    report: str | Path | None = None,
    force: bool = False,
) -> PipelineReport:
    """Read, check and run the pipeline file at ``path`` (the other arguments override its paths)."""
    from onnxsat.pipelines.file import read_pipeline

    return run_pipeline(read_pipeline(path, input_model, output_model, report), force)
