"""Running a pass for the command line: check the report paths first, run through the runner, then
print the report and write its JSON and HTML forms, also when verification refused the result or a search
found nothing to write."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from onnxsat.commands.arguments import input_spec
from onnxsat.core import Pass
from onnxsat.errors import OnnxSatError, VerificationFailedError
from onnxsat.extras import require
from onnxsat.html import check_html_path, write_page
from onnxsat.inputs import InputSpec
from onnxsat.model_io import check_not_read, check_output_path, check_report_path, weight_files, write_text_atomic
from onnxsat.report import LatencyComparison
from onnxsat.runner import RunSettings, files_read, run_file
from onnxsat.verification import Tolerance

PageBuilder = Callable[[Any], Any]


def run_and_print(
    args: argparse.Namespace,
    step: Pass,
    page: PageBuilder | None = None,
    tolerance: Tolerance | None = None,
    run_timeout: float | None = None,
    after: Callable[[Any], None] | None = None,
    inputs: InputSpec | None = None,
    more_outputs: Mapping[Path, str] | None = None,
) -> int:
    """Run ``step`` from ``args.model`` to ``args.output`` and print its report; ``page`` builds the
    ``--html`` page from the report, ``after`` adds to a written report before it is printed (latency);
    ``inputs``: the spec ``args`` give, when the caller read it already (a feeds file is read once);
    ``more_outputs``: other files ``after`` writes (compress's recipe), each with what to call it in a
    refusal, checked before any work as the report and the page are.

    Returns 8 when a failing result (or one over its budget on held-out data) was written because of ``--force``.
    """
    inputs = inputs if inputs is not None else input_spec(args)
    written = [path for path in (args.report, args.html, *(more_outputs or {})) if path]
    read = files_read([("", step)], RunSettings(inputs=inputs)) if written else []
    read += weight_files(args.model, written)  # the input's own external data
    for path, what in (more_outputs or {}).items():
        check_output_path(args.model, path)
        check_not_read(path, read, what)
    if args.report:
        check_report_path(args.report, args.model, args.output)
        check_not_read(args.report, read, "report path")
    if args.html:
        check_html_path(args.html, [args.model], [args.output, args.report])
        check_not_read(args.html, read, "--html path")
        require("matplotlib.figure", "--html pages")  # before any work, not after the model is written
    try:
        report = run_file(step, args.model, args.output, None, inputs, tolerance, args.force, run_timeout)
    except OnnxSatError as error:
        if error.report is not None:
            _emit(args, error.report, page)
        raise
    if after is not None:
        after(report)
    _emit(args, report, page)
    held = getattr(report, "held_out", None)
    if held is not None and held.refuted:
        message = f"held-out drop {held.drop:.2%} is over the budget; the result was written because of --force"
        print(f"onnxsat: warning: {message}", file=sys.stderr)
    elif held is not None and not held.within_budget:
        message = (
            f"held-out drop {held.drop:.2%} is over the budget, but within the sampling error of its "
            f"{held.score.samples} samples: they can neither confirm nor refute it (give more --data)"
        )
        print(f"onnxsat: warning: {message}", file=sys.stderr)
    slower = _slower(getattr(report, "latency", None))
    if slower:
        print(f"onnxsat: warning: {slower}", file=sys.stderr)
    collapsed = getattr(report, "collapsed", None)
    if collapsed:
        print(f"onnxsat: warning: {collapsed}", file=sys.stderr)
    if not report.verification or not report.verification.ok:
        print("onnxsat: warning: verification failed; the result was written because of --force", file=sys.stderr)
        return VerificationFailedError.exit_code
    return VerificationFailedError.exit_code if held is not None and held.refuted else 0


def _emit(args: argparse.Namespace, report: Any, page: PageBuilder | None) -> None:
    print(report.to_text())
    if args.report:
        write_text_atomic(report.to_json() + "\n", args.report)
    if args.html and page is not None:
        write_page(page(report), args.html)


SLOWER = 0.97
"""A measured speedup under this is said on stderr: side-by-side ratios vary by 1-2% on a quiet machine."""


def _slower(latency: object) -> str:
    """What to warn of when the written result was timed (``--latency``) slower than the original under ORT's
    full optimizations: a pruned depthwise net can run slower with fewer channels, and the report's figure
    alone is easy to miss."""
    if not isinstance(latency, list):
        return ""
    for comparison in latency:
        full = isinstance(comparison, LatencyComparison) and comparison.ort_level == "ORT_ENABLE_ALL"
        if full and comparison.speedup < SLOWER:
            return (
                f"the result runs slower than the original: {comparison.speedup:.2f}x under ORT's full "
                f"optimizations ({comparison.threads} thread); it was written as asked"
            )
    return ""
