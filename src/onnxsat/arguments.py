"""Argument types the subcommands share (argparse ``type=`` callables), so each parses the same way."""

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
