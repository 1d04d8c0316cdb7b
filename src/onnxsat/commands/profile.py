"""``onnxsat profile MODEL [--compare OTHER]``: parse, load, profile, print."""

from __future__ import annotations

import argparse

from onnxsat.commands.arguments import add_input_options, input_spec
from onnxsat.errors import SettingsError
from onnxsat.model_io import load_runnable, model_folder
from onnxsat.profile.counting import profile_model
from onnxsat.profile.table import Comparison, comparison_json, comparison_table, profile_json, profile_table

DEFAULT_LAYERS = 20

ORDER = 80


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "profile",
        help="MACs, parameters and memory (weights + activations) per layer and in total; two models side by side",
    )
    parser.add_argument("model", help=".onnx file (never modified)")
    parser.add_argument(
        "--compare",
        metavar="OTHER",
        help="a second model (e.g. the optimized one): operators fused, MACs, params and memory side by side",
    )
    add_input_options(parser, "shape for an input with dynamic dims (repeatable; required for each such input)")
    parser.add_argument("--json", action="store_true", help="print JSON (every layer) instead of tables")
    parser.add_argument(
        "--layers",
        type=int,
        default=DEFAULT_LAYERS,
        metavar="N",
        help="tables show the N layers with the most MACs, in graph order (default %(default)d; 0: totals only)",
    )
    parser.set_defaults(handler=run_profile)


def run_profile(args: argparse.Namespace) -> int:

    if args.layers < 0:
        raise SettingsError(f"--layers must be 0 or more (got {args.layers})")
    inputs = input_spec(args)
    profile = profile_model(load_runnable(args.model)[0], inputs, base_dir=model_folder(args.model))
    if args.compare is None:
        print(profile_json(profile, args.model) if args.json else profile_table(profile, args.model, args.layers))
        return 0
    other = profile_model(load_runnable(args.compare)[0], inputs, base_dir=model_folder(args.compare))
    comparison = Comparison(profile, other)
    if args.json:
        print(comparison_json(comparison, args.model, args.compare))
    else:
        print(comparison_table(comparison, args.model, args.compare, args.layers))
    return 0
