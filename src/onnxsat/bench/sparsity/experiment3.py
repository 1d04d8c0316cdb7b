"""Experiment 3, "what does sparsity give?": the sparsest model inside the budget, timed against the dense one.

The budget search of :func:`~onnxsat.sparsity.sparsify.sparsify_model` finds the sparsest model inside
the budget (no levels hard-coded from an earlier run), then the dense model, the pruned model (dense
storage) and the pruned model with sparse initializers are timed under ONNX Runtime with every graph
optimization (the level the baseline and every variant run under: how the models would be deployed), a
fixed number of threads, all sessions created before any is timed, every run of every round timed (not only
the last batch), interleaved rounds after warm-up (``timing.time_rounds``).

Speed ratios are medians over rounds of (dense time / variant time) *in that round*, which cancels drift; a
second session of the dense model is timed as a noise probe, and a ratio is "faster" or "slower" only when
its 90% bootstrap interval lies outside the probe's band (as ``bench compare``).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat import timing
from onnxsat.bench.sparsity.common import (
    experiment_dataset,
    fixed_batch,
    metric_value,
    points,
    prunable_sparsity,
    run_experiment,
    targets_of,
)
from onnxsat.bench.writing import markdown_table
from onnxsat.data.metrics import Accuracy, evaluate, run_logits
from onnxsat.data.sources import Dataset
from onnxsat.extras import require
from onnxsat.html.charts import new_figure
from onnxsat.sparsity.report import SparsifyReport
from onnxsat.sparsity.sparsify import SparsifyOptions, sparsify_model
from onnxsat.sparsity.storage import to_sparse_initializers
from onnxsat.sparsity.targets import SparsityTarget

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from onnxsat.bench.sparsity.common import ExperimentResult, Progress, SparsityExperimentSettings

DENSE, PRUNED, SPARSE = "dense", "pruned", "pruned, sparse initializers"
VARIANTS = (DENSE, PRUNED, SPARSE)
NOISE_PROBE = "dense, second session (noise probe)"
_ALL = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


@dataclass
class TimingRow:
    """Experiment 3: one model variant. Speed ratios: dense time / variant time (above 1 = faster)."""

    model: str
    variant: str
    sparsity: float
    bytes: int
    latency_batch: int
    latency_median_ms: float
    latency_p95_ms: float
    latency_ratio: float
    latency_ci_low: float
    latency_ci_high: float
    latency_verdict: str
    throughput_batch: int
    throughput: float
    """Samples per second: batch size / median batch time."""
    throughput_ratio: float
    throughput_ci_low: float
    throughput_ci_high: float
    throughput_verdict: str
    top1: float
    top5: float
    drop: float
    """Drop of the experiment's metric against the dense model, measured on this variant's own session."""
    kind: str


@dataclass
class Timing:
    """One timing pass (latency or throughput) over the four sessions, in VARIANTS order + the probe."""

    batch: int
    times: dict[str, list[float]]
    ratios: dict[str, list[float]]
    noise: timing.NoiseBand

    def verdict(self, variant: str) -> str:
        """Faster or slower only when the ratio's interval lies wholly outside the noise probe's band."""
        if variant == DENSE:
            return "baseline"
        return timing.noise_verdict(timing.median_interval(self.ratios[variant]), self.noise)


@dataclass
class SearchFacts:
    """Experiment 3's facts about one model: the search, the storage, the batches."""

    label: str
    path: str
    data: str
    samples: int
    method: str
    chosen: str
    levels: object
    sparsity: float
    search_drop: float
    evaluations: int
    search_seconds: float
    moved_to_sparse: list[str]
    kept_dense: dict[str, str]
    sparse_outputs_identical: bool
    latency_batch: int
    throughput_batch: int
    fixed_batch: int | None
    latency_noise: dict[str, object] = field(default_factory=dict)
    throughput_noise: dict[str, object] = field(default_factory=dict)


def search_sparsest(
    model: onnx.ModelProto, dataset: Dataset, spec: str, settings: SparsityExperimentSettings, label: str
) -> tuple[onnx.ModelProto, SparsifyReport]:
    """``sparsify_model``'s budget search: the sparsest model inside the budget (dense storage)."""
    options = SparsifyOptions(
        method=settings.methods[0],
        sparsity=None,
        max_drop=settings.budget,
        metric=settings.metric,
        data=spec,
        holdout=0.0,  # the experiment measures every variant on the data itself afterwards
        limit=len(dataset),
        batch_size=fixed_batch(model) or settings.batch_size,
    )
    return sparsify_model(model, options, source=label, unpruned_if_nothing_fits=True)  # measured as it is


def batch_of(dataset: Dataset, size: int, dtype: type) -> np.ndarray:
    """The first ``size`` samples (repeated if the data has fewer), as the session's input type."""
    picked = dataset.inputs[:size]
    if len(picked) < size:
        picked = np.resize(picked, (size, *picked.shape[1:]))
    return np.ascontiguousarray(picked, dtype=dtype)


def time_sessions(
    sessions: dict[str, ort.InferenceSession], feeds: dict[str, np.ndarray], settings: SparsityExperimentSettings
) -> Timing:
    """Interleaved rounds over every session (``timing.time_rounds``); ratios are per round, against the dense one."""
    tqdm = require("tqdm", "bench experiment's progress bar").tqdm
    names = list(sessions)
    runners = [lambda s=sessions[name]: s.run(None, feeds) for name in names]
    batch = len(next(iter(feeds.values())))
    total = settings.rounds + settings.warmup
    with tqdm(total=total, desc=f"experiment 3: batch {batch}", unit="round", leave=False, disable=None) as bar:
        measured = timing.time_rounds(runners, settings.rounds, settings.warmup, lambda: bar.update(1))
    times = dict(zip(names, measured, strict=True))
    ratios = {name: timing.ratios_to(times[DENSE], own) for name, own in times.items()}
    return Timing(batch, times, ratios, timing.noise_band(ratios[NOISE_PROBE]))


def measured_accuracy(
    models: dict[str, onnx.ModelProto], dataset: Dataset, settings: SparsityExperimentSettings
) -> dict[str, Accuracy]:
    """Each variant's accuracy (or fidelity to the dense model) from its own ORT session."""
    reference = None
    if dataset.labels is None:
        reference = run_logits(models[DENSE], dataset, batch_size=settings.batch_size, threads=settings.threads)
    return {
        name: evaluate(
            model, dataset, reference_logits=reference, batch_size=settings.batch_size, threads=settings.threads
        )
        for name, model in models.items()
    }


def timing_rows(
    label: str,
    models: dict[str, onnx.ModelProto],
    targets: list[SparsityTarget],
    latency: Timing,
    throughput: Timing,
    accuracy: dict[str, Accuracy],
    metric: str,
) -> list[TimingRow]:
    names = [t.name for t in targets]
    base = accuracy[DENSE]
    rows = []
    for variant in VARIANTS:
        lat_low, lat_high = (1.0, 1.0) if variant == DENSE else timing.median_interval(latency.ratios[variant])
        put_low, put_high = (1.0, 1.0) if variant == DENSE else timing.median_interval(throughput.ratios[variant])
        own = accuracy[variant]
        rows.append(
            TimingRow(
                model=label,
                variant=variant,
                sparsity=prunable_sparsity(models[variant], names),
                bytes=models[variant].ByteSize(),
                latency_batch=latency.batch,
                latency_median_ms=statistics.median(latency.times[variant]) * 1e3,
                latency_p95_ms=float(np.percentile(latency.times[variant], 95)) * 1e3,
                latency_ratio=statistics.median(latency.ratios[variant]),
                latency_ci_low=lat_low,
                latency_ci_high=lat_high,
                latency_verdict=latency.verdict(variant),
                throughput_batch=throughput.batch,
                throughput=throughput.batch / statistics.median(throughput.times[variant]),
                throughput_ratio=statistics.median(throughput.ratios[variant]),
                throughput_ci_low=put_low,
                throughput_ci_high=put_high,
                throughput_verdict=throughput.verdict(variant),
                top1=own.top1,
                top5=own.top5,
                drop=metric_value(base, metric) - metric_value(own, metric),
                kind=own.kind,
            )
        )
    return rows


def band_facts(timing: Timing) -> dict[str, object]:
    return {"median": timing.noise.median, "interval": timing.noise.interval, "bounds": timing.noise.bounds}


def measure_model(
    path: Path, label: str, settings: SparsityExperimentSettings, progress: Progress
) -> tuple[SearchFacts, list[TimingRow]]:
    """Search, build the three variants, check them, time them, measure their accuracy."""
    dense = timing.load_whole(path)
    targets = targets_of(dense, label)
    dataset = experiment_dataset(dense, settings, label)
    progress(f"experiment 3: {label}: budget search ({settings.methods[0]}) on {dataset.name} x{len(dataset)}")
    with tempfile.TemporaryDirectory(prefix="onnxsat-exp3-") as folder:
        spec = settings.data
        if spec is None:  # sparsify_model reads data from a spec: hand it the very same random samples
            spec = str(Path(folder) / "random_inputs.npz")
            np.savez(spec, inputs=dataset.inputs)
        pruned, report = search_sparsest(dense, dataset, spec, settings, label)
    sparse = onnx.ModelProto()
    sparse.CopyFrom(pruned)
    storage = to_sparse_initializers(sparse, [t.name for t in targets], min_sparsity=0.0)
    models = {DENSE: dense, PRUNED: pruned, SPARSE: sparse}
    assert report.baseline is not None and report.accuracy is not None
    search_drop = report.accuracy.drop
    progress(
        f"experiment 3: {label}: {report.overall:.2%} sparsity ({report.search.get('chosen')}), search change "
        f"{points(search_drop)} pts, {report.seconds:.1f} s"
    )
    sessions = {name: timing.timing_session(models[name], _ALL, settings.threads) for name in (DENSE, PRUNED, SPARSE)}
    sessions[NOISE_PROBE] = timing.timing_session(dense, _ALL, settings.threads)
    model_input = sessions[DENSE].get_inputs()[0]
    dtype = _ORT_DTYPES.get(model_input.type, np.float32)
    batch = fixed_batch(dense)
    lat_feeds = {model_input.name: batch_of(dataset, batch or 1, dtype)}
    put_feeds = {model_input.name: batch_of(dataset, batch or settings.batch_size, dtype)}
    outputs = {name: sessions[name].run(None, put_feeds) for name in (PRUNED, SPARSE)}
    identical = all(np.array_equal(a, b) for a, b in zip(outputs[PRUNED], outputs[SPARSE], strict=True))
    progress(f"experiment 3: {label}: timing batch {len(lat_feeds[model_input.name])} latency")
    latency = time_sessions(sessions, lat_feeds, settings)
    progress(f"experiment 3: {label}: timing batch {len(put_feeds[model_input.name])} throughput")
    throughput = time_sessions(sessions, put_feeds, settings)
    accuracy = measured_accuracy(models, dataset, settings)
    facts = SearchFacts(
        label=label,
        path=str(path),
        data=dataset.name,
        samples=len(dataset),
        method=settings.methods[0],
        chosen=str(report.search.get("chosen")),
        levels=chosen_levels(report),
        sparsity=report.overall,
        search_drop=search_drop,
        evaluations=int(report.search.get("evaluations", 0)),  # type: ignore[call-overload]
        search_seconds=report.seconds,
        moved_to_sparse=storage.moved,
        kept_dense=storage.kept_dense,
        sparse_outputs_identical=identical,
        latency_batch=latency.batch,
        throughput_batch=throughput.batch,
        fixed_batch=batch,
        latency_noise=band_facts(latency),
        throughput_noise=band_facts(throughput),
    )
    return facts, timing_rows(label, models, targets, latency, throughput, accuracy, settings.metric)


def chosen_levels(report: SparsifyReport) -> object:
    """The level(s) the search chose: one number (uniform) or one per weight (per-layer)."""
    key = "per_layer" if report.search.get("chosen") == "per-layer" else "uniform"
    found = report.search.get(key)
    if not isinstance(found, dict):
        return None
    return found.get("levels", found.get("level"))


def plot_speed(rows: Sequence[TimingRow], facts: Sequence[SearchFacts]) -> Figure:
    """Two panels (latency, throughput): per model, a bar per variant with its interval. Instead of the dense
    model's own ratio (1.0 by definition) its second session is shown: what an unchanged model measures."""
    figure = new_figure(max(9.0, 2.5 * len(facts) + 4), 4.5)
    panels = figure.subplots(1, 2)
    shown = [(NOISE_PROBE, "dense, 2nd session (noise)"), (PRUNED, PRUNED), (SPARSE, SPARSE)]
    width = 0.8 / len(shown)
    for axes, kind in zip(panels, ("latency", "throughput"), strict=True):
        for offset, (variant, name) in enumerate(shown):
            heights, lows, highs = [], [], []
            for fact in facts:
                median, low, high = speed_bar(rows, fact, variant, kind)
                heights.append(median)
                lows.append(median - low)
                highs.append(high - median)
            xs = np.arange(len(facts)) + (offset - (len(shown) - 1) / 2) * width
            axes.bar(xs, heights, width, yerr=[lows, highs], capsize=3, label=name)
        axes.axhline(1.0, color="black", linewidth=0.8)
        batches = [fact.latency_batch if kind == "latency" else fact.throughput_batch for fact in facts]
        ticks = [f"{f.label}\n{f.sparsity:.0%} sparse, batch {b}" for f, b in zip(facts, batches, strict=True)]
        axes.set_xticks(np.arange(len(facts)), ticks)
        axes.set_ylabel("ratio vs dense (>1 = faster)")
        axes.set_title(kind)
        axes.grid(True, axis="y", alpha=0.4)
    panels[0].legend(fontsize=8, loc="lower left")
    figure.suptitle(f"Experiment 3: median per-round ratio vs the dense model, {timing.NOISE_CONFIDENCE:.0%} interval")
    return figure


def speed_bar(rows: Sequence[TimingRow], fact: SearchFacts, variant: str, kind: str) -> tuple[float, float, float]:
    """(median ratio, interval low, interval high) of one bar."""
    if variant == NOISE_PROBE:
        noise = fact.latency_noise if kind == "latency" else fact.throughput_noise
        low, high = noise["interval"]  # type: ignore[misc]
        return float(noise["median"]), float(low), float(high)  # type: ignore[arg-type]
    row = next(r for r in rows if r.model == fact.label and r.variant == variant)
    return getattr(row, f"{kind}_ratio"), getattr(row, f"{kind}_ci_low"), getattr(row, f"{kind}_ci_high")


def speed_markdown(
    facts: Sequence[SearchFacts], rows: Sequence[TimingRow], settings: SparsityExperimentSettings, env: dict
) -> str:
    k = settings.metric[-1]
    lines = [
        "# Experiment 3: what the sparsity found inside the budget gives under ONNX Runtime (CPU)",
        "",
        f"environment: {timing.environment_line(env)}",
        "",
        f"settings: budget search with {settings.methods[0]} (uniform scan by 5% then bisection, and per-layer "
        f"levels; the sparsest inside wins), top-{k} drop at most {settings.budget * 100:.4g} points, data "
        f"{settings.data or 'none (seeded random inputs, fidelity)'}; timing: CPU provider, all graph optimizations, "
        f"{settings.threads} intra-op thread(s), inter-op 1, spinning off, every session created before timing, "
        f"{settings.warmup} warm-up rounds then {settings.rounds} timed rounds, each running every session once in "
        "rotating order with the garbage collector off.",
        "",
        "Ratios are medians over rounds of dense time / variant time in the same round (above 1 = faster), with "
        f"{timing.NOISE_CONFIDENCE:.0%} bootstrap intervals; a second session of the dense model is timed alongside as "
        'a noise probe, and a ratio whose interval reaches into its band is "within noise". Accuracy is measured '
        "on each variant's own session; sizes are serialized bytes.",
        "",
    ]
    for fact in facts:
        lines += model_section(fact, [r for r in rows if r.model == fact.label], settings)
    return "\n".join(lines)


def model_section(fact: SearchFacts, rows: Sequence[TimingRow], settings: SparsityExperimentSettings) -> list[str]:
    k = settings.metric[-1]
    latency_batch, throughput_batch = rows[0].latency_batch, rows[0].throughput_batch
    header = [
        "variant",
        "sparsity",
        "bytes",
        "size vs dense",
        f"latency ms (batch {latency_batch}) median",
        "p95",
        "latency ratio",
        "90% CI",
        "vs noise",
        f"samples/s (batch {throughput_batch})",
        "throughput ratio",
        "90% CI",
        "vs noise",
        "top-1",
        "top-5",
        f"Δtop-{k}",
    ]
    dense_bytes = rows[0].bytes
    table = [
        [
            r.variant,
            f"{r.sparsity:.2%}",
            f"{r.bytes:,}",
            f"{r.bytes / dense_bytes:.3f}x",
            f"{r.latency_median_ms:.4f}",
            f"{r.latency_p95_ms:.4f}",
            f"{r.latency_ratio:.3f}x",
            f"{r.latency_ci_low:.3f}-{r.latency_ci_high:.3f}",
            r.latency_verdict,
            f"{r.throughput:,.0f}",
            f"{r.throughput_ratio:.3f}x",
            f"{r.throughput_ci_low:.3f}-{r.throughput_ci_high:.3f}",
            r.throughput_verdict,
            f"{r.top1:.2%}",
            f"{r.top5:.2%}",
            points(r.drop),
        ]
        for r in rows
    ]
    lines = [f"## {fact.label}", "", search_line(fact, settings), "", *markdown_table(header, table), ""]
    return lines + [f"- {note}" for note in model_notes(fact, rows, settings)] + [""]


def search_line(fact: SearchFacts, settings: SparsityExperimentSettings) -> str:
    return (
        f"search: {fact.method}, {chosen_text(fact)}, {fact.sparsity:.2%} of the prunable weights zero, "
        f"top-{settings.metric[-1]} change {points(fact.search_drop)} points as the search measured it on {fact.data} "
        f"({fact.samples} samples; {fact.evaluations} evaluations, {fact.search_seconds:.1f} s)"
    )


def chosen_text(fact: SearchFacts) -> str:
    if isinstance(fact.levels, float):
        return f"uniform level {fact.levels:.2%}"
    return f"{fact.chosen} levels (per weight in the settings JSON)"


def model_notes(fact: SearchFacts, rows: Sequence[TimingRow], settings: SparsityExperimentSettings) -> list[str]:
    """What the numbers above are, in words: batches, noise band, storage, the measured ratios."""
    by_name = {r.variant: r for r in rows}
    notes = []
    if fact.fixed_batch is not None:
        notes.append(
            f"the model's batch dim is fixed to {fact.fixed_batch}: latency and throughput were both measured at "
            f"batch {fact.fixed_batch} (not {settings.batch_size})"
        )
    for kind, noise in (("latency", fact.latency_noise), ("throughput", fact.throughput_noise)):
        low, high = noise["interval"]  # type: ignore[index]
        band_low, band_high = noise["bounds"]  # type: ignore[index]
        notes.append(
            f"noise ({kind}): the second dense session measured {noise['median']:.3f}x "
            f"(interval {low:.3f}-{high:.3f}; band {band_low:.3f}-{band_high:.3f})"
        )
    kept = "; ".join(f"{name}: {why}" for name, why in fact.kept_dense.items()) or "none"
    identical = "identical to" if fact.sparse_outputs_identical else "DIFFERENT from"
    notes.append(
        f"sparse initializers: {len(fact.moved_to_sparse)} of {len(fact.moved_to_sparse) + len(fact.kept_dense)} "
        f"prunable weights stored as COO (kept dense, as COO would be larger: {kept}); its outputs were "
        f"{identical} the pruned model's on the throughput batch; file {by_name[SPARSE].bytes:,} bytes vs "
        f"{by_name[PRUNED].bytes:,} dense-stored"
    )
    for variant in (PRUNED, SPARSE):
        r = by_name[variant]
        notes.append(
            f"measured, {variant}: latency {r.latency_ratio:.3f}x ({r.latency_verdict}), throughput "
            f"{r.throughput_ratio:.3f}x ({r.throughput_verdict}) vs the dense model"
        )
    notes.append(
        "ONNX Runtime's CPU provider converts sparse initializers to dense tensors when it creates a session, "
        "so the sparse-initializer row runs the same kernels on the same weights as the pruned row; whether "
        "zeros change speed at all is what the ratios above measure, on this machine, in this run"
    )
    return notes


HOW = {
    "timing": "CPUExecutionProvider, ORT_ENABLE_ALL, intra-op threads as set, inter-op 1, spinning off; "
    "onnxsat.timing.time_rounds (rotating order, gc off); ratios = dense time / variant time per round"
}
"""How the variants were timed, as the settings JSON says."""


def experiment_three(settings: SparsityExperimentSettings, progress: Progress | None = None) -> ExperimentResult:
    """Per model: the sparsest model inside the budget, timed against the dense one; writes plot, CSV, md, JSON."""
    figures = {"experiment3.png": plot_speed}
    return run_experiment(3, settings, progress, measure_model, speed_markdown, figures, TimingRow, HOW)
