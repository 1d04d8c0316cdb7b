"""``onnxsat optimize``: the eqsat pass from file to file, with optional side-by-side latency."""

from __future__ import annotations

import argparse
from pathlib import Path

from onnxsat.commands.arguments import DYNAMIC_DIMS_ARE_ONE, add_input_options, add_model_arguments, input_spec
from onnxsat.commands.printing import run_and_print
from onnxsat.eqsat.optimizer import OptimizeOptions
from onnxsat.html.optimize import optimize_page_from_files
from onnxsat.latency import compare_latency_levels
from onnxsat.options import add_arguments, from_arguments
from onnxsat.passes.eqsat import EqsatPass
from onnxsat.report import OptimizeReport
from onnxsat.verification import DEFAULT_RUN_TIMEOUT, Tolerance

ORDER = 10


def add_parser(commands: argparse._SubParsersAction) -> None:
    tolerance = Tolerance()
    parser = commands.add_parser("optimize", help="fuse operators by equality saturation, verify, write, report")
    add_model_arguments(parser, "the optimized model")
    add_arguments(parser, OptimizeOptions)
    add_input_options(parser, DYNAMIC_DIMS_ARE_ONE)
    parser.add_argument("--rtol", type=float, default=tolerance.rtol, help="relative tolerance of the verification")
    parser.add_argument("--atol", type=float, default=tolerance.atol, help="absolute tolerance of the verification")
    parser.add_argument(
        "--ort-rounding",
        type=float,
        default=tolerance.ort_rounding,
        metavar="FACTOR",
        help="an output beyond --rtol/--atol still passes within FACTOR times what ONNX Runtime's own "
        "optimizations change the original's output (default %(default)g; 0: off)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=DEFAULT_RUN_TIMEOUT,
        help="seconds each verification run under ONNX Runtime may take (default %(default)g)",
    )
    parser.add_argument(
        "--latency", action="store_true", help="also time original vs optimized side by side under ONNX Runtime"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    options = from_arguments(OptimizeOptions, args, run_timeout=args.run_timeout)

    def add_latency(report: OptimizeReport) -> None:
        if args.latency:
            report.latency = compare_latency_levels(Path(args.model), Path(args.output), input_spec(args))

    tolerance = Tolerance(rtol=args.rtol, atol=args.atol, ort_rounding=args.ort_rounding)
    step = EqsatPass(options)
    return run_and_print(args, step, optimize_page_from_files, tolerance, args.run_timeout, after=add_latency)
