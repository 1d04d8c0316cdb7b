"""Loading each quantized file in ORT, and timing every one that loads against the fp32 model in one set of rounds.

"Valid" means what a user needs: ORT (all optimizations, CPU) creates a session and runs one sample.
All valid files and the fp32 baseline are then timed together with ``onnxsat.timing`` (one intra-op
thread, spinning off, the case's batch (1 unless asked), interleaved rounds after a warm-up, the median
of per-round ratios and its bootstrap interval), so every speedup in a model's rows comes from the same
rounds on the same machine state. The machine is shared, so single runs are noisy; per-round ratios
cancel most of the drift.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onnxsat.timing import LEVELS, median_interval, ratios_to, time_rounds, timing_session
from tools.quantize_bench.quantizers import first_line


def load_error(path: Path, feeds: Mapping[str, np.ndarray]) -> str | None:
    """None when ORT loads ``path`` and runs ``feeds``; else the first line of why not."""
    try:
        timing_session(path, LEVELS["all"], threads=1).run(None, dict(feeds))
    except Exception as error:  # ORT's refusals come as several exception types; any is "not valid"
        return first_line(error)
    return None


@dataclass(frozen=True)
class Timing:
    fp32_ms: float
    speedups: dict[str, tuple[float, float, float]]
    """Per candidate: median ratio fp32 time / its time, and that median's bootstrap interval."""
    rounds: int


def time_against(
    baseline: Path, candidates: Mapping[str, Path], feeds: Mapping[str, np.ndarray], rounds: int, warmup: int
) -> Timing:
    """fp32 median latency and each candidate's speedup over it, all sessions alive and interleaved."""
    names = list(candidates)
    sessions = [timing_session(path, LEVELS["all"], threads=1) for path in (baseline, *candidates.values())]
    feed = dict(feeds)
    runners = [lambda s=s: s.run(None, feed) for s in sessions]
    times = time_rounds(runners, rounds, warmup)
    speedups = {}
    for name, own in zip(names, times[1:], strict=True):
        ratios = ratios_to(times[0], own)
        speedups[name] = (statistics.median(ratios), *median_interval(ratios))
    return Timing(statistics.median(times[0]) * 1e3, speedups, rounds)
