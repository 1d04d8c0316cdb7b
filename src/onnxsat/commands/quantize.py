"""``onnxsat quantize``: the quantize pass from file to file."""

from __future__ import annotations

import argparse

from onnxsat.commands.arguments import add_input_options, add_model_arguments
from onnxsat.commands.printing import run_and_print
from onnxsat.html.quantize import quantize_page
from onnxsat.options import add_arguments, from_arguments
from onnxsat.passes.quantize import QuantizePass
from onnxsat.quantization.quantize import QuantizeOptions

ORDER = 25


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "quantize", help="INT8 / 4-bit quantization where it is measured to pay, optionally inside an accuracy budget"
    )
    add_model_arguments(parser, "the quantized model")
    add_arguments(parser, QuantizeOptions)
    add_input_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return run_and_print(args, QuantizePass(from_arguments(QuantizeOptions, args)), quantize_page)
