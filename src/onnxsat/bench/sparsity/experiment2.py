"""Experiment 2, "how sparse can we go?": accuracy change vs unstructured sparsity, no retraining.

For every model, method and level, zero weights with :func:`~onnxsat.sparsity.methods.sparsity_masks` and measure
top-1 and top-5 against the data's labels (or, without data or labels, fidelity to the dense model's own
predictions). Every method asked for is run, drops are kept as exact fractions (not rounded to whole
points), and every level is scored through one :class:`~onnxsat.sparsity.search.Evaluator` per model (pruned
weights fed as inputs) instead of a new session per level.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from onnxsat.bench.sparsity.common import (
    as_accuracy,
    experiment_dataset,
    fixed_batch,
    level_text,
    points,
    prunable_sparsity,
    run_experiment,
    targets_of,
    weights_of,
)
from onnxsat.bench.writing import markdown_table
from onnxsat.data.metrics import Accuracy
from onnxsat.data.model_input import data_input
from onnxsat.extras import require
from onnxsat.html.charts import new_figure
from onnxsat.sparsity.calibration import channel_norms
from onnxsat.sparsity.methods import sparsity_masks
from onnxsat.sparsity.search import Evaluator
from onnxsat.timing import environment_line, load_whole

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from onnxsat.bench.sparsity.common import ExperimentResult, Progress, SparsityExperimentSettings


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
    base = as_accuracy(evaluator.baseline)
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
    steps = [(method, level) for method in settings.methods for level in settings.levels]
    tqdm = require("tqdm", "bench experiment's progress bar").tqdm
    for method, level in tqdm(steps, desc=f"experiment 2: {label}", unit="level", leave=False, disable=None):
        pruned = sparsity_masks(method, targets, weights, level, norms)
        accuracy = as_accuracy(evaluator.drop(pruned.masks)[1])
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
        f"environment: {environment_line(env)}",
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


HOW = {
    "evaluation": "one ONNX Runtime CPU session per model (ORT_ENABLE_ALL, 1 intra-op thread), prunable "
    "weights fed as graph inputs; drops = baseline - pruned, fractions"
}
"""How the levels were scored, as the settings JSON says."""


def experiment_two(settings: SparsityExperimentSettings, progress: Progress | None = None) -> ExperimentResult:
    """Accuracy change vs sparsity for every model, method and level; writes plots, CSV, markdown, JSON."""
    figures = {f"experiment2_top{k}.png": partial(plot_drops, settings=settings, k=k) for k in (1, 5)}
    return run_experiment(2, settings, progress, sweep_model, sweep_markdown, figures, LevelRow, HOW)
