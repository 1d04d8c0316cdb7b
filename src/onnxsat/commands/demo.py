"""``onnxsat demo``: the main jobs on built-in models, end to end."""

from __future__ import annotations

import argparse

from onnxsat.demo import run_demo

ORDER = 60


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="build a small CNN, optimize it and show the report and latency")
    parser.add_argument("--output-dir", default="out/demo", help="where the demo writes its models")
    parser.set_defaults(handler=lambda args: run_demo(args.output_dir))
