"""``onnxsat run PIPELINE``: the command-line face of pipeline files."""

from __future__ import annotations

import argparse
import sys

from onnxsat.errors import VerificationFailedError
from onnxsat.passes import catalogue
from onnxsat.pipelines.file import read_pipeline, run_pipeline

ORDER = 40


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "run",
        help="run a pipeline of passes described in a JSON or YAML file",
        description=f"Run the passes a pipeline file lists ({', '.join(catalogue())}). The whole file is "
        "checked before anything runs; the output is written once, at the end, and only if every pass verified.",
    )
    parser.add_argument("pipeline", help="pipeline file (.json, .yaml or .yml)")
    parser.add_argument("--check", action="store_true", help="only check the file; run nothing")
    parser.add_argument("-i", "--input", help="input model (overrides the file's input_model)")
    parser.add_argument("-o", "--output", help="output model (overrides the file's output_model)")
    parser.add_argument("--report", metavar="PATH", help="also write the pipeline report as JSON")
    parser.add_argument("--force", action="store_true", help="write the result even if a pass fails verification")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    pipeline = read_pipeline(args.pipeline, args.input, args.output, args.report)
    if args.check:
        kinds = ", ".join(step.kind for _, step in pipeline.steps)
        paths = f"{pipeline.input_path} -> {pipeline.output_path}"
        print(f"{pipeline.source}: {len(pipeline.steps)} passes ({kinds}); {paths}")
        return 0
    try:
        report = run_pipeline(pipeline, args.force)
    except VerificationFailedError as error:
        print(error.report.to_text())
        raise
    print(report.to_text())
    if not report.ok:
        print(
            "onnxsat: warning: a pass failed verification; the result was written because of --force", file=sys.stderr
        )
        return VerificationFailedError.exit_code
    return 0
