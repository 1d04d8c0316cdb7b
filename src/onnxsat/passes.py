"""What every model-writing command does around its transform: the input checked and never touched,
the output written atomically and only when the result verifies (unless forced), the report printed.

``sparsify`` and ``prune`` share it; each supplies the transform and its report type.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import onnx

from onnxsat import model_io
from onnxsat.errors import VerificationFailedError
from onnxsat.verification import VerificationResult


class PassReport(Protocol):
    output: str | None
    written: bool
    verification: VerificationResult | None

    def to_json(self) -> str: ...

    def to_table(self) -> str: ...


R = TypeVar("R", bound=PassReport)
Transform = Callable[[onnx.ModelProto, str, Path], tuple[onnx.ModelProto, R]]
"""(model, source path, folder of its external data) -> (result, report)."""


def run_pass(
    input_path: str | Path,
    output_path: str | Path,
    transform: Transform[R],
    what: str,
    report_path: str | Path | None = None,
    force: bool = False,
) -> R:
    """Apply ``transform`` to the model at ``input_path`` and write the result to ``output_path``.

    Raises :class:`VerificationFailedError` (with ``.report``) and writes nothing when the result fails
    verification, unless ``force``; ``what`` names the result in that message ("the pruned model").
    """
    model_io.check_input_path(input_path)
    target = model_io.check_output_path(input_path, output_path)
    if report_path is not None:
        model_io.check_report_path(report_path, input_path, output_path)
    model = model_io.load_model(input_path)
    base_dir = model_io.model_folder(input_path)
    model_io.check_data_path(target, model, base_dir)
    result, report = transform(model, str(input_path), base_dir)
    verified = report.verification is not None and report.verification.ok
    if verified or force:
        model_io.save_model(result, target, base_dir)
        report.output, report.written = str(target), True
    if report_path is not None:
        model_io.write_text_atomic(report.to_json() + "\n", report_path)
    if not verified and not force:
        error = VerificationFailedError(f"{what} failed verification; nothing was written")
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report


def print_report(run: Callable[[], PassReport]) -> int:
    """Run a pass for the command line: print its report (also when verification refused the result)
    and return the exit code, 8 when a failing result was written because of ``--force``."""
    try:
        report = run()
    except VerificationFailedError as error:
        print(error.report.to_table())  # type: ignore[attr-defined]
        raise
    print(report.to_table())
    if not report.verification or not report.verification.ok:
        print("onnxsat: warning: verification failed; the result was written because of --force", file=sys.stderr)
        return 8
    return 0
