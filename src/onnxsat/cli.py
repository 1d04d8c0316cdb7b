"""The ``onnxsat`` executable: build the parser from ``onnxsat.commands``, run the chosen command, and turn
every user error into one line on stderr and a distinct exit code (``errors.py``); ``--debug`` shows the
traceback instead."""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from onnxsat.errors import OnnxSatError, OutOfMemoryError
from onnxsat.runtime.logs import QUIET, WARNINGS, set_runtime_logs

PACKAGE = Path(__file__).resolve().parent
_SHOW_WARNING = warnings.showwarning

DESCRIPTION = (
    "Make a pre-trained ONNX model smaller and faster without retraining, and prove it did no harm: "
    "every result is checked against the original before it is written."
)


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, as every other error is: the block of usage argparse prints before it buries
    the line that says what was wrong (14 lines for ``quantize``). Subcommands inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help shows the usage)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """Options no parser knows are reported by the command they were given to (``onnxsat optimize ...``),
        whose ``--help`` lists the options that exist, not by the top level's."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            _chosen(self, parsed).error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest subcommand's parser the parsed arguments name (``onnxsat zoo build`` -> zoo build's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(parsed, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], parsed)
    return parser


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given the arguments it will parse, of the one they name (all when they
    name none: ``--help``, a typo)."""
    parser = OneLineParser(prog="onnxsat", description=DESCRIPTION)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    from onnxsat.commands import add_all  # the commands' modules: imported here, where an interrupt is one line

    wanted = next((word for word in argv or () if not word.startswith("-")), None)
    add_all(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), wanted)
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


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``docker stop``, a batch system's stop), raised where the process is, as Ctrl-C is: the
    same cleanups run (temporary files, the workers of a search), then one line and exit 143."""


def main(argv: Sequence[str] | None = None) -> int:
    previous = _on_terminate(_terminated)
    try:
        return _run(argv)
    finally:
        if previous is not None:
            _on_terminate(previous)


def _terminated(signum: int, frame: object) -> None:
    raise Terminated()


def _on_terminate(handler: Any) -> Any:
    """Set the SIGTERM handler, returning the one it replaces (None off the main thread, where Python allows
    no handler: an embedding program keeps its own)."""
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


def _run(argv: Sequence[str] | None) -> int:
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        return _handled(argv)


def _warning_line(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """ONNXSat's own warnings (a cache it cannot write) as the one line every other warning is; others as Python
    shows them."""
    if Path(filename).resolve().is_relative_to(PACKAGE):
        print(f"onnxsat: warning: {message}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


def _handled(argv: Sequence[str] | None) -> int:
    debug = False
    try:
        try:
            argv = sys.argv[1:] if argv is None else list(argv)
            args = build_parser(argv).parse_args(argv)  # in the handlers: a Ctrl-C while commands import is one line
            debug = args.debug
            # ORT's own log lines stay off stderr (a model whose declared output shape is wrong gets a coloured
            # warning on every run, 32 in one calibration by ORT's quantizer); --debug shows its warnings
            set_runtime_logs(WARNINGS if debug else QUIET)
            return int(args.handler(args))
        except MemoryError:
            raise OutOfMemoryError(
                "ran out of memory; the model or the inputs made to verify it are too large for this machine "
                "(a smaller --input-shape helps when dynamic dims are the cause)"
            ) from None
    except OnnxSatError as error:
        if debug:  # the traceback, and the exit code scripts branch on all the same
            traceback.print_exc()
        else:
            print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:  # output piped into `head` and closed: not an error of ours
        sys.stderr.close()
        return 141
    except Terminated:
        print("onnxsat: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("onnxsat: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            traceback.print_exc()
            return 1
        print(
            f"onnxsat: internal error: {type(error).__name__}: {error} (rerun with --debug for details)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
