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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.latency import agreed_speedup
from onnxsat.timing import (
    LEAST_ROUNDS,
    LEAST_WARMUP,
    WARMUP_SHARE,
    median_interval,
    ratios_to,
    time_rounds,
    timing_session,
)

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

    def __init__(
        self, original: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int, seconds: float | None = None
    ) -> None:
        """``seconds``: the most one run of rounds may take (``time_rounds``), beyond its least rounds."""
        self.feeds, self.threads, self.seconds = dict(feeds), threads, seconds
        self.level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.original = timing_session(original, self.level, threads)
        self.original.run(None, self.feeds)  # the first run allocates and pre-packs
        clock = time.perf_counter()
        self.original.run(None, self.feeds)
        self.run_seconds = time.perf_counter() - clock
        """One run of the original: what foretells a timing's length before any has run."""

    def expected_seconds(self) -> float:
        """How long timing one candidate beside the original will take, if it runs as fast as the original: every
        round, or under a limit, the limit (with the round under way when it passes) or the least rounds."""
        whole = (ROUNDS + WARMUP) * 2 * self.run_seconds
        if self.seconds is None:
            return whole
        least = (LEAST_ROUNDS + LEAST_WARMUP) * 2 * self.run_seconds
        return min(whole, max(least, self.run_limit() + 2 * self.run_seconds))

    def run_limit(self) -> float | None:
        """The most one run takes however many models it times (beyond its least rounds), or None."""
        return None if self.seconds is None else self.seconds * (1 + WARMUP_SHARE)

    def measure(self, models: Sequence[bytes]) -> list[Timed]:
        """Each model's speed against the original, all in one run of interleaved rounds."""
        if not models:
            return []
        candidates = [timing_session(onnx.load_from_string(m), self.level, self.threads) for m in models]
        sessions = [self.original, *candidates]
        feeds = self.feeds
        times = time_rounds([lambda s=s: s.run(None, feeds) for s in sessions], ROUNDS, WARMUP, seconds=self.seconds)
        original_ms = statistics.median(times[0]) * 1e3
        figures = []
        for own in times[1:]:
            ratios = ratios_to(times[0], own)
            low, high = median_interval(ratios)
            speedup = agreed_speedup(times[0], own)
            figures.append(Timed(speedup, statistics.median(own) * 1e3, original_ms, min(low, speedup), high))
        return figures
