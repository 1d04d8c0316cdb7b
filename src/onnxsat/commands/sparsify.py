"""``onnxsat sparsify``: the sparsify pass from file to file."""

from __future__ import annotations

import argparse

from onnxsat.commands.arguments import add_input_options, add_model_arguments
from onnxsat.commands.printing import run_and_print
from onnxsat.html.sparsify import sparsify_page
from onnxsat.options import add_arguments, from_arguments
from onnxsat.passes.sparsify import SparsifyPass
from onnxsat.sparsity.sparsify import SparsifyOptions

ORDER = 20


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sparsify", help="zero small weights (unstructured), optionally inside an accuracy budget"
    )
    add_model_arguments(parser, "the sparsified model")
    add_arguments(parser, SparsifyOptions)
    add_input_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return run_and_print(args, SparsifyPass(from_arguments(SparsifyOptions, args)), sparsify_page)
