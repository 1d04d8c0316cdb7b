"""Candidates timed side by side with the original, on the machine compress runs on.

Every figure follows ``onnxsat.timing``'s protocol, the one the benchmarks use: ORT's optimizations all
on, the user's thread count and batch, one run of each model per round in interleaved rounds after a
warm-up, the median of per-round ratios and its bootstrap interval. Workers never time: they share cores
with each other (or are other machines), and the model will run here.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.latency import agreed_speedup
from onnxsat.timing import median_interval, ratios_to, time_rounds, timing_session

ROUNDS, WARMUP = 30, 5


@dataclass(frozen=True)
class Timed:
    speedup: float
    """Original's time / the candidate's: the median of per-round ratios, or the ratio of the median times
    printed beside it where that is lower (``latency.agreed_speedup``)."""
    latency_ms: float
    original_ms: float
    low: float = 0.0
    high: float = float("inf")
    """Bootstrap interval of ``speedup``: two candidates whose intervals overlap are not told apart."""


def machine() -> str:
    """Where figures were measured, for reports: host name, processor, core count."""
    return f"{platform.node() or 'this machine'} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


class SideBySide:
    """Times candidates against the original, each group of candidates in one interleaved run."""

    def __init__(self, original: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int) -> None:
        self.feeds, self.threads = dict(feeds), threads
        self.level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.original = timing_session(original, self.level, threads)

    def measure(self, models: Sequence[bytes]) -> list[Timed]:
        """Each model's speed against the original, all in one run of interleaved rounds."""
        if not models:
            return []
        candidates = [timing_session(onnx.load_from_string(m), self.level, self.threads) for m in models]
        sessions = [self.original, *candidates]
        feeds = self.feeds
        times = time_rounds([lambda s=s: s.run(None, feeds) for s in sessions], ROUNDS, WARMUP)
        original_ms = statistics.median(times[0]) * 1e3
        figures = []
        for own in times[1:]:
            ratios = ratios_to(times[0], own)
            low, high = median_interval(ratios)
            speedup = agreed_speedup(times[0], own)
            figures.append(Timed(speedup, statistics.median(own) * 1e3, original_ms, min(low, speedup), high))
        return figures
