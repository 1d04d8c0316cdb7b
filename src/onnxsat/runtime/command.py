"""``onnxsat tune``: the argument parser and handler, for ``cli.py`` to register.

``cli.build_parser`` calls ``add_tune_parser(commands)``. The handler checks every argument (model,
shapes, counts, output path) before measuring anything, prints the ranking, and writes the best
settings as JSON atomically, so a failed or interrupted run leaves no half-written file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from onnxsat.commands.arguments import DYNAMIC_DIMS_ARE_ONE, add_input_shape_option
from onnxsat.runtime.tune import DEFAULT_ROUNDS, DEFAULT_WARMUP


def add_tune_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "tune",
        help="measure ONNX Runtime session settings (threads, execution mode, level, providers) side by side",
    )
    parser.add_argument("model", help="input .onnx file (never modified)")
    add_input_shape_option(parser, DYNAMIC_DIMS_ARE_ONE)
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
    from onnxsat.errors import SettingsError
    from onnxsat.model_io import check_input_path, check_output_path, write_text_atomic
    from onnxsat.runtime.tune import DEFAULT_LABEL, SessionSettings, candidate_grid, tune
    from onnxsat.verification import parse_input_shapes

    if args.rounds < 1 or args.warmup < 0:
        raise SettingsError(f"--rounds must be at least 1 and --warmup at least 0 (got {args.rounds}, {args.warmup})")
    shapes = parse_input_shapes(args.input_shape)
    check_input_path(args.model)
    if args.output is not None:
        check_output_path(args.model, args.output)
    grid = candidate_grid(args.full)
    result = tune(args.model, shapes, args.rounds, args.warmup, grid=grid)
    print(f"onnxsat tune {Path(args.model).name}: inputs {result.inputs}")
    print(
        f"{len(grid)} candidates and {DEFAULT_LABEL} ({SessionSettings().describe()}; thread count 0: ORT's choice), "
        f"{result.rounds} timed rounds after {result.warmup} warm-up rounds, spinning off in every session"
    )
    print(f'speedup: median over rounds of ("{DEFAULT_LABEL}" time / candidate time)')
    print(result.table())
    best = result.best
    print(f"best: {best.describe()}")
    if args.output is not None:
        write_text_atomic(best.to_json() + "\n", args.output)
        print(f"wrote {args.output}")
    return 0
