"""Argument types and options the subcommands share, so each parses and spells them the same way."""

from __future__ import annotations

import argparse

from onnxsat.inputs import InputSpec
from onnxsat.options import float_list, percent

__all__ = [
    "DYNAMIC_DIMS_ARE_ONE",
    "add_input_options",
    "add_model_arguments",
    "float_list",
    "input_spec",
    "percent",
]


DYNAMIC_DIMS_ARE_ONE = "shape for an input with dynamic dims (repeatable; default: dynamic dims are 1)"


def add_input_options(parser: argparse.ArgumentParser, help_text: str | None = None, feeds: bool = True) -> None:
    """``--inputs FEEDS.npz`` (values used as given; not with ``feeds=False``, for commands that choose
    the batch themselves) and ``--input-shape NAME:D1,D2,...`` (repeatable, sizes for the random ones);
    ``help_text`` says what a dynamic dim becomes without it. :func:`input_spec` reads them back."""
    if feeds:
        parser.add_argument(
            "--inputs",
            metavar="FEEDS.npz",
            help="named arrays (numpy .npz) used as the values of those inputs; the others are seeded random",
        )
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...", help=help_text)


def input_spec(args: argparse.Namespace) -> InputSpec:
    """The inputs ``--inputs`` and ``--input-shape`` describe."""
    return InputSpec.from_options(args.input_shape, getattr(args, "inputs", None))


def add_model_arguments(parser: argparse.ArgumentParser, result: str) -> None:
    """The input model, ``-o`` for ``result`` ("the optimized model"), and ``--report``/``--html``/``--force``
    that every model-writing command takes."""
    parser.add_argument("model", help="input .onnx file (never modified)")
    parser.add_argument("-o", "--output", required=True, help=f"where to write {result}")
    add_report_arguments(parser)


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--html", metavar="PATH", help="also write the report as one self-contained HTML page")
    parser.add_argument("--force", action="store_true", help="write the result even if verification fails")
