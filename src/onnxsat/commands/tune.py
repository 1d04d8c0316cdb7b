"""``onnxsat tune``: ONNX Runtime session settings (threads, execution mode, level, providers) measured
side by side; the best are written as JSON atomically, so a failed or interrupted run leaves no half-written file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from onnxsat.commands.arguments import DYNAMIC_DIMS_ARE_ONE, add_input_options, input_spec
from onnxsat.errors import SettingsError
from onnxsat.model_io import check_input_path, check_output_path, write_text_atomic
from onnxsat.runtime.tune import (
    DEFAULT_LABEL,
    DEFAULT_ROUNDS,
    DEFAULT_WARMUP,
    SessionSettings,
    candidate_grid,
    tune,
)

ORDER = 50


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "tune",
        help="measure ONNX Runtime session settings (threads, execution mode, level, providers) side by side",
    )
    parser.add_argument("model", help="input .onnx file (never modified)")
    add_input_options(parser, DYNAMIC_DIMS_ARE_ONE)
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help="timed rounds; each runs every candidate once (default %(default)d)",
    )
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed rounds first (default %(default)d)")
    parser.add_argument(
        "--full",
        action="store_true",
        help="the full grid: level disabled too, every intra-op and inter-op thread count up to the cores",
    )
    parser.add_argument("-o", "--output", metavar="JSON", help="write the best settings here")
    parser.set_defaults(handler=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.warmup < 0:
        raise SettingsError(f"--rounds must be at least 1 and --warmup at least 0 (got {args.rounds}, {args.warmup})")
    inputs = input_spec(args)
    check_input_path(args.model)
    if args.output is not None:
        check_output_path(args.model, args.output)
    grid = candidate_grid(args.full)
    result = tune(args.model, inputs, args.rounds, args.warmup, grid=grid)
    print(f"onnxsat tune {Path(args.model).name}: inputs {result.inputs}")
    print(
        f"{len(grid)} candidates and {DEFAULT_LABEL} ({SessionSettings().describe()}; thread count 0: ORT's choice), "
        f"{result.rounds} timed rounds after {result.warmup} warm-up rounds, spinning off in every session"
    )
    print(f'speedup: median over rounds of ("{DEFAULT_LABEL}" time / candidate time)')
    print(result.table())
    best = result.best
    settled = "" if best != result.default.settings else f" ({DEFAULT_LABEL}: no candidate is faster beyond noise)"
    print(f"best: {best.describe()}{settled}")
    if args.output is not None:
        write_text_atomic(best.to_json() + "\n", args.output)
        print(f"wrote {args.output}")
    return 0
