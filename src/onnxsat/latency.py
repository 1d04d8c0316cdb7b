"""Side-by-side latency of two models under ONNX Runtime (``onnxsat optimize --latency``, and the
original against the result in ``quantize`` and ``compress``).

Both sessions live in one process and are timed by ``timing.time_rounds``, the loop every ONNXSat
benchmark uses: one intra-op thread, spinning off, interleaved ABBA rounds after a warm-up, and the
speedup is the median of per-round ratios, which is steadier than a ratio of medians when the
machine's speed drifts, unless the ratio of medians claims less (see ``agreed_speedup``, and
``onnxsat.timing`` for the measurements behind each choice).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.inputs import InputsLike, random_inputs
from onnxsat.model_io import load_model
from onnxsat.normal_form import with_restated_inputs
from onnxsat.report import LatencyComparison
from onnxsat.timing import ratios_to, readable_form, time_rounds, timing_session

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
    sessions = [timing_session(readable_form(Path(p)), level, threads, settings) for p in (original, optimized)]
    runners = [lambda sess=sess: sess.run(None, feeds) for sess in sessions]
    pairs = affordable_rounds(runners, pairs, warmup)
    before, after = time_rounds(runners, pairs, 0)
    return LatencyComparison(
        ort_level=level.name,
        threads=threads,
        pairs=pairs,
        original_ms=statistics.median(before) * 1e3,
        optimized_ms=statistics.median(after) * 1e3,
        speedup=agreed_speedup(before, after),
        feeds=", ".join(f"{name} {list(value.shape)}" for name, value in feeds.items()),
    )


TIMING_SECONDS = 20.0
"""About how long the timed rounds of one side-by-side comparison may take: 60 pairs of a graph network's 0.28 s
runs at two optimization levels made a 2-second ``optimize`` take two minutes."""
LEAST_ROUNDS = 15


def affordable_rounds(runners: Sequence[Callable[[], object]], rounds: int, warmup: int) -> int:
    """Runs the ``warmup`` rounds (timed), then says how many of ``rounds`` fit ``TIMING_SECONDS``, at least
    ``LEAST_ROUNDS``: a fast model gets every round asked for, a slow one fewer, and the report says how many."""
    times = time_rounds(runners, max(warmup, 1), 0)
    settled = [runner_times[len(runner_times) // 2 :] for runner_times in times]  # the first runs pre-pack weights
    per_round = sum(statistics.median(runner_times) for runner_times in settled)
    if per_round <= 0:
        return rounds
    return max(min(rounds, LEAST_ROUNDS), min(rounds, int(TIMING_SECONDS / per_round)))


def agreed_speedup(before: Sequence[float], after: Sequence[float]) -> float:
    """The speedup both the median of per-round ratios and the ratio of median times support (the lower).

    The median of ratios is robust to a machine slowing down between rounds, but on a noisy machine it can
    say faster while the median times printed beside it say slower (1.03x beside 220 ms -> 231 ms; 1.013x
    beside 76.68 ms -> 76.87 ms)."""
    return min(statistics.median(ratios_to(before, after)), statistics.median(before) / statistics.median(after))


def side_by_side(
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    threads: int,
    rounds: int = 20,
    warmup: int = 3,
    seconds: float | None = None,
) -> tuple[float, float, float]:
    """(original ms, candidate ms, speedup) under ORT with all optimizations, in interleaved rounds (in a search,
    ``seconds`` limits them: ``time_rounds``); the speedup is the one both estimators agree on
    (:func:`agreed_speedup`)."""
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = [timing_session(m, level, threads) for m in (original, candidate)]
    runners = [lambda s=s: s.run(None, dict(feeds)) for s in sessions]
    before, after = time_rounds(runners, rounds, warmup, seconds=seconds)
    return statistics.median(before) * 1e3, statistics.median(after) * 1e3, agreed_speedup(before, after)


def against_file_as_given(
    model: onnx.ModelProto,
    restated: Sequence[str],
    result: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    threads: int,
) -> tuple[dict[str, float], str]:
    """``result`` timed against the file as the user gave it, whose weights ``restated`` were graph inputs
    too; the figures (``file_ms``, ``speedup_vs_file``) and the line that says them.

    A command's original is the model as ONNXSat reads it, those weights constants: against it a tf2onnx
    MobileNetV2 at opset 7 compressed 1.60x, against the file the user runs 5.69x.
    """
    file_ms, result_ms, speedup = side_by_side(with_restated_inputs(model, restated), result, feeds, threads)
    weights = "1 weight is a graph input" if len(restated) == 1 else f"{len(restated)} weights are graph inputs"
    line = (
        f"against the file as given, whose {weights} too (ONNX Runtime neither folds nor prepacks an input; the "
        f"original above reads them as constants): {file_ms:.3f} -> {result_ms:.3f} ms, {speedup:.2f}x"
    )
    return {"file_ms": file_ms, "speedup_vs_file": speedup}, line


def compare_latency_levels(original: Path, optimized: Path, inputs: InputsLike = None) -> list[LatencyComparison]:
    """The bar to beat (ORT with all its optimizations) and what the rewrites alone buy (ORT with none)."""
    levels = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return [compare_latency(original, optimized, inputs, level) for level in levels]


def latency_phrase(latency: Mapping[str, float], before: str, after: str, where: str | None = None) -> str:
    """One report's side-by-side latency as every command prints it (text, table and HTML alike):
    ``latency[before]`` and ``latency[after]`` in ms, the speedup and the conditions it was measured under."""
    measured = f", measured on {where}" if where else ""
    return (
        f"{latency[before]:.3f} -> {latency[after]:.3f} ms ({latency['speedup']:.2f}x, ORT all optimizations, "
        f"{int(latency['threads'])} thread(s), batch {int(latency.get('batch', 1))}, median of interleaved "
        f"rounds{measured})"
    )
