"""The seed write-up's experiments 2 and 3, measured correctly: how sparse, and what sparsity gives.

- **Experiment 2** ("how sparse can we go?"): for every model, method and level, prune with
  :func:`~onnxsat.sparsity.methods.prune_masks` and measure top-1 and top-5 against the data's labels
  (or, without data or labels, fidelity to the dense model's own predictions). The seed timed nothing
  here but measured only the relative method, rounded drops to whole points and built a new session
  per level; this version runs every method asked for, keeps fractions exact, and scores every level
  through one :class:`~onnxsat.sparsity.search.Evaluator` per model (pruned weights fed as inputs).
- **Experiment 3** ("what does sparsity give?"): the seed hard-coded the levels found by experiment 2,
  timed only the last batch of each run, disabled ORT's optimizations and compared different models.
  Here the budget search of :func:`~onnxsat.sparsity.pipeline.sparsify_model` finds the sparsest model
  inside the budget, then the dense model, the pruned model (dense storage) and the pruned model with
  sparse initializers are timed under ONNX Runtime with every graph optimization, a fixed number of
  threads, all sessions created before any is timed, interleaved rounds after warm-up (``time_rounds``).

Settings decided deliberately (and written to ``experiment*_settings.json``):

- The baseline and every pruned variant run under the same ORT level (all optimizations: how the
  models would be deployed). The seed mixed levels between experiments.
- Drops are baseline minus pruned, as fractions; the markdown shows them as points (0.01 = 1 point).
- Sparsity is zeros / elements over the prunable weights (Conv, ConvTranspose, Gemm, MatMul weights);
  biases and other tensors are not counted. The reached sparsity is reported beside the requested level.
- Speed ratios are medians over rounds of (dense time / variant time) *in that round*, which cancels
  drift; a second session of the dense model is timed as a noise probe, and a ratio is "faster" or
  "slower" only when its 90% bootstrap interval lies outside the probe's band (as ``bench compare``).
- Without ``data``, inputs are seeded standard-normal samples and the metric is fidelity; a model
  whose batch dim is fixed is fed batches of exactly that size (samples are trimmed to a multiple).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from onnxsat import model_io
from onnxsat.bench.compare import NOISE_CONFIDENCE, NoiseBand, load_whole, median_interval, noise_band, time_rounds
from onnxsat.data.metrics import Accuracy, evaluate, run_logits
from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import SettingsError
from onnxsat.sparsity.calibration import channel_norms
from onnxsat.sparsity.methods import METHODS, prune_masks
from onnxsat.sparsity.pipeline import SparsifyOptions, sparsify_model
from onnxsat.sparsity.report import SparsifyReport
from onnxsat.sparsity.search import METRICS, Evaluator, data_input
from onnxsat.sparsity.storage import to_sparse_initializers
from onnxsat.sparsity.targets import PrunableWeight, prunable_weights
from onnxsat.verify import DEFAULT_DYNAMIC_DIM, random_inputs, session

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DEFAULT_LEVELS = tuple(round(0.10 + 0.05 * step, 2) for step in range(16))
"""10% to 85% in steps of 5%: the seed's sweep."""
RANDOM_SEED = 0
"""Seed of the standard-normal inputs used when no data is given."""
DENSE, PRUNED, SPARSE = "dense", "pruned", "pruned, sparse initializers"
VARIANTS = (DENSE, PRUNED, SPARSE)
NOISE_PROBE = "dense, second session (noise probe)"
_ALL = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ settings


@dataclass
class SparsityExperimentSettings:
    """What both experiments run on and how; every field is written to the settings JSON."""

    models: list[Path]
    out: Path
    methods: list[str] = field(default_factory=lambda: ["relative"])
    """Any of ``METHODS``; experiment 3 searches with the first."""
    data: str | None = None
    """A ``load_dataset`` spec; None: seeded random inputs (``samples`` of them) and fidelity to the dense model."""
    samples: int = 256
    budget: float = 0.05
    """Largest allowed drop of ``metric``, a fraction (0.05 = 5 points): the seed's."""
    metric: str = "top5"
    levels: list[float] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    threads: int = 1
    rounds: int = 50
    warmup: int = 10
    batch_size: int = 32
    """Evaluation batch, and the batch throughput is measured at (unless the model fixes its batch)."""

    def check(self) -> None:
        """Reject what cannot run, in one line each; sort and de-duplicate the levels."""
        if not self.models:
            raise SettingsError("give at least one model")
        if not self.methods:
            raise SettingsError("give at least one method")
        for method in self.methods:
            if method not in METHODS:
                raise SettingsError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise SettingsError(f"a method is listed twice: {', '.join(self.methods)}")
        if self.metric not in METRICS:
            raise SettingsError(f"unknown metric {self.metric!r}; choose from {', '.join(METRICS)}")
        if not 0.0 <= self.budget < 1.0:
            raise SettingsError(f"--budget must be in [0%, 100%), got {self.budget:.2%}")
        if not self.levels or any(not 0.0 <= level < 1.0 for level in self.levels):
            raise SettingsError(f"--levels must be one or more values in [0, 1), got {list(self.levels)}")
        self.levels = sorted({float(level) for level in self.levels})
        counts = {"--samples": self.samples, "--threads": self.threads, "--rounds": self.rounds}
        for option, value in {**counts, "--batch-size": self.batch_size}.items():
            if value < 1:
                raise SettingsError(f"{option} must be at least 1, got {value}")
        if self.warmup < 0:
            raise SettingsError(f"--warmup must be at least 0, got {self.warmup}")
        self.models = [Path(model) for model in self.models]
        for model in self.models:
            model_io.check_input_path(model)

    def prepare_out(self) -> Path:
        """The output folder, created if needed (an OutputPathError line if it cannot be)."""
        folder = model_io.output_folder(str(self.out), "--out")
        assert folder is not None
        self.out = folder
        return folder


@dataclass
class ExperimentResult:
    """What one experiment wrote and measured; ``markdown`` is what the CLI prints."""

    experiment: int
    paths: list[Path]
    rows: list[LevelRow] | list[TimingRow]
    markdown: str
    details: dict[str, object] = field(default_factory=dict)
    """The settings JSON's content: settings, environment and per-model facts."""


@dataclass
class LevelRow:
    """Experiment 2: one model, method and requested level. Accuracies and drops are fractions."""

    model: str
    method: str
    level: float
    sparsity: float
    top1: float
    top5: float
    drop1: float
    drop5: float
    kind: str
    baseline_top1: float
    baseline_top5: float
    samples: int
    note: str = ""

    def drop(self, metric: str) -> float:
        return self.drop1 if metric == "top1" else self.drop5


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


# ------------------------------------------------------------------------------------ shared helpers


def environment() -> dict[str, object]:
    """Versions and CPUs that the figures depend on."""
    versions = {}
    for package in ("onnxruntime", "onnx", "numpy", "matplotlib"):
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


def environment_line(env: dict[str, object]) -> str:
    packages = ", ".join(f"{name} {env[name]}" for name in ("onnxruntime", "onnx", "numpy", "matplotlib"))
    return (
        f"environment: python {env['python']}, {env['cpu_count']} CPUs ({env['usable_cpus']} usable), "
        f"{env['machine']}; {packages}"
    )


def model_labels(paths: Sequence[Path]) -> list[str]:
    """File stems, numbered when two models share one."""
    stems = [Path(p).stem for p in paths]
    return [f"{i + 1}-{s}" if stems.count(s) > 1 else s for i, s in enumerate(stems)]


def input_dims(model: onnx.ModelProto) -> list[int | None]:
    """The data input's dims, None where dynamic."""
    dims = data_input(model).type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]


def fixed_batch(model: onnx.ModelProto) -> int | None:
    dims = input_dims(model)
    return dims[0] if dims else None


def sample_count(settings: SparsityExperimentSettings, batch: int | None, label: str) -> int:
    """``samples``, trimmed to a multiple of a fixed batch (the evaluator feeds whole batches only)."""
    step = batch or 1
    count = settings.samples // step * step
    if count == 0:
        raise SettingsError(f"{label}: --samples {settings.samples} is fewer than the model's fixed batch {step}")
    return count


def random_dataset(model: onnx.ModelProto, count: int) -> Dataset:
    """``count`` seeded standard-normal samples (``verify.random_inputs``), unlabelled."""
    name, dims = data_input(model).name, input_dims(model)
    rest = [d if d is not None else DEFAULT_DYNAMIC_DIM for d in dims[1:]]
    per_call = dims[0] or count
    chunks = [
        random_inputs(model, {name: [per_call, *rest]}, RANDOM_SEED + index)[name] for index in range(count // per_call)
    ]
    return Dataset(np.concatenate(chunks), None, f"random normal inputs (seed {RANDOM_SEED})")


def experiment_dataset(model: onnx.ModelProto, settings: SparsityExperimentSettings, label: str) -> Dataset:
    """The samples both experiments measure a model on: the data spec's, or seeded random inputs."""
    batch = fixed_batch(model)
    count = sample_count(settings, batch, label)
    if settings.data is None:
        return random_dataset(model, count)
    dataset = load_dataset(settings.data, input_dims(model), limit=count)
    usable = len(dataset) // (batch or 1) * (batch or 1)
    if usable == 0:
        raise SettingsError(f"{label}: {dataset.name} has {len(dataset)} samples, fewer than the fixed batch {batch}")
    return dataset.take(usable)


def weights_of(model: onnx.ModelProto, targets: list[PrunableWeight]) -> dict[str, np.ndarray]:
    names = {t.name for t in targets}
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in names}


def targets_of(model: onnx.ModelProto, label: str) -> list[PrunableWeight]:
    targets = prunable_weights(model)
    if not targets:
        raise SettingsError(f"{label}: no prunable weights (Conv, ConvTranspose, Gemm or MatMul initializers)")
    return targets


def prunable_sparsity(model: onnx.ModelProto, names: Sequence[str]) -> float:
    """Zeros / elements over the named weights, whether stored dense or as sparse initializers."""
    wanted, zeros, total = set(names), 0, 0
    for tensor in model.graph.initializer:
        if tensor.name in wanted:
            value = numpy_helper.to_array(tensor)
            zeros, total = zeros + value.size - int(np.count_nonzero(value)), total + value.size
    for sparse in model.graph.sparse_initializer:
        if sparse.values.name in wanted:
            size = math.prod(sparse.dims)
            zeros += size - int(np.count_nonzero(numpy_helper.to_array(sparse.values)))
            total += size
    return zeros / total if total else 0.0


def points(drop: float) -> str:
    """A drop (fraction) as the signed change in points the tables show: 0.012 -> "-1.2"."""
    change = -drop * 100
    return f"{change:+.1f}" if abs(change) >= 0.05 else "0.0"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table: the first column left-aligned, the others right-aligned."""
    escape = [[cell.replace("|", "\\|") for cell in row] for row in (header, *rows)]
    lines = ["| " + " | ".join(escape[0]) + " |", "| --- | " + " | ".join("---:" for _ in header[1:]) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in escape[1:]]


def csv_text(rows: Sequence[LevelRow] | Sequence[TimingRow], kind: type) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    names = [f.name for f in fields(kind)]
    writer.writerow(names)
    for row in rows:
        values = asdict(row)
        writer.writerow([f"{values[n]:.6g}" if isinstance(values[n], float) else values[n] for n in names])
    return out.getvalue()


def write_bytes(data: bytes, path: Path) -> None:
    """All or nothing, as every other ONNXSat output."""
    model_io._write_atomically(path, lambda temporary: Path(temporary).write_bytes(data))


def save_figure(figure: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    write_bytes(buffer.getvalue(), path)


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib figure on the Agg canvas: no pyplot, so no global backend or state is touched."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def settings_json(settings: SparsityExperimentSettings, env: dict[str, object], extra: dict[str, object]) -> str:
    data = {"settings": asdict(settings), "environment": env, **extra}
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def metric_value(accuracy: Accuracy, metric: str) -> float:
    return accuracy.top1 if metric == "top1" else accuracy.top5


def level_text(level: float) -> str:
    return f"{level * 100:.4g}%"


# ------------------------------------------------------------------------------------- experiment 2


@dataclass
class SweepModel:
    """Experiment 2's facts about one model: where its figures come from."""

    label: str
    path: str
    data: str
    samples: int
    kind: str
    baseline: Accuracy
    dense_sparsity: float
    weights: int
    elements: int
    eval_batch: int
    seconds: float = 0.0


def sweep_model(
    path: Path, label: str, settings: SparsityExperimentSettings, progress: Progress
) -> tuple[SweepModel, list[LevelRow]]:
    """Every method at every level on one model, scored by one Evaluator (one ORT session)."""
    start = time.perf_counter()
    model = load_whole(path)
    targets = targets_of(model, label)
    weights = weights_of(model, targets)
    dataset = experiment_dataset(model, settings, label)
    batch = fixed_batch(model) or settings.batch_size
    evaluator = Evaluator(model, targets, weights, dataset, settings.metric, batch)
    base = evaluator.baseline
    info = SweepModel(
        label,
        str(path),
        dataset.name,
        len(dataset),
        base.kind,
        base,
        prunable_sparsity(model, [t.name for t in targets]),
        len(targets),
        sum(t.size for t in targets),
        batch,
    )
    progress(
        f"experiment 2: {label}: {info.weights} prunable weights ({info.elements:,} elements), {dataset.name} "
        f"x{len(dataset)}, baseline {base.kind} top-1 {base.top1:.2%}, top-5 {base.top5:.2%}"
    )
    norms = None
    if "calibrated" in settings.methods:
        name = data_input(model).name
        norms = channel_norms(model, targets, ({name: inputs} for inputs, _ in dataset.batches(batch)))
    rows = []
    for method in settings.methods:
        for level in settings.levels:
            pruned = prune_masks(method, targets, weights, level, norms)
            _, accuracy = evaluator.drop(pruned.masks)
            row = LevelRow(
                label,
                method,
                level,
                pruned.sparsity,
                accuracy.top1,
                accuracy.top5,
                base.top1 - accuracy.top1,
                base.top5 - accuracy.top5,
                accuracy.kind,
                base.top1,
                base.top5,
                accuracy.samples,
                "; ".join(pruned.notes),
            )
            rows.append(row)
            progress(
                f"experiment 2: {label}: {method} {level_text(level)}: sparsity {row.sparsity:.2%}, "
                f"top-1 {points(row.drop1)} pts, top-5 {points(row.drop5)} pts"
            )
    info.seconds = time.perf_counter() - start
    return info, rows


def plot_drops(
    rows: Sequence[LevelRow], models: Sequence[SweepModel], settings: SparsityExperimentSettings, k: int
) -> Figure:
    """Change of top-``k`` in points vs the reached sparsity, one curve per model x method, budget line."""
    figure = new_figure(7.5, 4.8)
    axes = figure.add_subplot()
    markers = "osD^vP*X"
    curve = 0
    for info in models:
        for method in settings.methods:
            mine = [r for r in rows if r.model == info.label and r.method == method]
            xs = [info.dense_sparsity * 100] + [r.sparsity * 100 for r in mine]
            ys = [0.0] + [-(r.drop1 if k == 1 else r.drop5) * 100 for r in mine]
            axes.plot(xs, ys, marker=markers[curve % len(markers)], markersize=4, label=f"{info.label}, {method}")
            curve += 1
    governs = "" if settings.metric == f"top{k}" else f", set on {settings.metric}"
    axes.axhline(-settings.budget * 100, color="red", linestyle="--", linewidth=1, label=f"budget{governs}")
    kinds = sorted({info.kind for info in models})
    axes.set_xlabel("sparsity of the prunable weights (%)")
    axes.set_ylabel(f"top-{k} {' / '.join(kinds)} change vs dense (points)")
    axes.set_title(f"Experiment 2: top-{k} change vs sparsity (no retraining)")
    axes.set_xlim(left=0)
    axes.grid(True, alpha=0.4)
    axes.legend(fontsize=8)
    return figure


def budget_summary(rows: Sequence[LevelRow], metric: str, budget: float) -> tuple[LevelRow | None, LevelRow | None]:
    """The highest level whose ``metric`` drop is inside ``budget``, and the lowest level that is not."""
    inside = [r for r in rows if r.drop(metric) <= budget]
    outside = [r for r in rows if r.drop(metric) > budget]
    return (max(inside, key=lambda r: r.level) if inside else None), (
        min(outside, key=lambda r: r.level) if outside else None
    )


def sweep_markdown(
    models: Sequence[SweepModel], rows: Sequence[LevelRow], settings: SparsityExperimentSettings, env: dict
) -> str:
    metric, budget = settings.metric, settings.budget
    k = metric[-1]
    lines = [
        "# Experiment 2: accuracy change vs unstructured sparsity (no retraining)",
        "",
        environment_line(env),
        "",
        f"settings: methods {', '.join(settings.methods)}; {len(settings.levels)} levels "
        f"{', '.join(level_text(v) for v in settings.levels)}; data {settings.data or 'none (seeded random inputs)'}, "
        f"at most {settings.samples} samples; budget: top-{k} drop at most {budget * 100:.4g} points; every level "
        "scored by one ONNX Runtime session per model (all optimizations, 1 thread, pruned weights fed as inputs).",
        "",
        "Sparsity is zeros / elements of the prunable weights (Conv, ConvTranspose, Gemm, MatMul; biases not "
        "counted), as reached. Changes are in points against the dense model (accuracy vs labels, or fidelity: "
        "agreement with the dense model's predictions when there are no labels); "
        f"✗ marks a top-{k} change outside the budget.",
        "",
    ]
    for info in models:
        lines += [f"## {info.label}", "", model_line(info), ""]
        header = ["level"]
        for method in settings.methods:
            header += [f"{method} sparsity", f"{method} Δtop-1", f"{method} Δtop-5"]
        table = []
        for level in settings.levels:
            cells = [level_text(level)]
            for method in settings.methods:
                row = next(r for r in rows if r.model == info.label and r.method == method and r.level == level)
                mark = " ✗" if row.drop(metric) > budget else ""
                one = points(row.drop1) + (mark if metric == "top1" else "")
                five = points(row.drop5) + (mark if metric == "top5" else "")
                cells += [f"{row.sparsity:.2%}", one, five]
            table.append(cells)
        lines += [*markdown_table(header, table), ""]
        lines += [f"- {note}" for note in method_notes(info, rows, settings)]
        lines.append("")
    lines += summary_section(models, rows, settings)
    return "\n".join(lines)


def model_line(info: SweepModel) -> str:
    return (
        f"baseline: top-1 {info.baseline.top1:.2%}, top-5 {info.baseline.top5:.2%} ({info.kind} on {info.data}, "
        f"{info.samples} samples, batch {info.eval_batch}); {info.weights} prunable weights, {info.elements:,} "
        f"elements, {info.dense_sparsity:.2%} zero before pruning; {info.seconds:.1f} s"
    )


def method_notes(info: SweepModel, rows: Sequence[LevelRow], settings: SparsityExperimentSettings) -> list[str]:
    """One line per method whose pruning left notes (e.g. a threshold beyond the method's bound)."""
    notes = []
    for method in settings.methods:
        noted = [r for r in rows if r.model == info.label and r.method == method and r.note]
        if noted:
            levels = ", ".join(level_text(r.level) for r in noted)
            notes.append(f"{method} at {levels}: {noted[0].note} (each level's note is in the CSV)")
    return notes


def summary_section(
    models: Sequence[SweepModel], rows: Sequence[LevelRow], settings: SparsityExperimentSettings
) -> list[str]:
    """Per model and method: the highest level inside the budget, with what it reached."""
    metric, k = settings.metric, settings.metric[-1]
    header = [
        "model",
        "method",
        f"baseline top-{k}",
        "highest level inside",
        "sparsity reached",
        f"Δtop-{k} there",
        "non-zeros kept",
        "first level outside",
    ]
    table, notes = [], []
    for info in models:
        for method in settings.methods:
            mine = [r for r in rows if r.model == info.label and r.method == method]
            best, first_out = budget_summary(mine, metric, settings.budget)
            base = info.baseline.top1 if metric == "top1" else info.baseline.top5
            out_text = level_text(first_out.level) if first_out else "none"
            if best is None:
                table.append([info.label, method, f"{base:.2%}", "none", "-", "-", "-", out_text])
                continue
            kept = f"1/{1 / (1 - best.sparsity):.2f}" if best.sparsity < 1 else "0"
            table.append(
                [
                    info.label,
                    method,
                    f"{base:.2%}",
                    level_text(best.level),
                    f"{best.sparsity:.2%}",
                    points(best.drop(metric)),
                    kept,
                    out_text,
                ]
            )
            if first_out is not None and first_out.level < best.level:
                notes.append(
                    f"{info.label}, {method}: not monotone: {level_text(first_out.level)} left the budget but "
                    f"{level_text(best.level)} is inside it again"
                )
    lines = [
        f"## Summary: highest level whose top-{k} drop stays inside {settings.budget * 100:.4g} points",
        "",
        *markdown_table(header, table),
        "",
        "- non-zeros kept: the fraction of the prunable weights' elements left non-zero at that level.",
        *(f"- {note}" for note in notes),
        "",
    ]
    return lines


def experiment_two(settings: SparsityExperimentSettings, progress: Progress | None = None) -> ExperimentResult:
    """Accuracy change vs sparsity for every model, method and level; writes plots, CSV, markdown, JSON."""
    report = progress or _stderr
    settings.check()
    out = settings.prepare_out()
    env = environment()
    models, rows = [], []
    for path, label in zip(settings.models, model_labels(settings.models), strict=True):
        info, mine = sweep_model(path, label, settings, report)
        models.append(info)
        rows.extend(mine)
    markdown = sweep_markdown(models, rows, settings, env)
    paths = {
        "top1": out / "experiment2_top1.png",
        "top5": out / "experiment2_top5.png",
        "csv": out / "experiment2.csv",
        "md": out / "experiment2.md",
        "json": out / "experiment2_settings.json",
    }
    save_figure(plot_drops(rows, models, settings, 1), paths["top1"])
    save_figure(plot_drops(rows, models, settings, 5), paths["top5"])
    model_io.write_text_atomic(csv_text(rows, LevelRow), paths["csv"])
    model_io.write_text_atomic(markdown + "\n", paths["md"])
    details = {
        "experiment": 2,
        "models": [asdict(info) for info in models],
        "evaluation": "one ONNX Runtime CPU session per model (ORT_ENABLE_ALL, 1 intra-op thread), prunable "
        "weights fed as graph inputs; drops = baseline - pruned, fractions",
        "random_seed": RANDOM_SEED if settings.data is None else None,
    }
    model_io.write_text_atomic(settings_json(settings, env, details), paths["json"])
    report(f"experiment 2: wrote {', '.join(str(p) for p in paths.values())}")
    return ExperimentResult(2, list(paths.values()), rows, markdown, details)


# ------------------------------------------------------------------------------------- experiment 3


@dataclass
class Timing:
    """One timing pass (latency or throughput) over the four sessions, in VARIANTS order + the probe."""

    batch: int
    times: dict[str, list[float]]
    ratios: dict[str, list[float]]
    noise: NoiseBand

    def verdict(self, variant: str) -> str:
        """Faster or slower only when the ratio's interval lies wholly outside the noise probe's band."""
        if variant == DENSE:
            return "baseline"
        low, high = median_interval(self.ratios[variant])
        band_low, band_high = self.noise.bounds
        if low > band_high:
            return "faster"
        if high < band_low:
            return "slower"
        return "within noise"


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
        limit=len(dataset),
        batch_size=fixed_batch(model) or settings.batch_size,
    )
    return sparsify_model(model, options, source=label)


def batch_of(dataset: Dataset, size: int, dtype: type) -> np.ndarray:
    """The first ``size`` samples (repeated if the data has fewer), as the session's input type."""
    picked = dataset.inputs[:size]
    if len(picked) < size:
        picked = np.resize(picked, (size, *picked.shape[1:]))
    return np.ascontiguousarray(picked, dtype=dtype)


def time_sessions(
    sessions: dict[str, ort.InferenceSession], feeds: dict[str, np.ndarray], settings: SparsityExperimentSettings
) -> Timing:
    """Interleaved rounds over every session (``time_rounds``); ratios are per round, against the dense one."""
    names = list(sessions)
    runners = [lambda s=sessions[name]: s.run(None, feeds) for name in names]
    times = dict(zip(names, time_rounds(runners, settings.rounds, settings.warmup), strict=True))
    ratios = {name: [d / t for d, t in zip(times[DENSE], own, strict=True)] for name, own in times.items()}
    batch = len(next(iter(feeds.values())))
    return Timing(batch, times, ratios, noise_band(ratios[NOISE_PROBE]))


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
    targets: list[PrunableWeight],
    latency: Timing,
    throughput: Timing,
    accuracy: dict[str, Accuracy],
    metric: str,
) -> list[TimingRow]:
    names = [t.name for t in targets]
    base = accuracy[DENSE]
    rows = []
    for variant in VARIANTS:
        lat_low, lat_high = (1.0, 1.0) if variant == DENSE else median_interval(latency.ratios[variant])
        put_low, put_high = (1.0, 1.0) if variant == DENSE else median_interval(throughput.ratios[variant])
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
    dense = load_whole(path)
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
    search_drop = metric_value(report.baseline, settings.metric) - metric_value(report.accuracy, settings.metric)
    progress(
        f"experiment 3: {label}: {report.overall:.2%} sparsity ({report.search.get('chosen')}), search change "
        f"{points(search_drop)} pts, {report.seconds:.1f} s"
    )
    sessions = {name: session(models[name], _ALL, settings.threads) for name in (DENSE, PRUNED, SPARSE)}
    sessions[NOISE_PROBE] = session(dense, _ALL, settings.threads)
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
    figure.suptitle(f"Experiment 3: median per-round ratio vs the dense model, {NOISE_CONFIDENCE:.0%} interval")
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
        environment_line(env),
        "",
        f"settings: budget search with {settings.methods[0]} (uniform scan by 5% then bisection, and per-layer "
        f"levels; the sparsest inside wins), top-{k} drop at most {settings.budget * 100:.4g} points, data "
        f"{settings.data or 'none (seeded random inputs, fidelity)'}; timing: CPU provider, all graph optimizations, "
        f"{settings.threads} intra-op thread(s), inter-op 1, spinning off, every session created before timing, "
        f"{settings.warmup} warm-up rounds then {settings.rounds} timed rounds, each running every session once in "
        "rotating order with the garbage collector off.",
        "",
        "Ratios are medians over rounds of dense time / variant time in the same round (above 1 = faster), with "
        f"{NOISE_CONFIDENCE:.0%} bootstrap intervals; a second session of the dense model is timed alongside as "
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


def experiment_three(settings: SparsityExperimentSettings, progress: Progress | None = None) -> ExperimentResult:
    """Per model: the sparsest model inside the budget, timed against the dense one; writes plot, CSV, md, JSON."""
    report = progress or _stderr
    settings.check()
    out = settings.prepare_out()
    env = environment()
    facts, rows = [], []
    for path, label in zip(settings.models, model_labels(settings.models), strict=True):
        fact, mine = measure_model(path, label, settings, report)
        facts.append(fact)
        rows.extend(mine)
    markdown = speed_markdown(facts, rows, settings, env)
    paths = {
        "png": out / "experiment3.png",
        "csv": out / "experiment3.csv",
        "md": out / "experiment3.md",
        "json": out / "experiment3_settings.json",
    }
    save_figure(plot_speed(rows, facts), paths["png"])
    model_io.write_text_atomic(csv_text(rows, TimingRow), paths["csv"])
    model_io.write_text_atomic(markdown + "\n", paths["md"])
    details = {
        "experiment": 3,
        "models": [asdict(fact) for fact in facts],
        "timing": "CPUExecutionProvider, ORT_ENABLE_ALL, intra-op threads as set, inter-op 1, spinning off; "
        "onnxsat.bench.compare.time_rounds (rotating order, gc off); ratios = dense time / variant time per round",
        "random_seed": RANDOM_SEED if settings.data is None else None,
    }
    model_io.write_text_atomic(settings_json(settings, env, details), paths["json"])
    report(f"experiment 3: wrote {', '.join(str(p) for p in paths.values())}")
    return ExperimentResult(3, list(paths.values()), rows, markdown, details)
