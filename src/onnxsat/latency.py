"""Side-by-side latency of two models under ONNX Runtime, measured the way ORT_FINDINGS.md says is steady.

Both sessions live in one process with one intra-op thread and spinning off; runs are interleaved in
ABBA order after a warm-up, and the speedup is the median of per-pair ratios, which is steadier than
a ratio of medians when the machine's speed drifts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort

from onnxsat.model_io import load_model
from onnxsat.report import LatencyComparison
from onnxsat.verification import random_inputs, session

if TYPE_CHECKING:
    from onnxsat.runtime.tune import SessionSettings


def compare_latency(
    original: Path,
    optimized: Path,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    threads: int = 1,
    pairs: int = 60,
    warmup: int = 10,
    settings: SessionSettings | None = None,
) -> LatencyComparison:
    """Median latency of each model file and the median per-pair speedup (original / optimized).

    Sessions load the files themselves, so external data is read from each model's own folder.
    ``settings`` (from ``onnxsat tune``) replace ``threads`` in both sessions, as in ``verify.session``.
    """
    feeds = random_inputs(load_model(original), input_shapes)
    sessions = [
        session(original, level, threads, settings=settings),
        session(optimized, level, threads, settings=settings),
    ]
    for _ in range(warmup):
        for sess in sessions:
            sess.run(None, feeds)

    def timed(sess: ort.InferenceSession) -> float:
        start = time.perf_counter()
        sess.run(None, feeds)
        return time.perf_counter() - start

    times: tuple[list[float], list[float]] = ([], [])
    ratios = []
    for index in range(pairs):
        order = (0, 1) if index % 2 == 0 else (1, 0)  # ABBA: alternate who goes first
        measured = {which: timed(sessions[which]) for which in order}
        times[0].append(measured[0])
        times[1].append(measured[1])
        ratios.append(measured[0] / measured[1])
    return LatencyComparison(
        ort_level=level.name,
        threads=threads,
        pairs=pairs,
        original_ms=statistics.median(times[0]) * 1e3,
        optimized_ms=statistics.median(times[1]) * 1e3,
        speedup=statistics.median(ratios),
    )


def compare_latency_levels(
    original: Path, optimized: Path, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> list[LatencyComparison]:
    """The bar to beat (ORT with all its optimizations) and what the rewrites alone buy (ORT with none)."""
    levels = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return [compare_latency(original, optimized, input_shapes, level) for level in levels]
