"""One child process, measured: its wall time and its own peak resident memory.

Why a child per tool: an optimizer's peak memory is only its own when nothing else lives in the process
(the benchmark's sessions, another tool's arena), and the kernel's accounting of one child (``os.wait4``)
gives exactly that. ``RUSAGE_CHILDREN`` would not: it keeps the largest peak of every child waited for so
far, so a small tool measured after a large one would inherit the large one's figure.

Why through a small launcher (this file run as a script): Linux carries the memory of the process a
child was forked from into the child's peak (at exec, the replaced address space's high-water mark is
kept; with vfork, which subprocess uses, that is the parent's own peak). Forked from the benchmark,
whose timing sessions hold gigabytes, every child reported the benchmark's peak instead of its own.
The launcher is a fresh interpreter of a few MB that imports only the standard library; the measured
command is forked from it, so its peak starts from the launcher's size, not the benchmark's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildRun:
    """What one child did: exit code, wall seconds, peak RSS in bytes, and its output."""

    exit_code: int
    seconds: float
    peak_rss_bytes: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def failure(self) -> str:
        """One line saying how it failed: the last line of its stderr, or the exit code."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return f"exit {self.exit_code}" + (f": {lines[-1].strip()[:200]}" if lines else "")


def measure(command: Sequence[str]) -> dict[str, float | int]:
    """Run ``command`` (output inherited) and return its exit code, seconds and peak RSS (KiB on Linux)."""
    start = time.perf_counter()
    child = subprocess.Popen(list(command))
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "seconds": seconds,
        "peak_rss_bytes": usage.ru_maxrss * 1024,
    }


def run_child(command: Sequence[str], env: Mapping[str, str] | None = None) -> ChildRun:
    """Run ``command`` to its end through the launcher and measure it."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as work:
        figures = os.path.join(work, "figures.json")
        launcher = [sys.executable, "-S", os.path.abspath(__file__), figures, *command]
        exit_code = subprocess.run(launcher, stdout=out, stderr=err, env=None if env is None else dict(env)).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        if not os.path.exists(figures):
            return ChildRun(exit_code or 1, 0.0, 0, stdout, stderr or "the launcher wrote no figures")
        with open(figures) as stream:
            measured = json.load(stream)
    return ChildRun(int(measured["exit_code"]), measured["seconds"], int(measured["peak_rss_bytes"]), stdout, stderr)


if __name__ == "__main__":
    with open(sys.argv[1], "w") as stream:
        json.dump(measure(sys.argv[2:]), stream)
