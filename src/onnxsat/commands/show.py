"""``onnxsat show`` and ``onnxsat show-egraph``: pictures of a model's graph and of its e-graph."""

from __future__ import annotations

import argparse

from onnxsat.show.command import add_show_egraph_parser, add_show_parser

ORDER = 100


def add_parser(commands: argparse._SubParsersAction) -> None:
    add_show_parser(commands)
    add_show_egraph_parser(commands)
