"""``onnxsat prune``: the prune pass from file to file, or the association trees with ``--show-trees``."""

from __future__ import annotations

import argparse
from pathlib import Path

from onnxsat.commands.arguments import add_input_options, add_report_arguments, input_spec
from onnxsat.commands.printing import run_and_print
from onnxsat.data.model_input import first_sample_inputs
from onnxsat.errors import SettingsError
from onnxsat.html.prune import prune_page
from onnxsat.latency import compare_latency
from onnxsat.model_io import load_model
from onnxsat.options import add_arguments, from_arguments
from onnxsat.passes.prune import PrunePass
from onnxsat.pruning.prune import PruneOptions, show_trees
from onnxsat.pruning.report import PruneReport

ORDER = 30


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "prune", help="remove whole channels (structured pruning along node association trees)"
    )
    parser.add_argument("model", help="input .onnx file (never modified)")
    parser.add_argument("-o", "--output", help="where to write the pruned model (not needed with --show-trees)")
    add_arguments(parser, PruneOptions)
    add_input_options(parser)
    parser.add_argument(
        "--latency", action="store_true", help="also time the original and the pruned model side by side (ORT all)"
    )
    parser.add_argument("--show-trees", action="store_true", help="print the node association trees and stop")
    parser.add_argument("--trees-image", metavar="PATH", help="with --show-trees: also draw them (PNG, SVG)")
    add_report_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.show_trees:
        print(show_trees(args.model, args.library, args.trees_image, args.normalize))
        return 0
    if args.output is None:
        raise SettingsError("give -o/--output for the pruned model (or --show-trees to only list the trees)")

    def add_latency(report: PruneReport) -> None:
        if args.latency:
            model = load_model(args.model)
            timed = first_sample_inputs(model, args.data, input_spec(args), mean=args.mean, std=args.std)
            report.latency = [compare_latency(Path(args.model), Path(args.output), timed)]

    return run_and_print(args, PrunePass(from_arguments(PruneOptions, args)), prune_page, after=add_latency)
