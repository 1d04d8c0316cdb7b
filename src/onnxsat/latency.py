"""Side-by-side latency of two model files under ONNX Runtime (``onnxsat optimize --latency``).

Both sessions live in one process and are timed by ``timing.time_rounds``, the loop every ONNXSat
benchmark uses: one intra-op thread, spinning off, interleaved ABBA rounds after a warm-up, and the
speedup is the median of per-round ratios, which is steadier than a ratio of medians when the
machine's speed drifts (see ``onnxsat.timing`` for the measurements behind each choice).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort

from onnxsat.inputs import InputsLike, random_inputs
from onnxsat.model_io import load_model
from onnxsat.report import LatencyComparison
from onnxsat.timing import ratios_to, time_rounds, timing_session

if TYPE_CHECKING:
    from onnxsat.runtime.tune import SessionSettings


def compare_latency(
    original: Path,
    optimized: Path,
    inputs: InputsLike = None,
    level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    threads: int = 1,
    pairs: int = 60,
    warmup: int = 10,
    settings: SessionSettings | None = None,
) -> LatencyComparison:
    """Median latency of each model file and the median per-round speedup (original / optimized).

    Sessions load the files themselves, so external data is read from each model's own folder.
    ``settings`` (from ``onnxsat tune``) replace ``threads`` in both sessions, as in ``verify.session``.
    """
    feeds = random_inputs(load_model(original), inputs)
    sessions = [timing_session(path, level, threads, settings) for path in (Path(original), Path(optimized))]
    runners = [lambda sess=sess: sess.run(None, feeds) for sess in sessions]
    before, after = time_rounds(runners, pairs, warmup)
    return LatencyComparison(
        ort_level=level.name,
        threads=threads,
        pairs=pairs,
        original_ms=statistics.median(before) * 1e3,
        optimized_ms=statistics.median(after) * 1e3,
        speedup=statistics.median(ratios_to(before, after)),
    )


def compare_latency_levels(original: Path, optimized: Path, inputs: InputsLike = None) -> list[LatencyComparison]:
    """The bar to beat (ORT with all its optimizations) and what the rewrites alone buy (ORT with none)."""
    levels = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return [compare_latency(original, optimized, inputs, level) for level in levels]
