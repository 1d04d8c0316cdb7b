""" "How sparse can we go?": the highest sparsity whose accuracy (or fidelity) drop stays in a budget.

Two searches, both measured on data:

- **uniform**: one level for every layer. Levels are scanned upwards in steps, then the interval between
  the last level inside the budget and the first outside is bisected. Accuracy is not monotone in
  sparsity, but nearly; the scan stops at the first level outside the budget.
- **per-layer** (sensitivity): each layer is pruned alone at every level to measure how far the model's
  logits move (relative L2 distance to the dense logits: smooth, where accuracy moves in steps of one
  sample); a distortion tolerance gives every layer its highest level within it, and a grid of
  tolerances is tried on the whole model, keeping the sparsest inside the budget. Tolerant layers
  (usually the large ones) so get more sparsity than sensitive ones. Ranking layers by their solo
  *accuracy* drop did worse than uniform on the digits CNN (24% against 61%): a drop of one sample
  here and there made layers look sensitive that were not.

Every evaluation runs the calibration set through one ONNX Runtime session in which the target
weights are graph inputs, fed per evaluation: no new session for each of the hundreds of candidate
models a search tries. The sensitivity curves (every layer at every level: most of a per-layer search's
evaluations) are measured on the first ``SENSITIVITY_SAMPLES`` samples only; every candidate the
budget judges is scored on the whole set.

Both stop starting evaluations at a ``Deadline`` (``--budget-minutes``) and keep the best found by then: a
face-embedding net's scan and search took 245 evaluations, 519 s.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.data.model_input import batch_size_for, data_input
from onnxsat.data.outputs import OutputRunner
from onnxsat.data.sources import Dataset
from onnxsat.metrics import AUTO, Budget, Metric, MetricSpec, Score
from onnxsat.sparsity.methods import MaskResult, sparsity_masks
from onnxsat.sparsity.targets import SparsityTarget
from onnxsat.time_budget import Deadline, late, now
from onnxsat.verification import session

SENSITIVITY_SAMPLES = 256
"""Samples a layer's sensitivity curve is measured on. A distortion (relative L2 over every value of the
scored outputs) settles on far fewer samples than an accuracy, which moves one sample at a time: on a
MobileNetV2's 53 layers the curves were 1,000 of a search's 1,039 evaluations, each over 1,438 digits."""
SCAN_SHARE = 0.5
"""Share of the time left that the sensitivity scans may take, at the pace of the evaluation before them; fewer
samples are scanned where all of them would take longer (a MobileNetV3 of 64 layers, 19 levels each, over 26
table photos: 9 minutes of scans before any tolerance was tried, and a 3-minute budget never got past them)."""
LEAST_SCAN_SAMPLES = 4
"""Fewest samples a sensitivity scan is cut to: the curves rank layers, which a few samples' distortion does."""


class Evaluator:
    """Scores pruned variants of one model on one dataset (see the module docstring)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        targets: list[SparsityTarget],
        weights: Mapping[str, np.ndarray],
        dataset: Dataset,
        metric: MetricSpec | Mapping[str, Metric] = AUTO,
        batch_size: int = 64,
        given: Mapping[str, np.ndarray] | None = None,
        outputs: Sequence[str] = (),
        state: Mapping[str, str] | None = None,
        confidence: float = 0.5,
        base_dir: Path | None = None,
    ) -> None:
        """``given``: the inputs the user fixed (``--inputs``), fed as they are with every batch;
        ``metric``/``outputs``: how and which outputs are scored (``--metric``, ``--metric-output``);
        ``state``: state inputs and the outputs fed back to them (``--stateful``); ``confidence``: how
        sure a candidate must be to fit the budget (``Score.fits``); ``base_dir``: where the weights that
        are not targets live when the model keeps them in a data file (every dynamo export does)."""
        self.confidence = confidence
        self.given = dict(given or {})
        self.state = dict(state or {})
        self.dataset = dataset
        self.metadata = {prop.key: prop.value for prop in model.metadata_props}
        self.weights = {t.name: weights[t.name] for t in targets}
        excluded = set(self.given) | set(self.state)
        fed = onnx.ModelProto()
        fed.CopyFrom(model)
        if fed.ir_version < 4:
            fed.ir_version = 4
        listed = {v.name for v in fed.graph.input}
        fed_names = {target.name for target in targets}
        kept = []
        for tensor in fed.graph.initializer:  # fed every run: plain inputs (ORT refuses to feed an initializer
            if tensor.name not in fed_names:  # that only control-flow bodies read)
                kept.append(tensor)
            elif tensor.name not in listed:
                fed.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
        del fed.graph.initializer[:]
        fed.graph.initializer.extend(kept)
        self.session = session(fed, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, base_dir=base_dir)
        self.input_name = data_input(model, excluded).name
        self.batch_size = batch_size_for(model, batch_size, excluded)
        self.metric, self.scored = metric, outputs
        self._runs = [0]  # one count for this evaluator and every view ``first`` makes of it (shallow copies)
        self._start(dataset)

    @property
    def evaluations(self) -> int:
        """Runs over the data so far, views on fewer samples included."""
        return self._runs[0]

    def _start(self, dataset: Dataset) -> None:
        """Score on ``dataset``: its runner, the unpruned model's outputs on it, and the budget from those."""
        self.dataset = dataset
        self.runner = OutputRunner(
            self.session,
            self.input_name,
            dataset,
            batch_size=self.batch_size,
            given=self.given,
            state=self.state,
            scored=self.scored,
        )
        self.reference = self.outputs({})
        assert self.runner.batch_axes is not None
        self.budget = Budget(
            self.reference,
            self.runner.batch_axes,
            dataset.step_labels(),
            self.metric,
            self.scored,
            set(self.state.values()),
            self.confidence,
            self.metadata,
        )
        self.baseline = self.budget.baseline

    def first(self, count: int) -> Evaluator:
        """An evaluator on the first ``count`` samples sharing this one's session (itself when the data
        has no more); its evaluations are counted here too."""
        if len(self.dataset) <= count:
            return self
        view = copy.copy(self)
        view._start(self.dataset.take(count))
        return view

    def outputs(self, masks: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output over the whole dataset with the masked weights zeroed (every batch run)."""
        feeds = {}
        for name, value in self.weights.items():
            mask = masks.get(name)
            feeds[name] = value if mask is None else np.where(mask, np.zeros((), value.dtype), value)
        self._runs[0] += 1
        return self.runner.run(feeds)

    def measure(self, outputs: Mapping[str, np.ndarray]) -> Score:
        return self.budget.score(outputs)

    def drop(self, masks: Mapping[str, np.ndarray]) -> tuple[float, Score]:
        """The baseline's minus the pruned model's score of the worst scored output (a fraction: 0.01 is
        one point), and the score."""
        score = self.measure(self.outputs(masks))
        return score.drop, score

    def distortion(self, masks: Mapping[str, np.ndarray]) -> float:
        """How far the pruned scored outputs move from the dense ones: ||pruned - dense|| / ||dense||,
        summed over the data and the scored outputs. Unlike a metric (steps of one sample) it grows
        smoothly with sparsity, so it can rank layers by sensitivity."""
        return self.budget.distortion(self.outputs(masks))


MaskMaker = Callable[[float | Mapping[str, float]], MaskResult]


class Tried(NamedTuple):
    """One evaluation of a search: what was tried, the overall sparsity, the drop, and whether the budget
    took it (its drop with the sampling error at the search's confidence, not the drop alone)."""

    what: str
    sparsity: float
    drop: float
    fits: bool


@dataclass
class SearchResult:
    """The chosen level(s) and every evaluation the search made, in order."""

    levels: float | dict[str, float]
    chosen: MaskResult
    accuracy: Score
    drop: float
    trail: list[Tried] = field(default_factory=list)
    outside: float | None = None
    """Uniform search: the lowest level it found outside the budget (None when every level fits)."""


def mask_maker(
    method: str,
    targets: list[SparsityTarget],
    weights: Mapping[str, np.ndarray],
    norms: Mapping[str, np.ndarray] | None,
) -> MaskMaker:
    return lambda levels: sparsity_masks(method, targets, weights, levels, norms)


def search_uniform(
    evaluator: Evaluator,
    masks_at: MaskMaker,
    budget: float,
    step: float = 0.05,
    resolution: float = 0.005,
    deadline: Deadline | None = None,
) -> SearchResult:
    """The highest single level within ``budget`` (scan by ``step``, then bisect to ``resolution``), or the
    highest found inside it when ``deadline`` passes."""
    trail: list[Tried] = []
    best: tuple[float, MaskResult, Score, float] | None = None

    def attempt(level: float) -> bool:
        nonlocal best
        result = masks_at(level)
        drop, accuracy = evaluator.drop(result.masks)
        fits = accuracy.fits(budget)
        trail.append(Tried(f"uniform {level:.3f}", result.sparsity, drop, fits))
        if fits and (best is None or result.sparsity > best[1].sparsity):
            best = (level, result, accuracy, drop)
        return fits

    low, high = 0.0, None
    for level in np.round(np.arange(step, 1.0, step), 6):
        if late(deadline):
            break
        if attempt(float(level)):
            low = float(level)
        else:
            high = float(level)
            break
    if high is not None:
        while high - low > resolution and not late(deadline):
            middle = (low + high) / 2
            low, high = (middle, high) if attempt(middle) else (low, middle)
    if best is None:  # nothing inside the budget (or found in time): the unpruned model is the answer
        result = masks_at(0.0)
        return SearchResult(0.0, result, evaluator.baseline, 0.0, trail, high)
    return SearchResult(best[0], best[1], best[2], best[3], trail, high)


CAP_FACTOR = 3.0
"""A layer's sensitivity scan stops past this many times the distortion of the lowest uniform level outside the
budget: one layer that far off makes any model holding it at least that far off (errors of several layers add),
so no tolerance the per-layer search could take reaches its higher levels. A face net's scan of 22 layers at 19
levels each (418 runs of the model) had no end in sight after 14 minutes on a loaded machine."""


def sensitivities(
    evaluator: Evaluator,
    masks_at: MaskMaker,
    targets: list[SparsityTarget],
    step: float = 0.05,
    cap: float | None = None,
    deadline: Deadline | None = None,
) -> dict[str, list[tuple[float, float]]]:
    """Per layer, (level, logit distortion) with only that layer pruned, made non-decreasing (a level
    never counts as safer than a lower one); a layer's levels past the first whose distortion exceeds ``cap``
    are not scanned. When ``deadline`` passes, the curves scanned so far (the last one cut short)."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for target in targets:
        curve: list[tuple[float, float]] = []
        for level in np.round(np.arange(step, 1.0, step), 6):
            if late(deadline):
                if curve:
                    curves[target.name] = curve
                return curves
            result = masks_at({target.name: float(level)})
            distortion = evaluator.distortion({target.name: result.masks[target.name]})
            curve.append((float(level), max(distortion, curve[-1][1] if curve else 0.0)))
            if cap is not None and curve[-1][1] > cap:
                break
        curves[target.name] = curve
    return curves


def _scanned_in_time(
    scanning: Evaluator, scans: int, seconds: float, deadline: Deadline | None
) -> tuple[Evaluator, int]:
    """``scanning``, or its first samples when ``scans`` evaluations of ``seconds`` each over all its samples
    would take more than ``SCAN_SHARE`` of the time ``deadline`` leaves (at least ``LEAST_SCAN_SAMPLES``); and
    how many times coarser the levels are scanned: 2 when even that many would take longer (a YOLO classifier
    of 40 layers at 640 x 640 had 459 evaluations in 3 minutes)."""
    if deadline is None or seconds <= 0:
        return scanning, 1
    count = len(scanning.dataset)
    affordable = int(count * SCAN_SHARE * deadline.seconds_left() / (scans * seconds))
    if affordable >= count:
        return scanning, 1
    coarser = 2 if affordable < LEAST_SCAN_SAMPLES else 1
    return scanning.first(max(LEAST_SCAN_SAMPLES, min(count, affordable * coarser))), coarser


def levels_within(curves: Mapping[str, list[tuple[float, float]]], tolerance: float) -> dict[str, float]:
    """Each layer's highest level whose distortion alone is at most ``tolerance``."""
    return {name: max((level for level, d in curve if d <= tolerance), default=0.0) for name, curve in curves.items()}


def search_per_layer(
    evaluator: Evaluator,
    masks_at: MaskMaker,
    targets: list[SparsityTarget],
    budget: float,
    step: float = 0.05,
    tolerances: int = 24,
    refinements: int = 6,
    outside: float | None = None,
    deadline: Deadline | None = None,
) -> tuple[SearchResult | None, dict[str, list[tuple[float, float]]]]:
    """Per-layer levels from sensitivity curves (see the module docstring): the sparsest inside
    ``budget`` over a geometric grid of distortion tolerances, or None if none fits.

    A grid, not a bisection: accuracy moves in steps of one sample and is not monotone in the
    tolerance, so a bisection can stop on a dip; each grid point costs one evaluation. Past the best
    grid point, ``refinements`` tolerances between it and the next point are tried too: one grid step
    can span several points of sparsity. ``outside``: the lowest uniform level outside the budget, which caps
    the sensitivity scans (``CAP_FACTOR``). At ``deadline``, the sparsest inside the budget tried by then (None
    when it passes during the scans: no tolerance can be judged on curves cut short).
    """
    if late(deadline):
        return None, {}
    scanning = evaluator.first(SENSITIVITY_SAMPLES)
    capping = masks_at(outside).masks if outside is not None else {}
    started = now()
    cap = CAP_FACTOR * scanning.distortion(capping) if capping and not late(deadline) else None
    if deadline is not None and not late(deadline):
        if not capping:
            scanning.distortion({})  # the pace of one evaluation, which the scans' length is foretold by
        scans = len(targets) * len(np.arange(step, 1.0, step))
        fewer, coarser = _scanned_in_time(scanning, scans, now() - started, deadline)
        step *= coarser
        if fewer is not scanning and capping:
            cap = CAP_FACTOR * fewer.distortion(capping)  # on the samples the curves are measured on
        scanning = fewer
    curves = sensitivities(scanning, masks_at, targets, step, cap, deadline)
    if late(deadline):
        return None, curves
    positive = [d for curve in curves.values() for _, d in curve if d > 0]
    if not positive:
        return None, curves
    grid = np.geomspace(min(positive), max(positive), tolerances)
    trail: list[Tried] = []
    best: SearchResult | None = None
    best_at = -1

    def attempt(tolerance: float) -> bool:
        nonlocal best
        levels = levels_within(curves, tolerance)
        result = masks_at(levels)
        drop, accuracy = evaluator.drop(result.masks)
        fits = accuracy.fits(budget)
        trail.append(Tried(f"per-layer tolerance {tolerance:.4g}", result.sparsity, drop, fits))
        if fits and (best is None or result.sparsity > best.chosen.sparsity):
            best = SearchResult(levels, result, accuracy, drop)
            return True
        return False

    for index, tolerance in enumerate(grid):
        if late(deadline):
            break
        if attempt(float(tolerance)):
            best_at = index
    if 0 <= best_at < len(grid) - 1:  # the grid's step past the best: a finer grid between the two
        for tolerance in np.geomspace(grid[best_at], grid[best_at + 1], refinements + 2)[1:-1]:
            if late(deadline):
                break
            attempt(float(tolerance))
    if best is not None:
        best.trail = trail
    return best, curves
