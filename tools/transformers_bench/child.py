"""One child process, measured: its wall time and its own peak resident memory.

Why a child per tool: an optimizer's peak memory is only its own when nothing else lives in the process
(the benchmark's sessions, another tool's arena), and the kernel's accounting of one child (``os.wait4``)
gives exactly that. ``RUSAGE_CHILDREN`` would not: it keeps the largest peak of every child waited for so
far, so a small tool measured after a large one would inherit the large one's figure.
"""

from __future__ import annotations

import os
import subprocess
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


def run_child(command: Sequence[str], env: Mapping[str, str] | None = None) -> ChildRun:
    """Run ``command`` to its end and measure it (``ru_maxrss`` is in KiB on Linux)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(list(command), stdout=out, stderr=err, env=None if env is None else dict(env))
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return ChildRun(
            exit_code=child.returncode,
            seconds=seconds,
            peak_rss_bytes=usage.ru_maxrss * 1024,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )
