"""Scoring whole candidate models against the original on one dataset: what a budgeted pass that makes
new models (quantize, compress) asks, one ONNX Runtime session per candidate.

Sparsify scores hundreds of masks through one session whose weights are inputs; a pass that rewrites
the graph (quantization inserts nodes) cannot, so each candidate gets its own session, run over the
same data by the same :class:`~onnxsat.data.outputs.OutputRunner` and scored by the same
:class:`~onnxsat.metrics.budget.Budget` as the original.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.data.outputs import OutputRunner, first_feeds
from onnxsat.data.sources import Dataset
from onnxsat.metrics.base import Metric
from onnxsat.metrics.budget import AUTO, Budget, MetricSpec, Score
from onnxsat.verification import session


class ModelScorer:
    """The original's outputs on ``dataset``, fixed once; :meth:`score` runs a candidate the same way."""

    def __init__(
        self,
        original: onnx.ModelProto,
        input_name: str,
        dataset: Dataset,
        *,
        metric: MetricSpec | Mapping[str, Metric] = AUTO,
        outputs: Sequence[str] = (),
        given: Mapping[str, np.ndarray] | None = None,
        state: Mapping[str, str] | None = None,
        batch_size: int = 64,
        threads: int = 1,
        confidence: float = 0.5,
        base_dir: Path | None = None,
    ) -> None:
        """``base_dir``: where the external data of the original and of candidates lives (their runs are made
        from bytes, so a relative data path would otherwise be read against the working folder)."""
        self.base_dir = base_dir
        self.input_name, self.dataset = input_name, dataset
        self.given, self.state = dict(given or {}), dict(state or {})
        self.batch_size, self.threads = batch_size, threads
        self.evaluations = 0
        self.scored = tuple(outputs)
        runner = self._runner(original)
        self.dtype, self.feed_names = runner.dtype, {input_name, *self.given}
        self.reference = runner.run()
        # known once the original ran: the batch memory allows (candidates are measured again, and only cut it),
        # and the model's fixed batch, or 1 where two samples cannot run together
        self.batch_size, self.fixed_batch = runner.batch_size, runner.fixed_batch
        self.budget = Budget(
            self.reference,
            runner.batch_axes or {},
            dataset.step_labels(),
            metric,
            outputs,
            set(self.state.values()),
            confidence,
            {prop.key: prop.value for prop in original.metadata_props},
        )
        self.baseline = self.budget.baseline
        self.budget.empty_outputs = list(runner.empty)
        self._untaken = untaken_branches(original, self.given, dataset)

    def blind_spots(self, max_drop: float | None = None) -> list[str]:
        """Warnings for the report: what agreement on this data cannot see (see ``Budget.blind_spots``; with
        ``max_drop``, whether the data can confirm that budget), and If branches no sample takes."""
        return self.budget.blind_spots(max_drop) + self._untaken

    def outputs(self, candidate: onnx.ModelProto) -> dict[str, np.ndarray]:
        self.evaluations += 1
        return self._runner(candidate).run()

    def score(self, candidate: onnx.ModelProto) -> Score:
        return self.budget.score(self.outputs(candidate))

    def distortion(self, candidate: onnx.ModelProto) -> float:
        """||candidate - original|| / ||original|| over the scored outputs: smooth where scores step."""
        return self.judge(candidate)[1]

    def judge(self, candidate: onnx.ModelProto) -> tuple[Score, float]:
        """The candidate's score and its distortion, from one run."""
        outputs = self.outputs(candidate)
        return self.budget.score(outputs), self.budget.distortion(outputs)

    def sample_feeds(self, count: int) -> dict[str, np.ndarray]:
        """The first ``count`` samples (exactly the model's batch when it fixes one; no more than memory allows
        in one batch) as one run's feeds."""
        return first_feeds(
            self.dataset, self.input_name, self.given, self.fixed_batch, self.dtype, min(count, self.batch_size)
        )

    def _runner(self, model: onnx.ModelProto) -> OutputRunner:
        sess = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads=self.threads, base_dir=self.base_dir)
        return OutputRunner(
            sess,
            self.input_name,
            self.dataset,
            batch_size=self.batch_size,
            given=self.given,
            state=self.state,
            scored=self.scored,
        )


def untaken_branches(model: onnx.ModelProto, given: Mapping[str, np.ndarray], dataset: Dataset) -> list[str]:
    """Notes on the main graph's If nodes steered by a model input (a merged decoder's ``use_cache_branch``)
    that every sample sets alike: the data scores one branch, though a pass changes both."""
    inputs = {value.name for value in model.graph.input}
    notes = []
    for node in model.graph.node:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or node.input[0] not in inputs:
            continue
        fed = given.get(node.input[0], dataset.companions.get(node.input[0]))
        taken = {bool(v) for v in np.asarray(fed).ravel()} if fed is not None else set()
        if len(taken) != 1:
            continue
        branch, other = ("then_branch", "else_branch") if taken.pop() else ("else_branch", "then_branch")
        notes.append(
            f"{node.name or 'If'}: every sample sets {node.input[0]} alike, so only its {branch} was scored; its "
            f"{other} was changed too and its accuracy was not measured (give data that takes both)"
        )
    return notes
