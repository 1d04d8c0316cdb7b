"""Candidates timed side by side with the original, on the machine compress runs on.

Every figure is a median of per-round ratios over interleaved rounds (``onnxsat.timing``) with ORT's
optimizations all on, the user's thread count and batch. Workers never time: they share cores with each
other (or are other machines), and the model will run here.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.timing import ratios_to, time_rounds, timing_session

ROUNDS, WARMUP = 15, 3
MIN_SECONDS_PER_RUNNER = 0.3
"""A round of a fast model repeats its runs until it takes about this long, so timer resolution and
Python overhead do not decide the ratio of sub-millisecond models."""


@dataclass(frozen=True)
class Timed:
    speedup: float
    """Original's time / the candidate's: median of per-round ratios."""
    latency_ms: float
    original_ms: float


def machine() -> str:
    """Where figures were measured, for reports: host name, processor, core count."""
    return f"{platform.node() or 'this machine'} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


class SideBySide:
    """Times candidates against the original, each group of candidates in one interleaved run."""

    def __init__(self, original: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int) -> None:
        self.feeds, self.threads = dict(feeds), threads
        level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.level = level
        self.original = timing_session(original, level, threads)
        self.repeats = self._repeats(self.original)

    def _repeats(self, session: ort.InferenceSession) -> int:
        session.run(None, self.feeds)
        start = time.perf_counter()
        session.run(None, self.feeds)
        once = max(time.perf_counter() - start, 1e-6)
        return max(1, min(200, int(MIN_SECONDS_PER_RUNNER / 10 / once)))

    def measure(self, models: Sequence[bytes]) -> list[Timed]:
        """Each model's speed against the original, all in one run of interleaved rounds."""
        if not models:
            return []
        sessions = [
            self.original,
            *(timing_session(onnx.load_from_string(m), self.level, self.threads) for m in models),
        ]
        repeats, feeds = self.repeats, self.feeds

        def runner(session: ort.InferenceSession):  # type: ignore[no-untyped-def]
            return lambda: [session.run(None, feeds) for _ in range(repeats)]

        times = time_rounds([runner(s) for s in sessions], ROUNDS, WARMUP)
        original_ms = statistics.median(times[0]) * 1e3 / repeats
        return [
            Timed(statistics.median(ratios_to(times[0], own)), statistics.median(own) * 1e3 / repeats, original_ms)
            for own in times[1:]
        ]
