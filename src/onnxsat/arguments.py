"""Argument types and options the subcommands share, so each parses and spells them the same way."""

from __future__ import annotations

import argparse


def percent(text: str) -> float:
    """``1%`` or ``0.01`` -> 0.01."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction or percentage: {text!r}") from None


def float_list(text: str) -> list[float]:
    """``0.5,0.4,0.3`` -> [0.5, 0.4, 0.3]."""
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


DYNAMIC_DIMS_ARE_ONE = "shape for an input with dynamic dims (repeatable; default: dynamic dims are 1)"


def add_input_shape_option(
    parser: argparse.ArgumentParser, help_text: str | None = None, metavar: str = "NAME:D1,D2,..."
) -> None:
    """``--input-shape NAME:D1,D2,...``, repeatable, collected as a list of specs for
    ``verify.parse_input_shapes``; ``help_text`` says what a dynamic dim becomes without it."""
    parser.add_argument("--input-shape", action="append", default=[], metavar=metavar, help=help_text)
