"""Experiment 1, "what does operator fusion give?": baseline, ONNXSat, ORT offline, ONNXSat + ORT offline.

Design: every optimization is applied *offline* (ONNXSat's rewrites; ORT's own graph optimizer saving
its result, at ``ort_level``, "all" by default), and every session runs with ORT's online optimizations
**disabled**, so each model is timed exactly as it was saved and the optimizing itself is never timed.
Every timed run is one inference on one batch and every one is timed (not only the last batch of a
loop); the variants are interleaved round by round after a warm-up (``timing.time_rounds``), so drift
hits all of them alike; threads are fixed and printed.

Figures per model and variant:

- **latency**: batch 1, median and 95th percentile over the rounds; **speedup** is the median over rounds
  of (baseline time / variant time) in that round, with a bootstrap interval; a second session of the
  baseline is timed as a noise probe, and a speedup is "faster"/"slower" only outside its band.
- **throughput**: samples per second at ``batch_size`` (or the model's fixed batch): batch / median time.
- **max |diff|**: the largest output difference from the baseline on the same seeded inputs (fusion is
  meant to be lossless; the value shows it is).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat import model_io
from onnxsat.bench.sparsity.common import ExperimentResult
from onnxsat.bench.writing import csv_text, markdown_table, model_labels, save_figure, settings_json
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import rulesets_for
from onnxsat.errors import SettingsError
from onnxsat.extras import require
from onnxsat.html.charts import new_figure
from onnxsat.inputs import InputSpec, fixed_dim, random_inputs
from onnxsat.runtime.offline import LEVELS, optimize_offline
from onnxsat.timing import (
    environment,
    environment_line,
    load_whole,
    median_interval,
    noise_band,
    noise_verdict,
    ratios_to,
    time_rounds,
    timing_session,
)
from onnxsat.verification import Tolerance, compare_outputs

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BASELINE = "baseline"
ONNXSAT = "onnxsat"
ORT_OFFLINE = "ort offline"
BOTH = "onnxsat + ort offline"
VARIANTS = (BASELINE, ONNXSAT, ORT_OFFLINE, BOTH)
NOISE_PROBE = "baseline (again)"


@dataclass
class FusionSettings:
    """What experiment 1 runs on and how; every field is written to the settings JSON."""

    models: list[Path]
    out: Path
    threads: int = 1
    rounds: int = 30
    warmup: int = 5
    batch_size: int = 16
    """Batch of the throughput runs (a model with a fixed batch dim runs at that batch instead)."""
    ort_level: str = "all"
    """ORT's offline level for the "ort offline" variants: basic, extended or all (the default)."""
    target: str = "ort"
    """ONNXSat's target: ``ort`` may emit com.microsoft fused ops, ``portable`` standard ONNX only."""
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    """Sizes for dynamic dims other than the batch."""

    def check(self) -> None:
        if not self.models:
            raise SettingsError("give at least one model")
        for option, value in {
            "--threads": self.threads,
            "--rounds": self.rounds,
            "--batch-size": self.batch_size,
        }.items():
            if value < 1:
                raise SettingsError(f"{option} must be at least 1, got {value}")
        if self.warmup < 0:
            raise SettingsError(f"--warmup must be at least 0, got {self.warmup}")
        if self.ort_level not in LEVELS:
            raise SettingsError(f"unknown ORT level {self.ort_level!r}; choose from {', '.join(LEVELS)}")
        rulesets_for(self.target)
        self.models = [Path(model) for model in self.models]
        for model in self.models:
            model_io.check_input_path(model)


@dataclass
class FusionRow:
    """One model under one variant (a CSV row)."""

    model: str
    variant: str
    nodes: int
    latency_ms: float
    latency_p95_ms: float
    speedup: float
    speedup_low: float
    speedup_high: float
    verdict: str
    batch: int
    throughput: float
    """Samples per second at ``batch``."""
    throughput_ratio: float
    """Median over rounds of (baseline time / variant time) at ``batch``."""
    max_abs_diff: float


@dataclass
class ModelFacts:
    model: str
    path: str
    nodes: dict[str, int]
    optimize_seconds: dict[str, float]
    noise: dict[str, object]


Progress = Callable[[str], None]


def experiment_one(settings: FusionSettings, progress: Progress | None = None) -> ExperimentResult:
    """Measure every model's four variants; write plots, CSV, Markdown and settings into ``settings.out``."""
    tqdm = require("tqdm", "bench experiment's progress bar").tqdm
    settings.check()
    out = model_io.output_folder(str(settings.out), "--out")
    assert out is not None
    env = environment()
    rows: list[FusionRow] = []
    facts: list[ModelFacts] = []
    steps = len(settings.models) * 2 * (settings.rounds + settings.warmup)
    with tqdm(total=steps, desc="experiment 1", unit="round", disable=None) as bar:
        for path, label in zip(settings.models, model_labels(settings.models), strict=True):
            bar.set_postfix_str(label)
            fact, mine = _measure(path, label, settings, bar.update)
            facts.append(fact)
            rows.extend(mine)
    markdown = _write_up(rows, settings, env)
    paths = [out / name for name in ("experiment1_latency.png", "experiment1_throughput.png")]
    save_figure(_latency_figure(rows), paths[0])
    save_figure(_throughput_figure(rows), paths[1])
    files = {"experiment1.csv": csv_text(rows, FusionRow), "experiment1.md": markdown + "\n"}
    details = {"experiment": 1, "models": [asdict(f) for f in facts], "how": __doc__.split("\n\n", 1)[1]}
    files["experiment1_settings.json"] = settings_json(settings, env, details)
    for name, text in files.items():
        model_io.write_text_atomic(text, out / name)
        paths.append(out / name)
    (progress or _stderr)(f"experiment 1: wrote {', '.join(str(p) for p in paths)}")
    return ExperimentResult(1, paths, rows, markdown, details)  # type: ignore[arg-type]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _variants(
    original: onnx.ModelProto, settings: FusionSettings
) -> tuple[dict[str, onnx.ModelProto], dict[str, float]]:
    """The four models, and how long each optimization took (not part of any timing)."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    fused, report = optimize_model(
        original, OptimizeOptions(target=settings.target, inputs=InputSpec.of(settings.input_shapes))
    )
    seconds[ONNXSAT] = time.perf_counter() - start
    if not report.verification or not report.verification.ok:
        raise SettingsError("ONNXSat's result failed verification; see `onnxsat optimize` for the details")
    start = time.perf_counter()
    ort_model, _ = optimize_offline(original, settings.ort_level)
    seconds[ORT_OFFLINE] = time.perf_counter() - start
    start = time.perf_counter()
    both, _ = optimize_offline(fused, settings.ort_level)
    seconds[BOTH] = time.perf_counter() - start
    return {BASELINE: original, ONNXSAT: fused, ORT_OFFLINE: ort_model, BOTH: both}, seconds


def _feeds(model: onnx.ModelProto, settings: FusionSettings, batch: int) -> tuple[dict[str, np.ndarray], int]:
    """Seeded inputs with a dynamic batch dim set to ``batch``; returns the batch actually used."""
    shapes = {name: list(dims) for name, dims in settings.input_shapes.items()}
    initializers = {t.name for t in model.graph.initializer}
    used = batch
    for value in model.graph.input:
        if value.name in initializers or value.name in shapes:
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims:
            continue
        if fixed_dim(dims[0]):
            used = dims[0].dim_value
            continue
        rest = [fixed_dim(d) or 1 for d in dims[1:]]
        shapes[value.name] = [batch, *rest]
    return random_inputs(model, shapes), used


def _measure(
    path: Path, label: str, settings: FusionSettings, tick: Callable[[int], object]
) -> tuple[ModelFacts, list[FusionRow]]:
    original = load_whole(path)
    models, seconds = _variants(original, settings)
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    names = [*VARIANTS, NOISE_PROBE]
    sessions = [
        timing_session(models[name if name != NOISE_PROBE else BASELINE], off, settings.threads) for name in names
    ]
    one, _ = _feeds(original, settings, 1)
    many, batch = _feeds(original, settings, settings.batch_size)
    expected = sessions[0].run(None, one)
    names = [o.name for o in original.graph.output]
    diffs = [_max_diff(names, expected, s.run(None, one)) for s in sessions]
    timings = []
    for feeds in (one, many):
        runners = [lambda s=s, feeds=feeds: s.run(None, feeds) for s in sessions]
        timings.append(time_rounds(runners, settings.rounds, settings.warmup, lambda: tick(1)))
    latency, throughput = timings
    ratios = [ratios_to(latency[0], own) for own in latency]
    batch_ratios = [ratios_to(throughput[0], own) for own in throughput]
    noise = noise_band(ratios[-1])
    rows = []
    for index, name in enumerate(VARIANTS):
        interval = median_interval(ratios[index])
        rows.append(
            FusionRow(
                model=label,
                variant=name,
                nodes=len(models[name].graph.node),
                latency_ms=statistics.median(latency[index]) * 1e3,
                latency_p95_ms=float(np.percentile(latency[index], 95)) * 1e3,
                speedup=statistics.median(ratios[index]),
                speedup_low=interval[0],
                speedup_high=interval[1],
                verdict="baseline" if name == BASELINE else noise_verdict(interval, noise),
                batch=batch,
                throughput=batch / statistics.median(throughput[index]),
                throughput_ratio=statistics.median(batch_ratios[index]),
                max_abs_diff=diffs[index],
            )
        )
    fact = ModelFacts(
        label,
        str(path),
        {name: len(models[name].graph.node) for name in VARIANTS},
        seconds,
        {"median": noise.median, "band": list(noise.bounds)},
    )
    return fact, rows


def _max_diff(names: Sequence[str], expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> float:
    """The largest absolute output difference (``verify.compare_outputs``: infinite for a changed shape)."""
    comparisons = compare_outputs(names, expected, actual, Tolerance())
    return max((c.max_abs_diff for c in comparisons), default=0.0)


def _write_up(rows: list[FusionRow], settings: FusionSettings, env: dict[str, object]) -> str:
    lines = [
        "# Experiment 1: operator fusion",
        "",
        f"Every optimization applied offline (ORT offline level: {settings.ort_level}; ONNXSat target: "
        f"{settings.target}); every session runs with ORT's online optimizations disabled, {settings.threads} "
        f"thread(s), {settings.rounds} interleaved rounds after {settings.warmup} warm-up rounds. Speedup: median "
        "per-round ratio against the baseline, 90% bootstrap interval, judged against a second baseline session.",
        f"environment: {environment_line(env)}",
        "",
    ]
    header = ["model", "variant", "nodes", "median ms", "p95 ms", "speedup", "90% CI", "vs noise"]
    header += ["batch", "samples/s", "throughput x", "max |diff|"]
    table = [
        [
            r.model,
            r.variant,
            str(r.nodes),
            f"{r.latency_ms:.3f}",
            f"{r.latency_p95_ms:.3f}",
            f"{r.speedup:.3f}x",
            f"{r.speedup_low:.2f}-{r.speedup_high:.2f}",
            r.verdict,
            str(r.batch),
            f"{r.throughput:,.0f}",
            f"{r.throughput_ratio:.3f}x",
            f"{r.max_abs_diff:.2g}",
        ]
        for r in rows
    ]
    return "\n".join(lines + markdown_table(header, table))


def _grouped_bars(
    rows: list[FusionRow],
    value: Callable[[FusionRow], float],
    ylabel: str,
    title: str,
    interval: Callable[[FusionRow], tuple[float, float]] | None = None,
) -> Figure:
    """One group of bars per model, one bar per variant; ``interval`` draws each bar's error bar."""
    models = list(dict.fromkeys(r.model for r in rows))
    figure = new_figure(max(6.0, 1.6 * len(models) + 2), 4.0)
    axes = figure.add_subplot()
    width = 0.8 / len(VARIANTS)
    for index, name in enumerate(VARIANTS):
        mine = [next(r for r in rows if r.model == m and r.variant == name) for m in models]
        values = [value(r) for r in mine]
        errors = None
        if interval is not None:
            errors = np.array([[v - interval(r)[0], interval(r)[1] - v] for r, v in zip(mine, values, strict=True)]).T
        offsets = np.arange(len(models)) + (index - (len(VARIANTS) - 1) / 2) * width
        axes.bar(offsets, values, width, yerr=errors, capsize=3, label=name)
    axes.set_xticks(np.arange(len(models)), models, rotation=20, ha="right")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend(fontsize="small")
    return figure


def _latency_figure(rows: list[FusionRow]) -> Figure:
    figure = _grouped_bars(
        rows,
        lambda r: r.speedup,
        "median speedup over the baseline (batch 1)",
        "Latency speedup (bars: 90% interval of the median)",
        lambda r: (r.speedup_low, r.speedup_high),
    )
    figure.axes[0].axhline(1.0, color="black", linewidth=0.8)
    return figure


def _throughput_figure(rows: list[FusionRow]) -> Figure:
    return _grouped_bars(rows, lambda r: r.throughput, "samples per second", "Throughput")
