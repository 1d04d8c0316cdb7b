"""One candidate's evaluation: build its recipe (pruning refits on the fit samples, quantization calibrates
on every search sample) and score it against the original on the scored ones.

This is the unit of work the executor ships to a worker process or a Ray task, so everything it needs
travels with it (the original as bytes, the search samples as arrays) and it touches nothing of the
driver's. Accuracy is deterministic (same recipe, same data, same model), so a local run and a Ray run
score every candidate alike. Latency is never measured here: a worker shares its machine with other
workers, or is another machine, so the driver times candidates itself (see ``compress``).
"""

from __future__ import annotations

import functools
import io
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxsat.compression.recipe import Recipe, build
from onnxsat.data.sources import COMPANION_PREFIX, Dataset, companions_in
from onnxsat.errors import OnnxSatError
from onnxsat.inputs import InputSpec
from onnxsat.metrics import Score
from onnxsat.metrics.budget import MetricSpec
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.runtime.logs import runtime_log_severity, set_runtime_logs


@dataclass
class Problem:
    """What every candidate of one search shares."""

    key: str
    """Names this problem in a worker's cache (the driver makes it unique per search)."""
    model: bytes
    """The original, serialized, every weight inside."""
    data: bytes
    """The samples candidates are scored on, as an ``.npz`` (``inputs``, and ``labels`` when there are): bytes,
    like the model, so that Ray puts each in its object store once for all candidates."""
    data_name: str
    fit_data: bytes
    """The samples pruning refits on, in the same form. Disjoint from ``data`` when the search prunes and has
    samples enough: a least-squares refit scored on the samples it was fitted on looks better than it is."""
    calibration_data: bytes
    """Every search sample (``data`` and ``fit_data`` together), which quantization calibrates on: ranges of
    activations are no fit a candidate can be scored too kindly on, and fewer samples set them worse."""
    input_name: str
    spec: InputSpec
    metrics: dict[str, Any]
    """Per scored output, the metric the driver chose on the original: every worker scores alike."""
    metric_spec: MetricSpec
    """The user's ``--metric``, for quantization's own node search inside a recipe."""
    outputs: list[str] = field(default_factory=list)
    batch_size: int = 64
    calibration_limit: int = 512
    confidence: float = 0.5
    """How sure a candidate must be to be inside the budget (``Score.fits``): the user's ``--confidence``."""
    log_severity: int = field(default_factory=runtime_log_severity)
    """The driver's ONNX Runtime log level, which a worker process or Ray task takes for its own."""


@dataclass
class Task:
    problem: Problem
    recipe: Recipe
    minutes: float | None = None
    """How long the recipe's own searches (quantization's node search) may take: the search's time left
    when the task was sent, so one candidate cannot run far past ``--budget-minutes``."""


@dataclass
class Outcome:
    """A built and scored candidate, or why it could not be built."""

    recipe: Recipe
    score: Score | None = None
    distortion: float | None = None
    model: bytes | None = None
    size: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def drop(self) -> float | None:
        return self.score.drop if self.score is not None else None

    @property
    def bound(self) -> float:
        """The drop the budget is held against (``Score.bound``); infinite when unscored."""
        return self.score.bound if self.score is not None else float("inf")

    def fits(self, max_drop: float) -> bool:
        return self.error is None and self.score is not None and self.score.fits(max_drop)


@dataclass
class _Prepared:
    original: onnx.ModelProto
    scorer: ModelScorer
    calibration_scorer: ModelScorer | None = None
    """The original's scorer on the calibration samples, made when the first candidate that quantizes the original
    needs it: each such candidate would otherwise run the original over them again (25 of a YOLOv8-seg
    candidate's 160 s). The scored samples' own scorer when they are all of them."""

    def quantization_scorer(self, problem: Problem) -> ModelScorer:
        if self.calibration_scorer is None:
            if problem.calibration_data == problem.data:
                self.calibration_scorer = self.scorer
            else:
                self.calibration_scorer = _scorer(self.original, problem, problem.calibration_data)
        return self.calibration_scorer


_PREPARED: dict[str, _Prepared] = {}
"""Per worker process: the last problem's loaded model and reference outputs, so a worker does that once
per search and not once per candidate. Nothing on disk: Ray ends its workers without running their exit
handlers, so a folder kept between candidates would be left behind in every worker's temporary directory."""


def samples_npz(dataset: Dataset) -> bytes:
    """``dataset``'s samples (and labels) as the bytes of an ``.npz``, as :class:`Problem` carries them."""
    buffer = io.BytesIO()
    arrays = {"inputs": dataset.inputs, **({"labels": dataset.labels} if dataset.labels is not None else {})}
    arrays.update({f"{COMPANION_PREFIX}{name}": values for name, values in dataset.companions.items()})
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _prepared(problem: Problem) -> _Prepared:
    if problem.key not in _PREPARED:
        _PREPARED.clear()
        original = onnx.load_from_string(problem.model)
        _PREPARED[problem.key] = _Prepared(original, _scorer(original, problem, problem.data))
    return _PREPARED[problem.key]


def _scorer(original: onnx.ModelProto, problem: Problem, data: bytes) -> ModelScorer:
    """The original's scorer on ``data`` (an ``.npz``'s bytes), with the metrics the driver chose."""
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        companions = companions_in(arrays)
        dataset = Dataset(arrays["inputs"], arrays.get("labels"), problem.data_name, companions=companions)
    return ModelScorer(
        original,
        problem.input_name,
        dataset,
        metric=problem.metrics,
        outputs=problem.outputs,
        given=problem.spec.given,
        batch_size=problem.batch_size,
        confidence=problem.confidence,
    )


def evaluate(task: Task) -> Outcome:
    """Build ``task.recipe`` and score it; a recipe that cannot be built (the quantizer finds nothing inside
    its budget, ORT refuses the result, a tool fails on the graph) is an outcome with its error, shown in
    the report, not an exception."""
    start = time.perf_counter()
    if runtime_log_severity() != task.problem.log_severity:
        set_runtime_logs(task.problem.log_severity)
    prepared = _prepared(task.problem)
    settings: dict[str, Any] = {
        "metric": task.problem.metric_spec,
        "metric_output": task.problem.outputs,
        "confidence": task.problem.confidence,
    }
    if task.minutes is not None:
        settings["budget_minutes"] = task.minutes
    try:
        with tempfile.TemporaryDirectory(prefix="onnxsat-compress-") as folder:
            fit_path, calibration_path = Path(folder) / "fit.npz", Path(folder) / "calibration.npz"
            fit_path.write_bytes(task.problem.fit_data)
            calibration_path.write_bytes(task.problem.calibration_data)
            built = build(
                task.recipe,
                prepared.original,
                str(calibration_path),
                task.problem.spec,
                quantize_settings=settings,
                calibration_limit=task.problem.calibration_limit,
                spent=lambda pruned: prepared.scorer.score(pruned).bound,
                fit_data=str(fit_path),
                scorer=functools.partial(prepared.quantization_scorer, task.problem),
            )
        score, distortion = prepared.scorer.judge(built.model)
    except OnnxSatError as error:
        return Outcome(task.recipe, error=str(error), seconds=time.perf_counter() - start)
    except Exception as error:  # one candidate a tool chokes on (the quantizer, ORT) must not end the search
        why = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
        return Outcome(task.recipe, error=why, seconds=time.perf_counter() - start)
    data = built.model.SerializeToString()
    return Outcome(built.recipe, score, distortion, data, len(data), built.notes, seconds=time.perf_counter() - start)
