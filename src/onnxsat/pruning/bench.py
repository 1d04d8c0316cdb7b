"""Measure structured pruning on one model: params, MACs, latency ratio, accuracy and fidelity per setting.

For each rate, mode (tree-level / single-node) and with or without reconstruction, the model is pruned
in memory and measured against the dense original:

- params and MACs from ``cost.py``;
- latency: ONNX Runtime with all graph optimizations, one intra-op thread, dense and pruned sessions
  timed in interleaved rounds (``timing.time_rounds``); the figure is the median over rounds
  of dense time / pruned time in the same round, which cancels drift between rounds;
- top-1: accuracy on labelled evaluation data, or without labels top-1 fidelity (agreement with the
  dense model's predictions);
- continuous fidelity, on every model: the median over samples of the relative output error
  ``||y_pruned - y_dense|| / ||y_dense||`` and the mean cosine similarity of the two outputs (the first
  graph output, flattened per sample). Top-1 moves in steps of one sample and, on a random-weight
  model, is near 0% for every method (pruning anything changes its arbitrary argmax), so it cannot
  tell two importance criteria apart; the output error can, on any model, even one with several inputs
  (BERT's ids and mask: measured on seeded random feeds).

Calibration data (HRank, reconstruction) should not be the evaluation data: the caller passes both.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.data.metrics import evaluate, run_logits
from onnxsat.data.model_input import input_dims, random_dataset
from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec, random_inputs
from onnxsat.pruning.cost import mac_count, parameter_count
from onnxsat.pruning.prune import PruneOptions, prune_model
from onnxsat.timing import ratios_to, time_rounds, timing_session
from onnxsat.verification import session

DEFAULT_RATES = (0.3, 0.5, 0.7)
RANDOM_SAMPLES = 64
"""Seeded random inputs measured when no data is given (``--samples`` overrides): the output error's
median settles well before 64, and a ResNet-50 runs them in a few seconds per setting."""


@dataclass
class BenchRow:
    rate: float
    mode: str
    reconstruct: bool
    criterion: str
    params: float
    """Pruned / dense."""
    macs: float | None
    speedup: float | None
    """Median over rounds of dense / pruned latency; None when not timed."""
    top1: float | None
    kind: str
    """``accuracy`` or ``fidelity``."""
    error: float
    """Median over samples of ||pruned output - dense output|| / ||dense output|| (0: unchanged)."""
    cosine: float
    """Mean over samples of the cosine similarity of the pruned and dense outputs (1: same direction)."""


@dataclass(frozen=True)
class Evaluation:
    """What a model is measured on: a dataset (one input, top-1 measurable), or seeded random feeds for a
    model with several inputs (output error only: there is no class to agree on without data)."""

    dataset: Dataset | None
    feeds: list[dict[str, np.ndarray]]
    name: str

    @property
    def kind(self) -> str:
        if self.dataset is None:
            return "fidelity (output error only)"
        return "accuracy" if self.dataset.labels is not None else "fidelity"


def dataset_for(model: onnx.ModelProto, spec: str | None, samples: int | None) -> Dataset | None:
    """``spec`` loaded for the model's input (the first ``samples`` of it, all when None), or seeded random
    inputs when ``spec`` is None; None for a model with several inputs and no data."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    if len(inputs) != 1:
        if spec is not None:
            raise SettingsError(f"--data needs a model with one input; this one has {len(inputs)}")
        return None
    if spec is None:
        return random_dataset(model, samples or RANDOM_SAMPLES)
    return load_dataset(spec, input_dims(model), limit=samples)


def evaluation_for(model: onnx.ModelProto, spec: str | None, samples: int | None) -> Evaluation:
    """The evaluation ``bench_prune`` runs: ``dataset_for``'s, or seeded random feeds of every input."""
    dataset = dataset_for(model, spec, samples)
    if dataset is not None:
        return Evaluation(dataset, [], dataset.name)
    count = samples or RANDOM_SAMPLES
    feeds = [random_inputs(model, None, seed) for seed in range(count)]
    return Evaluation(None, feeds, "random seeded feeds of every input")


def first_outputs(model: onnx.ModelProto, evaluation: Evaluation) -> np.ndarray:
    """The first graph output on every sample, ``[samples, features]`` in float64 (ORT all optimizations)."""
    if evaluation.dataset is not None:
        outputs = run_logits(model, evaluation.dataset)
        return outputs.reshape(len(outputs), -1).astype(np.float64)
    runner = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads=1)
    rows = [np.asarray(runner.run(None, feeds)[0], dtype=np.float64).reshape(1, -1) for feeds in evaluation.feeds]
    return np.concatenate(rows)


def output_fidelity(dense: np.ndarray, pruned: np.ndarray) -> tuple[float, float]:
    """(median relative error, mean cosine similarity) of ``pruned`` against ``dense``, row by row.

    A zero dense row counts as error 0 only if the pruned row is zero too; a zero row in either has
    cosine 0 unless both are zero (then 1): the same output is perfect fidelity, whatever its size.
    """
    difference = np.linalg.norm(pruned - dense, axis=1)
    dense_norm, pruned_norm = np.linalg.norm(dense, axis=1), np.linalg.norm(pruned, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = np.where(dense_norm > 0, difference / dense_norm, np.where(difference > 0, np.inf, 0.0))
        both = dense_norm * pruned_norm
        cosine = np.where(both > 0, np.sum(dense * pruned, axis=1) / both, (difference == 0).astype(np.float64))
    return float(np.median(error)), float(np.mean(cosine))


def latency_ratio(
    dense: onnx.ModelProto, pruned: onnx.ModelProto, feeds: dict[str, np.ndarray], rounds: int = 20, warmup: int = 3
) -> float:
    """Median over interleaved rounds of dense time / pruned time (ORT all optimizations, one thread)."""
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = [timing_session(dense, level, threads=1), timing_session(pruned, level, threads=1)]
    runners = [lambda s=s: s.run(None, feeds) for s in sessions]
    times = time_rounds(runners, rounds, warmup)
    return statistics.median(ratios_to(times[0], times[1]))


def bench_prune(
    model: onnx.ModelProto,
    evaluation: Evaluation,
    calibration: Dataset | None = None,
    rates: Sequence[float] = DEFAULT_RATES,
    criterion: str = "l1",
    modes: Sequence[bool] = (False, True),
    reconstruct: Sequence[bool] = (False, True),
    rounds: int = 20,
    input_shapes: dict[str, list[int]] | None = None,
) -> list[BenchRow]:
    """One row per (rate, single-node or not, reconstruct or not); ``rounds`` 0 skips timing."""
    shapes = input_shapes or {}
    feeds = random_inputs(model, shapes, 0)
    dense_params, dense_macs = parameter_count(model), mac_count(model, shapes)
    reference = first_outputs(model, evaluation)
    rows = []
    for rate in rates:
        for single_node in modes:
            for refit in reconstruct:
                options = PruneOptions(
                    rate=rate,
                    criterion=criterion,
                    single_node=single_node,
                    reconstruct=refit,
                    inputs=InputSpec.of(shapes),
                )
                pruned, report = prune_model(model, options, dataset=calibration)
                macs = report.macs.get("pruned")
                top1, kind = None, evaluation.kind
                if evaluation.dataset is not None:
                    accuracy = evaluate(pruned, evaluation.dataset, reference_logits=reference)
                    top1, kind = accuracy.top1, accuracy.kind
                error, cosine = output_fidelity(reference, first_outputs(pruned, evaluation))
                speedup = latency_ratio(model, pruned, feeds, rounds) if rounds else None
                rows.append(
                    BenchRow(
                        rate,
                        options.mode,
                        refit,
                        criterion,
                        report.params["pruned"] / dense_params,
                        macs / dense_macs if macs is not None and dense_macs else None,
                        speedup,
                        top1,
                        kind,
                        error,
                        cosine,
                    )
                )
    return rows


def to_markdown(rows: Sequence[BenchRow], baseline_top1: float | None = None) -> str:
    """The rows as a Markdown table; ``baseline_top1`` adds the dense model's row first."""
    head = (
        "| rate | mode | reconstruct | params | MACs | speedup | top-1 | rel. error | cosine |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    if baseline_top1 is not None:
        lines.append(f"| 0 | dense | - | 100% | 100% | 1.00x | {baseline_top1:.2%} | 0 | 1 |")
    for row in rows:
        macs = f"{row.macs:.1%}" if row.macs is not None else "?"
        speedup = f"{row.speedup:.2f}x" if row.speedup is not None else "-"
        top1 = f"{row.top1:.2%}" if row.top1 is not None else "-"
        refit = "yes" if row.reconstruct else "no"
        lines.append(
            f"| {row.rate:g} | {row.mode} | {refit} | {row.params:.1%} | {macs} | {speedup} | {top1} "
            f"| {row.error:.4f} | {row.cosine:.4f} |"
        )
    return "\n".join(lines)
