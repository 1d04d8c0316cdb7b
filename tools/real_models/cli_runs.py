"""Running ``onnxsat`` commands as a user would (a subprocess), and sorting what came back.

Every outcome is one of three: ``ok`` (exit 0, and the output written when the command writes one),
``refused`` (a non-zero exit with exactly one ``onnxsat: error: ...`` line on stderr and no output
file: the contract for an input ONNXSat cannot handle), or ``crash`` (anything else: a traceback, an
``internal error``, a usage error, a timeout, a missing output).

Which options a command takes is read from its ``--help``, so ``--inputs FEEDS.npz`` and
``--input-shape`` are passed to the commands that have them, on this branch or any later one.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tools.real_models.catalogue import RealModel

COMMANDS = ("optimize", "sparsify", "prune", "quantize", "profile", "show")
WRITES_MODEL = frozenset({"optimize", "sparsify", "prune", "quantize"})
EXTRA_ARGUMENTS: dict[str, tuple[str, ...]] = {"sparsify": ("--sparsity", "0.5")}
OUTPUT_SUFFIX = {"show": ".svg"}
TIMEOUT = 900.0
REFUSAL_PREFIX = "onnxsat: error:"


def onnxsat_command() -> list[str]:
    """``python -m onnxsat`` with this interpreter: the installed entry point's code, whatever PATH says."""
    return [sys.executable, "-m", "onnxsat"]


@cache
def command_options(command: str) -> frozenset[str]:
    """The long options ``onnxsat COMMAND --help`` lists."""
    done = subprocess.run([*onnxsat_command(), command, "--help"], capture_output=True, text=True, timeout=120)
    return frozenset(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))


@dataclass(frozen=True)
class CommandRun:
    command: str
    model: str
    argv: tuple[str, ...]
    exit_code: int | None
    """None when the run timed out."""
    seconds: float
    stdout: str
    stderr: str
    output: Path | None
    """The file the command was told to write (it may not exist)."""
    outcome: str = field(init=False)
    message: str = field(init=False)
    """The refusal line, or what went wrong for a crash; empty when ok."""

    def __post_init__(self) -> None:
        outcome, message = classify(self.exit_code, self.stderr, self.output, self.command in WRITES_MODEL)
        object.__setattr__(self, "outcome", outcome)
        object.__setattr__(self, "message", message)

    @property
    def wrote_model(self) -> bool:
        return self.outcome == "ok" and self.command in WRITES_MODEL


def classify(exit_code: int | None, stderr: str, output: Path | None, writes_model: bool) -> tuple[str, str]:
    """``(outcome, message)`` for a finished run; see the module docstring for the three outcomes."""
    lines = stderr.strip().splitlines()
    written = output is not None and output.exists()
    if exit_code is None:
        return "crash", f"timed out after {TIMEOUT:.0f} s"
    if "Traceback" in stderr:
        return "crash", next((line for line in reversed(lines) if line.strip()), "traceback")
    if exit_code == 0:
        if output is not None and not written:
            return "crash", "exit 0 but no output written"
        return "ok", ""
    if len(lines) == 1 and lines[0].startswith(REFUSAL_PREFIX) and not (writes_model and written):
        return "refused", lines[0]
    detail = lines[-1] if lines else "(nothing on stderr)"
    if written and writes_model:
        detail += " (and an output file was written)"
    return "crash", f"exit {exit_code}: {detail}"


def arguments(
    command: str, model: RealModel, model_file: Path, out_dir: Path, feeds: Path | None
) -> tuple[list[str], Path | None]:
    """The command line for ``command`` on ``model`` and the file it writes (None for ``profile``)."""
    options = command_options(command)
    argv = [command, str(model_file)]
    output = None
    if command != "profile":
        output = out_dir / f"{model.name}.{command}{OUTPUT_SUFFIX.get(command, '.onnx')}"
        argv += ["-o", str(output)]
    argv += EXTRA_ARGUMENTS.get(command, ())
    if "--input-shape" in options:
        argv += ["--input-shape", model.shape_option]
    if feeds is not None and "--inputs" in options:
        argv += ["--inputs", str(feeds)]
    return argv, output


def run_command(
    command: str,
    model: RealModel,
    model_file: Path,
    out_dir: Path,
    feeds: Path | None = None,
    extra: Sequence[str] = (),
) -> CommandRun:
    """``onnxsat COMMAND`` on ``model_file`` in a subprocess, writing into ``out_dir``; never raises for
    what the command does (a timeout is a crash)."""
    argv, output = arguments(command, model, model_file, out_dir, feeds)
    argv += list(extra)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        done = subprocess.run([*onnxsat_command(), *argv], capture_output=True, text=True, timeout=TIMEOUT)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code, stdout, stderr = None, _text(expired.stdout), _text(expired.stderr)
    return CommandRun(command, model.name, tuple(argv), code, time.perf_counter() - start, stdout, stderr, output)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
