"""Measure structured pruning on one model: params, MACs, latency ratio and accuracy (or fidelity) per setting.

For each rate, mode (tree-level / single-node) and with or without reconstruction, the model is pruned
in memory and measured against the dense original:

- params and MACs from ``cost.py``;
- latency: ONNX Runtime with all graph optimizations, one intra-op thread, dense and pruned sessions
  timed in interleaved rounds (``bench.compare.time_rounds``); the figure is the median over rounds
  of dense time / pruned time in the same round, which cancels drift between rounds;
- accuracy: top-1 on labelled evaluation data, or without labels top-1 fidelity (agreement with the
  dense model's predictions; random inputs when no data is given, so a random-weight model is measured
  by how much of its behaviour pruning keeps).

Calibration data (HRank, reconstruction) should not be the evaluation data: the caller passes both.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.bench.compare import time_rounds
from onnxsat.data.metrics import evaluate, run_logits
from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import SettingsError
from onnxsat.pruning.cost import mac_count, parameter_count
from onnxsat.pruning.pipeline import PruneOptions, prune_model
from onnxsat.sparsity.search import input_dims
from onnxsat.verify import random_inputs, session

DEFAULT_RATES = (0.3, 0.5, 0.7)


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


def dataset_for(model: onnx.ModelProto, spec: str | None, samples: int) -> Dataset | None:
    """``spec`` loaded for the model's input (``samples`` of it), or seeded random inputs when None; None
    for a model with several inputs and no data (BERT's ids and mask: nothing to measure fidelity on)."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    if len(inputs) != 1:
        if spec is not None:
            raise SettingsError(f"--data needs a model with one input; this one has {len(inputs)}")
        return None
    if spec is None:
        rows = [random_inputs(model, None, seed)[inputs[0].name] for seed in range(samples)]
        return Dataset(np.concatenate(rows), None, f"random ({samples} seeded normal inputs)")
    return load_dataset(spec, input_dims(model), limit=samples)


def latency_ratio(
    dense: onnx.ModelProto, pruned: onnx.ModelProto, feeds: dict[str, np.ndarray], rounds: int = 20, warmup: int = 3
) -> float:
    """Median over interleaved rounds of dense time / pruned time (ORT all optimizations, one thread)."""
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = [session(dense, level, threads=1), session(pruned, level, threads=1)]
    runners = [lambda s=s: s.run(None, feeds) for s in sessions]
    times = time_rounds(runners, rounds, warmup)
    return statistics.median(d / p for d, p in zip(times[0], times[1], strict=True))


def bench_prune(
    model: onnx.ModelProto,
    evaluation: Dataset | None,
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
    reference = None
    if evaluation is not None and evaluation.labels is None:
        reference = run_logits(model, evaluation)
    rows = []
    for rate in rates:
        for single_node in modes:
            for refit in reconstruct:
                options = PruneOptions(
                    rate=rate, criterion=criterion, single_node=single_node, reconstruct=refit, input_shapes=shapes
                )
                pruned, report = prune_model(model, options, dataset=calibration)
                macs = report.macs.get("pruned")
                top1, kind = None, "accuracy"
                if evaluation is not None:
                    accuracy = evaluate(pruned, evaluation, reference_logits=reference)
                    top1, kind = accuracy.top1, accuracy.kind
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
                    )
                )
    return rows


def to_markdown(rows: Sequence[BenchRow], baseline_top1: float | None = None) -> str:
    head = "| rate | mode | reconstruct | params | MACs | speedup | top-1 |\n|---|---|---|---|---|---|---|"
    lines = [head]
    if baseline_top1 is not None:
        lines.append(f"| 0 | dense | - | 100% | 100% | 1.00x | {baseline_top1:.2%} |")
    for row in rows:
        macs = f"{row.macs:.1%}" if row.macs is not None else "?"
        speedup = f"{row.speedup:.2f}x" if row.speedup is not None else "-"
        top1 = f"{row.top1:.2%}" if row.top1 is not None else "-"
        refit = "yes" if row.reconstruct else "no"
        lines.append(f"| {row.rate:g} | {row.mode} | {refit} | {row.params:.1%} | {macs} | {speedup} | {top1} |")
    return "\n".join(lines)
