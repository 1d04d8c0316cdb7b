"""Timing ONNX Runtime sessions side by side: the one loop every ONNXSat measurement uses.

``bench compare``, ``bench experiment``, ``optimize --latency``, ``tune`` and ``bench prune`` all ask
the same question (is this session faster than that one, beyond this machine's noise?), so they share
this module: sessions made for timing, interleaved rounds after a warm-up, per-round ratios, their
median and its bootstrap interval, a noise band from a second session of the baseline, and the line
that says what machine and versions a figure came from.

Why this way:

- One process, every session created before any is timed, one fixed intra-op thread and spinning
  off (``timing_session``): with several sessions alive, an idle session's spinning threads steal the
  cores of the one running and can inflate its time up to 2x (measured with ONNX Runtime 1.31 on two
  vCPUs). Separate processes would each see their own frequency, cache and memory-placement luck.
- Rounds, not blocks: each round runs every session once, in an order that rotates and reverses every
  cycle (``round_order``), so none is always first or always after the same one. The figure is the
  median over rounds of baseline time / session time *in that round*, which cancels drift (thermal,
  other tenants) that a ratio of two medians keeps: identical graphs timed in separate passes differed
  by 5-8% (one baseline moved from 20 to 28 ms), while the median of interleaved per-round ratios of
  identical models stayed within 2%.
- The noise is measured, not assumed (``noise_band``): a second session of the baseline would have a
  median ratio of exactly 1.0 on a quiet machine; the bootstrap interval of that median, made
  symmetric around 1.0, is the band a real difference must clear (``noise_verdict``).
"""

from __future__ import annotations

import gc
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat import model_io
from onnxsat.external_data import has_external_data
from onnxsat.ir_version import file_ir_version, runtime_ir_version
from onnxsat.verification import session

if TYPE_CHECKING:  # verify.session takes them; runtime.tune (above this module) defines them
    from onnxsat.runtime.tune import SessionSettings

NOISE_CONFIDENCE = 0.90
"""Coverage of the bootstrap intervals of median ratios (the noise band's and every session's)."""
BOOTSTRAP_SAMPLES = 2000

LEVELS = {"off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
"""ORT optimization levels by the names the timing tables use."""

ENVIRONMENT_PACKAGES = ("onnxruntime", "onnx", "numpy", "egglog", "matplotlib")
"""Packages whose versions a timing depends on (ORT and onnx run it, egglog optimized it, matplotlib drew it)."""


# ------------------------------------------------------------------------------------------- sessions


def timing_session(
    model: onnx.ModelProto | Path,
    level: ort.GraphOptimizationLevel,
    threads: int = 1,
    settings: SessionSettings | None = None,
) -> ort.InferenceSession:
    """A CPU session to time: ``threads`` intra-op threads, one inter-op thread, spinning off
    (``verify.session``); ``settings`` (from ``onnxsat tune``) replace the thread counts, mode and providers.

    ``model`` is a model in memory (every weight loaded: see ``load_whole``) or a file, whose external
    data ORT reads from beside it.
    """
    return session(model, level, threads, settings=settings)


def load_whole(path: str | Path) -> onnx.ModelProto:
    """The model with every weight in memory, after ONNXSat's own checks (path, format, data references)."""
    model, _ = model_io.load_runnable(path)
    if has_external_data(model):
        onnx.load_external_data_for_model(model, str(model_io.model_folder(path)))
    model_io.check_model(model)
    return model


def readable_form(path: Path) -> Path | onnx.ModelProto:
    """What a session should load for the model file ``path``: the file, or, when it declares an IR version
    newer than ONNX Runtime reads (``onnx.helper`` stamps its newest), the model with its IR version lowered,
    as every command reads it (:func:`load_whole`)."""
    declared = file_ir_version(path)
    if declared is None or declared <= runtime_ir_version():
        return path
    return load_whole(path)


def describe_inputs(feeds: Mapping[str, np.ndarray]) -> str:
    """The inputs a measurement ran on, as its table's header says them: ``x [1,3,8,8] float32``."""
    return ", ".join(f"{name} [{','.join(map(str, a.shape))}] {a.dtype}" for name, a in feeds.items()) or "none"


# ------------------------------------------------------------------------------------------- the loop


def round_order(index: int, count: int) -> list[int]:
    """Which runner runs when in round ``index``: rotated by one each round, reversed every other cycle.

    Over ``2 * count`` rounds every runner runs in every position, and before and after every other.
    With two runners this is ABBA order: AB, BA, BA, AB.
    """
    shift = index % count
    order = list(range(shift, count)) + list(range(shift))
    if (index // count) % 2 == 1:
        order.reverse()
    return order


LEAST_ROUNDS, LEAST_WARMUP = 10, 2
"""Rounds a run limited in ``seconds`` still times (fewer leave a bootstrap interval that says little), and
warm-up rounds it still runs (the first runs allocate and pre-pack; by the second they have)."""
WARMUP_SHARE = 0.2
"""Share of a run's ``seconds`` after which its warm-up stops (once ``LEAST_WARMUP`` rounds have run)."""


def time_rounds(
    runners: Sequence[Callable[[], object]],
    rounds: int,
    warmup: int,
    after_round: Callable[[], object] | None = None,
    seconds: float | None = None,
) -> list[list[float]]:
    """Seconds per round for each runner; every round runs each once, in ``round_order``.

    ``warmup`` untimed rounds come first: ORT allocates its arenas and pre-packs weights on the first
    runs. ``after_round`` (a progress bar's tick) runs after every warm-up and timed round, outside the
    clock. The garbage collector is off while timing: a collection inside one runner would be charged to it.
    ``seconds``: a limit for a search that times many models inside its own time budget. The warm-up stops
    at ``WARMUP_SHARE`` of it and the timed rounds at all of it, each after its least number of rounds
    (``LEAST_WARMUP``, ``LEAST_ROUNDS``), the timed ones at the end of a rotation of ``round_order``. Small models
    run every round; a model of 0.7 s per run timed beside its original spent 49 s in 35 rounds.
    """
    clock = time.perf_counter()
    for index in range(warmup):
        for which in round_order(index, len(runners)):
            runners[which]()
        if after_round is not None:
            after_round()
        if _spent(clock, index, LEAST_WARMUP, seconds * WARMUP_SHARE if seconds is not None else None, 1):
            break
    times: list[list[float]] = [[] for _ in runners]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    clock = time.perf_counter()
    try:
        for index in range(rounds):
            for which in round_order(index, len(runners)):
                start = time.perf_counter()
                runners[which]()
                times[which].append(time.perf_counter() - start)
            if after_round is not None:
                after_round()
            if _spent(clock, index, LEAST_ROUNDS, seconds, len(runners)):
                break
    finally:
        if was_enabled:
            gc.enable()
    return times


def _spent(clock: float, index: int, least: int, seconds: float | None, cycle: int) -> bool:
    """Whether a run limited to ``seconds`` since ``clock`` stops after round ``index``: it ran ``least`` rounds
    first, and ends a cycle of ``cycle`` rounds (timed rounds: every runner has run first as often as any other)."""
    done = index + 1
    return seconds is not None and done >= least and done % cycle == 0 and time.perf_counter() - clock >= seconds


def ratios_to(baseline: Sequence[float], own: Sequence[float]) -> list[float]:
    """Per round: the baseline's time / this runner's time (above 1 = faster than the baseline)."""
    return [b / t for b, t in zip(baseline, own, strict=True)]


# -------------------------------------------------------------------------------------------- figures


class RoundTimes:
    """What a row timed over interleaved rounds reports; the row holds ``times`` (seconds per round)
    and ``ratios`` (per round: the baseline's time / this row's time, above 1 = faster)."""

    times: list[float]
    ratios: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3

    @property
    def p95_ms(self) -> float:
        return float(np.percentile(self.times, 95)) * 1e3

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    @property
    def ratio_spread(self) -> tuple[float, float]:
        """5th and 95th percentile of the per-round ratios: how much single rounds scatter."""
        low, high = np.percentile(self.ratios, [5, 95])
        return float(low), float(high)

    @property
    def interval(self) -> tuple[float, float]:
        """Bootstrap interval (``NOISE_CONFIDENCE``) of the median ratio: how sure the speedup is."""
        return median_interval(self.ratios)


def median_interval(ratios: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval (``NOISE_CONFIDENCE``, seeded) of the median of ``ratios``."""
    values = np.asarray(ratios, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(values[rng.integers(0, len(values), size=(BOOTSTRAP_SAMPLES, len(values)))], axis=1)
    tail = (1 - NOISE_CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


@dataclass
class NoiseBand:
    """What a second session of the very same model measures: the speedup an unchanged model gets."""

    median: float
    interval: tuple[float, float]
    """Bootstrap interval (``NOISE_CONFIDENCE``) of the median per-round ratio."""
    rounds: tuple[float, float]
    """5th and 95th percentile of the per-round ratios."""

    @property
    def half_width(self) -> float:
        """Log-scale distance from 1.0 that the noise session reached: the band is [e^-w, e^w]."""
        return max(abs(math.log(self.interval[0])), abs(math.log(self.interval[1])), abs(math.log(self.median)))

    @property
    def bounds(self) -> tuple[float, float]:
        return math.exp(-self.half_width), math.exp(self.half_width)

    def contains(self, speedup: float) -> bool:
        return abs(math.log(speedup)) <= self.half_width


def noise_band(ratios: Sequence[float], seed: int = 0) -> NoiseBand:
    """The noise session's median ratio, a bootstrap interval of that median, and its per-round spread."""
    p5, p95 = np.percentile(ratios, [5, 95])
    return NoiseBand(float(np.median(ratios)), median_interval(ratios, seed), (float(p5), float(p95)))


def noise_verdict(interval: tuple[float, float], noise: NoiseBand) -> str:
    """``faster`` or ``slower`` only when ``interval`` (of a median speedup) lies wholly outside ``noise``'s
    band, else ``within noise``: both medians are estimates from the same few rounds."""
    low, high = interval
    band_low, band_high = noise.bounds
    if low > band_high:
        return "faster"
    if high < band_low:
        return "slower"
    return "within noise"


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


# ---------------------------------------------------------------------------------------- environment


def environment(packages: Sequence[str] = ENVIRONMENT_PACKAGES) -> dict[str, object]:
    """Python, CPUs and the versions of ``packages`` (None when not installed): what a timing depends on."""
    versions: dict[str, object] = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        **versions,
    }


def environment_line(env: Mapping[str, object] | None = None) -> str:
    """``python 3.12.3, 2 CPUs (2 usable), x86_64; onnxruntime 1.31.1, onnx 1.23.0, ...`` for ``env``
    (this process's :func:`environment` when None); a package that is not installed is left out."""
    env = environment() if env is None else env
    fixed = {"python", "machine", "cpu_count", "usable_cpus"}
    packages = ", ".join(f"{name} {version}" for name, version in env.items() if name not in fixed and version)
    return (
        f"python {env['python']}, {env['cpu_count']} CPUs ({env['usable_cpus']} usable), {env['machine']}; {packages}"
    )
