"""A compression recipe: which techniques, in which order, with which settings. It is what the search
varies, what each candidate is built from, and what the user gets back as a pipeline file that
``onnxsat run`` replays.

The order is fixed: structured pruning first (it changes shapes, and quantization must be calibrated on
the shapes that remain), quantization next, lossless fusion last (ORT's fused ops are not all ones its
quantizer can read). A recipe names its pruning per channel group, by the group's first root node, so the
search can give each group its own rate; groups it does not name stay whole.

Quantization inside a search is itself a search (which nodes to leave in float for the budget); once it
has run, the recipe records the nodes it left in float, so replaying the recipe quantizes exactly those
nodes with no search and no timing: the same model, byte for byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.errors import OnnxSatError
from onnxsat.inputs import InputSpec
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.pruning.prune import PruneOptions, prune_model
from onnxsat.quantization.quantize import QuantizeOptions, quantize_model

CALIBRATION_LIMIT = 512
"""Samples of the search data pruning's reconstruction is fitted on (the first ones): enough for a least-
squares refit of each layer, and it bounds the time one candidate takes on a large data set."""


SCORING_KEYS = ("metric", "metric_output")
"""Quantization's settings that choose what it scores: the same in a search and in a replay."""


@dataclass(frozen=True)
class Recipe:
    """Settings of each technique; the empty recipe is the original model."""

    prune: tuple[tuple[str, float], ...] = ()
    """(group's first root node, rate) for each pruned group, sorted by node name; rates in (0, 1)."""
    quantize: str | None = None
    """The quantization mode (static, dynamic, weight-only), or None for float."""
    quantize_budget: float | None = None
    """The whole recipe's budget, while quantization's node search has not run yet: quantization may add
    what pruning left of it."""
    keep_float: tuple[str, ...] = ()
    """Nodes quantization leaves in float: measured slower quantized, or over the budget (sorted)."""
    weight_bits: int | None = None
    """Bits of quantization's int8 weights (``QuantizeOptions.weight_bits``): None until its search has chosen."""
    fuse: bool = False
    """ONNXSat's lossless optimization (target ort) as the last step."""

    @staticmethod
    def pruned(rates: dict[str, float]) -> Recipe:
        return Recipe(prune=tuple(sorted((name, rate) for name, rate in rates.items() if rate > 0)))

    @property
    def rates(self) -> dict[str, float]:
        return dict(self.prune)

    def with_quantize(
        self, mode: str, budget: float | None, keep_float: tuple[str, ...] = (), weight_bits: int | None = None
    ) -> Recipe:
        kept = tuple(sorted(keep_float))
        return replace(self, quantize=mode, quantize_budget=budget, keep_float=kept, weight_bits=weight_bits)

    @property
    def label(self) -> str:
        """A short description: ``prune 50% (6 groups) + int8 static (2 in float) + fuse``, or with rates
        that differ, how many groups have each: ``prune 75% x4, 87.5% x2 (6 groups)``."""
        parts = []
        if self.prune:
            counts = Counter(rate for _, rate in self.prune)
            if len(counts) == 1:
                shown = f"{next(iter(counts)):.0%}"
            else:
                shown = ", ".join(f"{rate:.1%}".replace(".0%", "%") + f" x{n}" for rate, n in sorted(counts.items()))
            groups = _shortened(self.prune[0][0]) if len(self.prune) == 1 else f"{len(self.prune)} groups"
            parts.append(f"prune {shown} ({groups})")
        if self.quantize:
            said = [f"{len(self.keep_float)} in float"] if self.keep_float else []
            said += ["7-bit weights"] if self.weight_bits == 7 else []
            kept = f" ({', '.join(said)})" if said else ""
            parts.append(f"{'int4' if self.quantize == 'weight-only' else 'int8'} {self.quantize}{kept}")
        if self.fuse:
            parts.append("fuse")
        return " + ".join(parts) or "original"

    def passes(
        self,
        data: str | None = None,
        calibration_limit: int = CALIBRATION_LIMIT,
        scoring: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The recipe as pipeline entries (``type`` and the pass's keys); ``data`` is the calibration data
        (None: the pipeline's top-level ``data``); ``scoring``, the ``metric`` and ``metric_output`` keys
        quantization reports its accuracy with (a model of several outputs may need them named)."""
        entries: list[dict[str, Any]] = []
        if self.prune:
            entries.append(
                {
                    "type": "prune",
                    "rate": 0.0,
                    "rates": self.rates,
                    "reconstruct": True,
                    "holdout": 0.0,
                    **({"data": data} if data is not None else {}),
                    "limit": calibration_limit,
                }
            )
        if self.quantize:
            entries.append(
                {
                    "type": "quantize",
                    "mode": self.quantize,
                    "max_drop": None,
                    "exclude": list(self.keep_float),
                    **({"weight_bits": self.weight_bits} if self.weight_bits else {}),
                    "node_timing": False,
                    "holdout": 0.0,
                    **({"data": data} if data is not None else {}),
                    **(scoring or {}),
                }
            )
        if self.fuse:
            entries.append({"type": "eqsat", "target": "ort"})
        return entries


@dataclass
class Built:
    """A recipe's model, and what its steps found out on the way."""

    recipe: Recipe
    """The recipe as built: after a quantization search, with the nodes it left in float."""
    model: onnx.ModelProto
    notes: list[str] = field(default_factory=list)


def build(
    recipe: Recipe,
    model: onnx.ModelProto,
    data: str,
    inputs: InputSpec,
    quantize_settings: dict[str, Any] | None = None,
    calibration_limit: int = CALIBRATION_LIMIT,
    base_dir: Path | None = None,
    spent: Callable[[onnx.ModelProto], float] | None = None,
    fit_data: str | None = None,
    scorer: Callable[[], ModelScorer] | None = None,
) -> Built:
    """``recipe`` applied to ``model`` with the same pass functions its pipeline runs. ``data`` is the
    calibration data (a spec ``load_dataset`` reads), ``fit_data`` what pruning refits on when not the same
    (the samples candidates are not scored on); ``quantize_settings`` (metric, outputs) are used by
    quantization's node search while ``recipe.quantize_budget`` is set, and ``spent`` says how much of the
    budget the pruned model already uses. Quantization scores its result even with no budget to search,
    so the metric and its outputs go to it always. ``scorer`` makes ``model``'s scorer on ``data``, which
    quantization reuses when nothing was pruned before it (asked only then). Quantization does not time its
    result: the caller does."""
    notes: list[str] = []
    settings = dict(quantize_settings or {})
    scoring = {key: settings[key] for key in SCORING_KEYS if key in settings}
    if recipe.prune:
        options = PruneOptions(
            rate=0.0,
            rates=recipe.rates,
            reconstruct=True,
            data=fit_data or data,
            holdout=0.0,
            limit=calibration_limit,
            inputs=inputs,
        )
        model, prune_report = prune_model(model, options, base_dir=base_dir)
        base_dir = None
        notes += prune_report.notes
    if recipe.quantize:
        searching = recipe.quantize_budget is not None
        budget = recipe.quantize_budget
        if budget is not None and recipe.prune and spent is not None:
            budget = max(0.0, budget - spent(model))
        options = QuantizeOptions(
            mode=recipe.quantize,
            max_drop=budget,
            exclude=list(recipe.keep_float),
            weight_bits=recipe.weight_bits,
            node_timing=False,
            holdout=0.0,
            data=data,
            inputs=inputs,
            **(settings if searching else scoring),
        )
        try:
            reused = scorer() if scorer is not None and not recipe.prune else None  # a pruned one: against itself
            model, quantize_report = quantize_model(model, options, base_dir=base_dir, scorer=reused, timed=False)
        except OnnxSatError as error:
            if budget is None or recipe.quantize_budget is None or budget >= recipe.quantize_budget:
                raise
            left = f"the pruning before it leaves {budget:.2%} of the {recipe.quantize_budget:.2%} budget"
            said = type(error)(f"{error} ({left})")
            said.report = error.report
            raise said from None
        base_dir = None
        kept = tuple(n.node for n in quantize_report.nodes if not n.quantized)
        recipe = recipe.with_quantize(recipe.quantize, None, kept, quantize_report.weight_bits)
        notes += quantize_report.notes
    if recipe.fuse:
        fused, report = optimize_model(model, OptimizeOptions(target="ort", inputs=inputs), base_dir=base_dir)
        if report.verification is not None and report.verification.ok:
            model = fused
        else:
            recipe = replace(recipe, fuse=False)
            notes.append("fusion left out: its result did not verify")
    return Built(recipe, model, notes)


LABEL_NAME_CHARS = 48
"""A group's name in a recipe's label is cut to this many characters: tf2onnx names a node after every
TensorFlow op fused into it (basic-pitch's: 250 characters of ``model_1/re_lu_2/Relu;model_1/re_lu_2/Relu;...``),
which pushed each row of compress's table across several lines. The recipe file keeps the whole name."""


def _shortened(name: str) -> str:
    return name if len(name) <= LABEL_NAME_CHARS else name[: LABEL_NAME_CHARS - 3] + "..."
