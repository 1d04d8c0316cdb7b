"""``onnxsat compress``: the compress pass from file to file, and its recipe written beside the result."""

from __future__ import annotations

import argparse
from typing import Any

from onnxsat.commands.arguments import add_input_options, add_model_arguments, input_spec
from onnxsat.commands.printing import run_and_print
from onnxsat.compression.compress import CompressOptions
from onnxsat.compression.recipe_file import recipe_paths, write_recipe
from onnxsat.html.compress import compress_page
from onnxsat.options import add_arguments, from_arguments
from onnxsat.passes.compress import CompressPass

ORDER = 27


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compress",
        help="the fastest model inside an accuracy budget: pruning, quantization and fusion searched together",
    )
    add_model_arguments(parser, "the compressed model")
    add_arguments(parser, CompressOptions)
    add_input_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    inputs = input_spec(args)  # read once: the run and its recipe need it

    def recipe(report: Any) -> None:
        if report.written:
            write_recipe(report, args.model, args.output, inputs)

    step = CompressPass(from_arguments(CompressOptions, args))
    recipes = {path: f"{args.output}'s recipe file" for path in recipe_paths(args.output)}  # checked before the search
    return run_and_print(args, step, compress_page, after=recipe, inputs=inputs, more_outputs=recipes)
