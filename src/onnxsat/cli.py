"""The ``onnxsat`` executable: build the parser from ``onnxsat.commands``, run the chosen command, and turn
every user error into one line on stderr and a distinct exit code (``errors.py``); ``--debug`` shows the
traceback instead."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onnxsat.commands import add_all
from onnxsat.errors import OnnxSatError, OutOfMemoryError
from onnxsat.runtime.logs import QUIET, WARNINGS, set_runtime_logs

DESCRIPTION = (
    "Make a pre-trained ONNX model smaller and faster without retraining, and prove it did no harm: "
    "every result is checked against the original before it is written."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxsat", description=DESCRIPTION)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    add_all(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    _debug_anywhere(parser)
    return parser


def _debug_anywhere(parser: argparse.ArgumentParser) -> None:
    """``--debug`` after the command too (``onnxsat prune M -o O --debug``), where an error's hint makes
    people put it: every subcommand, at any depth, takes it without overriding the top-level flag."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
                _debug_anywhere(command)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # ORT's own log lines stay off stderr (a model whose declared output shape is wrong gets a coloured
    # warning on every run, 32 in one calibration by ORT's quantizer); --debug shows its warnings
    set_runtime_logs(WARNINGS if args.debug else QUIET)
    try:
        try:
            return int(args.handler(args))
        except MemoryError:
            raise OutOfMemoryError(
                "ran out of memory; the model or the inputs made to verify it are too large for this machine "
                "(a smaller --input-shape helps when dynamic dims are the cause)"
            ) from None
    except OnnxSatError as error:
        if args.debug:
            raise
        print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:  # output piped into `head` and closed: not an error of ours
        sys.stderr.close()
        return 141
    except KeyboardInterrupt:
        print("onnxsat: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if args.debug:
            raise
        print(
            f"onnxsat: internal error: {type(error).__name__}: {error} (rerun with --debug for details)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
