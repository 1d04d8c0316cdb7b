"""Argument types and options the subcommands share, so each parses and spells them the same way."""

from __future__ import annotations

import argparse

from onnxsat.options import float_list, percent

__all__ = ["DYNAMIC_DIMS_ARE_ONE", "add_input_shape_option", "add_model_arguments", "float_list", "percent"]


DYNAMIC_DIMS_ARE_ONE = "shape for an input with dynamic dims (repeatable; default: dynamic dims are 1)"


def add_input_shape_option(
    parser: argparse.ArgumentParser, help_text: str | None = None, metavar: str = "NAME:D1,D2,..."
) -> None:
    """``--input-shape NAME:D1,D2,...``, repeatable, collected as a list of specs for
    ``verify.parse_input_shapes``; ``help_text`` says what a dynamic dim becomes without it."""
    parser.add_argument("--input-shape", action="append", default=[], metavar=metavar, help=help_text)


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
