"""``onnxsat compress``: the fastest model inside an accuracy budget, searched over structured pruning,
quantization and fusion together (see ``search`` for the strategy).

The driver (this module) loads the data and sets part of it aside that the search never sees, splits the
rest into a part pruning refits on and a part candidates are scored on (quantization calibrates on both),
fixes the metric on the original, starts the executor (a local process pool, or Ray), lets the search propose
candidates, times the ones inside the budget here, then measures the chosen recipe step by step side by
side, scores it on the held-out part and verifies it. The recipe comes back as pipeline entries that
``onnxsat run`` replays into the same model.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxsat.compression.evaluate import Outcome, Problem, samples_npz
from onnxsat.compression.executor import make_executor
from onnxsat.compression.recipe import CALIBRATION_LIMIT, Recipe
from onnxsat.compression.report import CandidateRow, CompressReport, Contribution, mark_pareto
from onnxsat.compression.search import MARGIN, PROBE_RATE, Evaluated, Search, SearchSettings
from onnxsat.compression.timing import SideBySide, machine
from onnxsat.data.model_input import (
    batch_size_for,
    data_input,
    defaulted_sizes,
    evaluation_data,
    sized_by_data,
    with_data_rows,
)
from onnxsat.data.sources import Dataset
from onnxsat.eqsat.portable import portable_form
from onnxsat.errors import NothingPaysError, SettingsError
from onnxsat.external_data import given_bytes, with_data_loaded
from onnxsat.inputs import InputSpec
from onnxsat.latency import against_file_as_given
from onnxsat.metrics import (
    AUTO,
    HeldOut,
    MetricSpec,
    check_confidence,
    check_spec,
    confidence_option,
    metric_option,
    with_fidelity,
)
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.options import float_list, option, percent
from onnxsat.pruning.prune import association_trees, kept_multiple
from onnxsat.quantization.quantize import NodeTimes, applicable_modes, slower_nodes
from onnxsat.time_budget import BUDGET_MINUTES, check_budget_minutes, seconds_per_run
from onnxsat.verification import check_lossy, reference_run

TECHNIQUES = ("prune", "quantize", "fuse")
NOT_SLOWER, SMALLER = 0.97, 0.9
"""A model is written when it is faster than the original by the search's margin, or, when it is no
slower than this (ratio noise here is 1-2%), at most this share of the original's size."""


SEARCH_CONFIDENCE = 0.99
"""compress's default ``--confidence``, above the 0.9 of quantize and sparsify (whose searches compare a few
levels): it compares 30-60 candidates on the same samples, and at 0.9 the fastest inside the budget was the
luckiest of many close ones. Measured on a Keras MobileNetV2 (0.5% budget, 1,438 search digits, seeds 0-2), the
held-out drops were 1.95%, 0.56% and -0.28% at 0.9 (1.46x, 1.47x, 1.45x) and 1.11%, 0.00% and 0.00% at 0.99
(1.40x, 1.33x, 1.25x); on the retrained digits ResNet, 12.07x at -0.50 points at 0.9 and 14.56x at 0.00 at 0.99
(separate runs)."""


@dataclass
class CompressOptions:
    """The compress pass's settings: ``onnxsat compress``'s flags, the ``compress`` pipeline keys, keywords."""

    max_drop: float = option(0.01, type=percent, help="largest allowed drop of the metric (default 1%%)")
    metric: MetricSpec = metric_option()
    metric_output: list[str] = option(default_factory=list, metavar="NAME", help="outputs the budget applies to")
    confidence: float = confidence_option(SEARCH_CONFIDENCE)
    data: str | None = option(None, help="data the budget is measured on: digits, an image folder, CIFAR-10, an .npz")
    eval_data: str | None = option(None, help="held-out data for the final figure (default: --holdout of --data)")
    holdout: float = option(0.2, type=percent, help="share of --data the search never sees (default 20%%)")
    fidelity: bool = option(False, help="ignore labels: agreement with the original model")
    limit: int | None = option(None, type=int, help="use at most this many samples of the data")
    mean: Sequence[float] | None = option(None, type=float_list, help="per-channel mean for images scaled to [0, 1]")
    std: Sequence[float] | None = option(None, type=float_list, help="per-channel std images are divided by")
    techniques: list[str] = option(
        default_factory=lambda: list(TECHNIQUES),
        metavar="NAME",
        help="techniques the search may use (default: prune quantize fuse)",
    )
    latency_batch: int = option(1, type=int, help="batch size latency is measured at (default 1)")
    threads: int = option(1, type=int, help="intra-op threads latency is measured with (default 1)")
    budget_minutes: float = option(
        BUDGET_MINUTES,
        type=float,
        help="the whole run's time limit (the work before the search counts): a candidate starts only if, at the "
        "pace of the ones before it, it ends in time for the best so far to be fused, timed and verified by then",
    )
    ray: str | None = option(None, metavar="auto|ADDRESS", help="run evaluations on Ray: auto (local) or a cluster")
    workers: int | None = option(None, type=int, help="parallel evaluations (default: the cores here)")
    seed: int = option(0, type=int, help="seed of the held-out split")
    calibration_limit: int = CALIBRATION_LIMIT
    batch_size: int = 64
    inputs: InputSpec = field(default_factory=InputSpec)
    restated_inputs: tuple[str, ...] = ()
    """Weights the file as given also lists as graph inputs (the runner's normal form made them constants):
    the result is timed against that form too."""

    def check(self) -> None:
        if not 0.0 <= self.max_drop <= 1.0:
            raise SettingsError(f"--max-drop must be in [0%, 100%], got {self.max_drop:.2%}")
        if not 0.0 <= self.holdout < 1.0:
            raise SettingsError(f"--holdout must be in [0%, 100%), got {self.holdout:.2%}")
        for name, value in (("--latency-batch", self.latency_batch), ("--threads", self.threads)):
            if value < 1:
                raise SettingsError(f"{name} must be at least 1, got {value}")
        if self.workers is not None and self.workers < 1:
            raise SettingsError(f"--workers must be at least 1, got {self.workers}")
        if self.limit is not None and self.limit < 1:
            raise SettingsError(f"--limit must be at least 1, got {self.limit}")
        check_budget_minutes(self.budget_minutes)
        unknown = [t for t in self.techniques if t not in TECHNIQUES]
        if unknown or not self.techniques:
            what = f"unknown technique {unknown[0]!r}" if unknown else "name at least one technique"
            raise SettingsError(f"--techniques: {what} (known: {', '.join(TECHNIQUES)})")
        self.metric, self.fidelity = with_fidelity(self.metric, self.fidelity)
        check_spec(self.metric)
        check_confidence(self.confidence)


def compress_model(
    model: onnx.ModelProto, options: CompressOptions, source: str = "<memory>", base_dir: Path | None = None
) -> tuple[onnx.ModelProto, CompressReport]:
    """Compress ``model`` (left unchanged) inside ``options.max_drop``; return the result and its report."""
    start, began = time.perf_counter(), time.monotonic()  # the budget counts the work before the search too
    options.check()
    rows = with_data_rows(options.inputs, options.data, model)  # inputs --data feeds per sample
    options = replace(options, inputs=rows)
    report = CompressReport(input=source, output=None, max_drop=options.max_drop)
    search_data, held_data = _data(model, options)  # data that does not fit is said first
    if options.data == "random" and (sizes := defaulted_sizes(model, options.inputs, search_data)):
        report.notes.append(sizes)
    options = replace(options, inputs=sized_by_data(model, options.inputs, search_data))
    report.input_shapes = {name: list(dims) for name, dims in options.inputs.shapes.items()}
    original_run = reference_run(model, options.inputs, base_dir=base_dir)
    given_size = given_bytes(model, source)
    model = with_data_loaded(model, base_dir)
    given = options.inputs.given
    input_name = data_input(model, given).name
    batch = batch_size_for(model, options.batch_size, given)
    groups = _groups(model, options, report) if "prune" in options.techniques else {}
    modes = applicable_modes(model) if "quantize" in options.techniques else []
    if not groups and not modes and "fuse" not in options.techniques:
        raise SettingsError("nothing to compress: the model has no prunable channel group and nothing to quantize")
    fit_data, scored_data = _fit_split(search_data, bool(groups), options, report)
    scorer = ModelScorer(
        model, input_name, scored_data, metric=options.metric, outputs=options.metric_output, given=given,
        batch_size=batch, threads=options.threads, confidence=options.confidence,
    )  # fmt: skip
    report.data, report.baseline = scored_data.name, scorer.baseline
    split = fit_data is not scored_data
    if split:
        report.fitted_on = f"{fit_data.name}: {len(fit_data)} samples, none of them scored"
    report.confidence = options.confidence
    report.metric, report.metrics = scorer.baseline.metric, scorer.budget.describe()
    report.notes += scorer.blind_spots(options.max_drop)
    search_bytes = samples_npz(search_data)
    problem = Problem(
        key=uuid.uuid4().hex,
        model=model.SerializeToString(),
        data=samples_npz(scored_data) if split else search_bytes,
        data_name=scored_data.name,
        fit_data=samples_npz(fit_data) if split else search_bytes,
        calibration_data=search_bytes,
        input_name=input_name,
        spec=options.inputs,
        metrics=scorer.budget.metrics,
        metric_spec=options.metric,
        outputs=list(options.metric_output),
        batch_size=batch,
        calibration_limit=options.calibration_limit,
        confidence=options.confidence,
    )
    feeds = _latency_feeds(model, search_data, input_name, options)
    timer = SideBySide(model, feeds, options.threads, seconds_per_run(options.budget_minutes))
    float_sets = _FloatSets(options.inputs, options.threads)
    workers = options.workers or os.cpu_count() or 1
    with make_executor(options.ray, workers) as executor:
        report.evaluated_on = executor.name
        settings = SearchSettings(
            options.max_drop, groups, modes, "fuse" in options.techniques,
            began + options.budget_minutes * 60, width=workers,
        )  # fmt: skip
        progress = _Progress()
        search = Search(problem, settings, executor, timer, float_sets, on_progress=progress.update)
        original = Outcome(Recipe(), scorer.baseline, 0.0, None, len(problem.model))
        try:
            chosen = search.run(original)
            try:
                if not _pays(chosen, len(problem.model)):
                    message = _nothing_fits(search.evaluated, options.max_drop, chosen)
                    if search.stopped_early:
                        cut = f", {_unfinished(search)}" if search.cut else ""
                        count = len(search.evaluated)
                        built = f"{count} candidate{'s' if count != 1 else ''}"
                        message += f" (--budget-minutes ran out after {built}{cut})"
                    raise NothingPaysError(message)
                steps = _contributions(search, chosen)
            except SettingsError as error:  # the candidates tried are shown, and written with --report, --html
                _searched(report, search, options)
                report.seconds = time.perf_counter() - start
                error.report = report
                raise
        finally:
            progress.close()
    chosen = steps[-1][0]
    _searched(report, search, options, chosen.recipe.rates)
    result = onnx.load_from_string(chosen.outcome.model)  # type: ignore[arg-type]
    report.contributions = [Contribution(label, e.speedup, e.outcome.drop, e.outcome.size) for e, label in steps]
    report.chosen, report.accuracy = chosen.recipe.label, chosen.outcome.score
    report.recipe = chosen.recipe.passes(calibration_limit=options.calibration_limit, scoring=_scoring(options))
    report.search_data, report.fit_data = search_data, fit_data if split else None
    assert chosen.timed is not None
    report.latency = {
        "original_ms": chosen.timed.original_ms,
        "compressed_ms": chosen.timed.latency_ms,
        "speedup": chosen.timed.speedup,
        "threads": float(options.threads),
        "batch": float(feeds[input_name].shape[0]),
    }
    if options.restated_inputs:
        figures, line = against_file_as_given(model, options.restated_inputs, result, feeds, options.threads)
        report.latency.update(figures)
        report.notes.append(line)
    if not _faster(chosen):  # written because it is smaller: say that it is not faster
        share = chosen.outcome.size / len(problem.model)
        report.notes.append(
            f"written for its size ({share:.0%} of the original's bytes), not its speed: {chosen.speedup:.2f}x is "
            "inside the timing noise"
        )
    if held_data is not None:
        held = ModelScorer(
            model, input_name, held_data, metric=scorer.budget.metrics, outputs=options.metric_output, given=given,
            batch_size=batch, threads=options.threads,
        )  # fmt: skip
        score = held.score(result)
        report.held_out = HeldOut.of(held_data.name, held.baseline, score, options.max_drop, options.confidence)
        if not report.held_out.within_budget:
            report.notes.append(
                f"on the held-out data the drop is {score.drop:.2%}, over the {options.max_drop:.2%} budget: the "
                f"search data ({search_data.samples} samples) is too small or unlike it; give more --data"
            )
    names = [output.name for output in model.graph.output]
    _, report.verification = check_lossy(original_run, result, names, "compression", None)
    report.sizes = {"original": given_size, "compressed": result.ByteSize()}
    report.seconds = time.perf_counter() - start
    return result, report


def _scoring(options: CompressOptions) -> dict[str, Any]:
    """The recipe's scoring keys the user set (a metric function of the Python API has no pipeline form)."""
    metric = {"metric": options.metric} if isinstance(options.metric, str) and options.metric != AUTO else {}
    return {**metric, **({"metric_output": list(options.metric_output)} if options.metric_output else {})}


RANDOM_SAMPLES = 64
"""Seeded random samples ``--data random`` gives: a fifth held out still leaves a dozen to check on."""


def _data(model: onnx.ModelProto, options: CompressOptions) -> tuple[Dataset, Dataset | None]:
    """(search data, held-out data): ``--data`` less its held-out part, or ``--data`` and ``--eval-data``."""
    if options.data is None:
        given = [v.name for v in model.graph.input if v.name in options.inputs.given]
        rows = (
            f"; --inputs fixes the values of {', '.join(repr(n) for n in given)} for every sample: to search on "
            f"the rows of one of them, save them as `inputs` in an .npz for --data and leave it out of --inputs"
            if given
            else ""
        )
        raise SettingsError(
            "compress needs --data: the accuracy budget is measured on it (`--data random` for seeded random "
            f"inputs, which measures agreement with the original on those alone){rows}"
        )

    def load(spec: str, held_out: bool = False) -> Dataset:
        dataset = evaluation_data(
            model, spec, options.inputs, limit=options.limit, mean=options.mean, std=options.std,
            fidelity=options.fidelity, random_count=RANDOM_SAMPLES, held_out=held_out,
        )  # fmt: skip
        assert dataset is not None
        return dataset

    dataset = load(options.data)
    if options.eval_data is not None:
        return dataset, load(options.eval_data, held_out=True)
    return dataset.split(options.holdout, options.seed)


FIT_SHARE = 0.5
"""Share of the search data pruning's reconstruction is fitted on (at most ``calibration_limit`` samples) when
the search prunes; candidates are scored on the rest. A least-squares refit scored on its own samples looks
better than it is: on a digits ResNet pruned 75-87%, 0.25 points better than the original on them and 3.3
points worse on new samples."""
FIT_SPLIT_MIN = 16
"""Search samples below which none are set apart for the refit: halving a handful (a layout detector's 4
search pages) leaves too few scored for the budget's bound to say anything."""


def _fit_split(
    search: Dataset, pruning: bool, options: CompressOptions, report: CompressReport
) -> tuple[Dataset, Dataset]:
    """(fit part, scored part) of the search data: disjoint when the search prunes, else both all of it
    (quantization calibrates on every search sample either way: setting ranges is no fit a score flatters)."""
    if not pruning:
        return search, search
    if len(search) < FIT_SPLIT_MIN:
        report.notes.append(
            f"pruned candidates are refitted on the {len(search)} search samples they are scored on (too few to "
            "set some apart): their drops there can be lower than on new data, which the held-out figure checks"
        )
        return search, search
    share = min(FIT_SHARE, options.calibration_limit / len(search))
    scored, fit = search.split(share, options.seed + 1)
    assert fit is not None  # at least one sample of FIT_SPLIT_MIN or more
    base = search.name.removesuffix(" (search part)")
    return replace(fit, name=f"{base} (fit part)"), replace(scored, name=f"{base} (scored part)")


def _groups(model: onnx.ModelProto, options: CompressOptions, report: CompressReport) -> dict[str, tuple[int, int]]:
    """Prunable channel groups, each named by its first root node, in the form prune starts from (its
    portable form, when that verifies: the same each candidate's prune makes), with their channel counts
    and the multiple kept counts round to (rates that round alike make the same model)."""
    try:
        _, _, forest = association_trees(portable_form(model, options.inputs).model)
    except Exception as error:  # pruning is one technique among three: a graph it cannot read is not fatal
        report.notes.append(f"pruning left out: its association trees failed ({type(error).__name__}: {error})")
        return {}
    prunable = {g.roots[0].node: (g.channels, kept_multiple(g)) for g in forest.groups if g.prunable}
    if not prunable and "prune" in options.techniques:  # said, not left for the user to wonder about
        firsts = list(dict.fromkeys(g.reasons[0] if g.reasons else "a single channel" for g in forest.groups))
        why = f" ({'; '.join(firsts[:2])}{'; ...' if len(firsts) > 2 else ''})" if firsts else ""
        report.notes.append(f"pruning left out: no channel group can be pruned{why}; `onnxsat prune` says more")
    return prunable


def _latency_feeds(
    model: onnx.ModelProto, dataset: Dataset, name: str, options: CompressOptions
) -> dict[str, np.ndarray]:
    """``--latency-batch`` samples of the search data (or the model's fixed batch), given inputs beside."""
    batch = batch_size_for(model, options.latency_batch, options.inputs.given)
    value = next(v for v in model.graph.input if v.name == name)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    samples, companions = dataset.first(batch)
    return {**options.inputs.given, **companions, name: samples.astype(dtype)}


class _FloatSets:
    """The forms of each (model, mode) worth building, as ``NodeTimes.float_sets``: nodes timed alone here
    once, per model and mode; none when the mode's nodes cannot be timed (it is then quantized whole)."""

    def __init__(self, inputs: InputSpec, threads: int) -> None:
        self.inputs, self.threads = inputs, threads
        self.cache: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}

    def __call__(self, model: bytes, mode: str) -> dict[str, tuple[str, ...]]:
        key = (hashlib.sha256(model).hexdigest(), mode)
        if key not in self.cache:
            try:
                times = slower_nodes(onnx.load_from_string(model), mode, self.inputs, self.threads)
            except Exception:  # timing is advice: a model it cannot time is quantized whole
                times = NodeTimes((), (), 1)
            self.cache[key] = times.float_sets()
        return self.cache[key]


def _contributions(search: Search, chosen: Evaluated) -> list[tuple[Evaluated, str]]:
    """The chosen recipe step by step (pruning, then quantization, then fusion), each built and all timed
    in one side-by-side run: what each technique adds, and the chosen model's reported speed."""
    recipe = chosen.recipe
    prefixes: list[tuple[Recipe, str]] = []
    if recipe.prune:
        prefixes.append((Recipe(prune=recipe.prune), Recipe(prune=recipe.prune).label))
    if recipe.quantize:
        step = replace(recipe, fuse=False)
        prefixes.append((step, "+ " + step.label.split(" + ")[-1]))
    if recipe.fuse:
        prefixes.append((recipe, "+ fuse"))
    built = search.batch("contribution", [r for r, _ in prefixes], bounded=False)
    kept = [(b, label) for b, (_, label) in zip(built, prefixes, strict=True) if b.outcome.model is not None]
    if not kept or kept[-1][0].recipe != recipe:  # a step that built inside the search no longer builds
        raise SettingsError(f"the chosen recipe could not be rebuilt: {built[-1].outcome.error}")
    if len(kept) == 1 and chosen.timed is not None:  # one step: what the search timed it at already
        return [(replace(kept[0][0], timed=chosen.timed), kept[0][1])]
    figures = search.timer.measure([b.outcome.model for b, _ in kept])  # type: ignore[misc]
    return [(replace(b, timed=figure), label) for (b, label), figure in zip(kept, figures, strict=True)]


def _searched(
    report: CompressReport, search: Search, options: CompressOptions, chosen: Mapping[str, float] | None = None
) -> None:
    """What the search tried, into the report: every candidate, the Pareto front, the groups over the budget
    at the probe rate (``chosen``: the rates of the model written, which may prune one of them less)."""
    report.stopped_early = search.stopped_early
    report.latency_where = machine()
    report.candidates = _rows(search.evaluated, options.max_drop)
    mark_pareto(report.candidates)
    report.notes += [
        _costly_line(group, bound, options.confidence, group in search.unprobed, (chosen or {}).get(group, 0.0))
        for group, bound in _costly(search, options)
    ]
    if len(search.finalists) > 1:
        report.notes.append(_final_line(search))
    if search.cut:
        report.notes.append(f"{_unfinished(search)}: a longer --budget-minutes lets them finish")


def _unfinished(search: Search) -> str:
    """The candidates the time limit stopped while they ran, as a phrase."""
    count = len(search.cut)
    labels = ", ".join(recipe.label for recipe in search.cut)
    return f"{count} more {'was' if count == 1 else 'were'} stopped unfinished when the time ran out ({labels})"


def _final_line(search: Search) -> str:
    """How the model was chosen among the fastest, timed again together (the table shows that run's figures
    for them): the fastest, or a smaller file not slower beyond the timing noise."""
    number = {id(e): index for index, e in enumerate(search.evaluated, 1)}
    figures = ", ".join(
        f"#{number[id(e)]} {e.speedup:.2f}x [{e.timed.low:.2f}-{e.timed.high:.2f}]"
        for e in sorted(search.finalists, key=lambda e: -e.speedup)
        if e.timed is not None and id(e) in number
    )
    chosen = search.best
    fastest = max(search.finalists, key=lambda e: e.speedup)
    why = "the fastest" if chosen is fastest else "the smallest file not slower than the fastest beyond timing noise"
    return f"the fastest candidates timed again together: {figures}; chosen #{number.get(id(chosen), '?')}, {why}"


def _pays(chosen: Evaluated, original_size: int) -> bool:
    """Whether the chosen model is worth writing: faster beyond noise (by ``MARGIN``, and the low end of
    its interval above the original's), or as fast and smaller. A speedup inside the noise alone would
    write a model on one run and nothing on the next."""
    if chosen.outcome.model is None:
        return False
    return _faster(chosen) or (chosen.speedup >= NOT_SLOWER and chosen.outcome.size <= SMALLER * original_size)


def _faster(chosen: Evaluated) -> bool:
    """Faster than the original beyond the timing noise: by ``MARGIN``, and the low end of its interval above 1."""
    low = chosen.timed.low if chosen.timed is not None else chosen.speedup
    return chosen.speedup >= MARGIN and low > 1.0


def _nothing_fits(evaluated: list[Evaluated], max_drop: float, chosen: Evaluated) -> str:
    """Why nothing is written. ``chosen`` is the search's pick, timed again with the other finalists: the
    figure quoted when it is inside the budget, with the interval that keeps it from counting as faster."""
    scored = [e for e in evaluated if e.outcome.drop is not None]
    if not scored:
        reasons = sorted({e.outcome.error for e in evaluated if e.outcome.error})
        return "no candidate could be built" + (f": {reasons[0]}" if reasons else "") + "; nothing written"
    inside = [e for e in scored if e.outcome.fits(max_drop)]
    if inside:
        closest = chosen if chosen.recipe.label != "original" else max(inside, key=lambda e: e.speedup)
        return (
            f"no candidate inside the {max_drop:.2%} budget is faster than the original beyond the timing noise "
            f"(closest: {closest.recipe.label}, {_speed_text(closest)}, drop {closest.outcome.drop:.2%})"
            f"{_fastest_outside(scored, max_drop)}; nothing written"
        )
    closest = min(scored, key=lambda e: e.outcome.bound)
    return (
        f"no candidate fits the {max_drop:.2%} budget (closest: {closest.recipe.label}, drop "
        f"{closest.outcome.drop:.2%}{_bound_text(closest.outcome)}); nothing written"
    )


def _fastest_outside(scored: list[Evaluated], max_drop: float) -> str:
    """``; the fastest outside it: ...`` for the fastest candidate over the budget that ran faster, or nothing.
    When its drop is inside the budget and only the sampling error keeps it out, more data is what would let it
    in: a YOLO classifier's int8 forms ran 1.43x and agreed better than the original on 13 samples, whose
    sampling error alone was 10%."""
    faster = [e for e in scored if not e.outcome.fits(max_drop) and e.speedup >= MARGIN]
    if not faster:
        return ""
    fastest = max(faster, key=lambda e: e.speedup)
    drop = fastest.outcome.drop or 0.0
    text = f"; the fastest outside it: {fastest.recipe.label}, {fastest.speedup:.2f}x, drop {drop:.2%}"
    text += _bound_text(fastest.outcome)
    return text + (" (more --data narrows that)" if drop <= max_drop else "")


def _speed_text(candidate: Evaluated) -> str:
    """``1.17x`` and, when it was timed, the interval that did not clear 1: ``1.17x, interval 0.97-1.31x``."""
    timed = candidate.timed
    if timed is None or timed.high == float("inf"):
        return f"{candidate.speedup:.2f}x"
    return f"{candidate.speedup:.2f}x, interval {timed.low:.2f}-{timed.high:.2f}x"


def _bound_text(outcome: Outcome) -> str:
    """``, up to 0.88% within the sampling error`` when the bound the budget is held against is above the drop."""
    score = outcome.score
    if score is None or score.bound <= score.drop:
        return ""
    return f", up to {score.bound:.2%} within the sampling error"


def _rows(evaluated: list[Evaluated], max_drop: float) -> list[CandidateRow]:
    rows = []
    for index, e in enumerate(evaluated, start=1):
        score = e.outcome.score
        rows.append(
            CandidateRow(
                index=index,
                stage=e.stage,
                label=e.recipe.label,
                recipe={"passes": e.recipe.passes()},
                drop=e.outcome.drop,
                bound=score.bound if score is not None else None,
                value=score.value if score is not None else None,
                within_budget=e.outcome.fits(max_drop),
                speedup=e.timed.speedup if e.timed is not None else None,
                latency_ms=e.timed.latency_ms if e.timed is not None else None,
                size=e.outcome.size,
                seconds=e.outcome.seconds,
                error=e.outcome.error,
            )
        )
    return rows


def _costly_line(group: str, bound: float, confidence: float, unprobed: bool = False, rate: float = 0.0) -> str:
    """Why a group is not pruned at the probe rate: alone there, its drop's bound (not the drop) is over budget,
    or it failed, or its probe never ran; ``rate``: the rate the chosen model prunes it at all the same
    (refinement tries each group a step at a time from the lowest; beside the others' changes and their
    refit, a whole candidate can be inside the budget where the group alone was not)."""
    probe = f"{group}: pruned alone at {PROBE_RATE:.0%}"
    if not rate:
        outcome = "never pruned"
    elif rate < PROBE_RATE:
        outcome = f"the chosen model prunes it at {rate * 100:g}% only"
    else:  # refinement raised it beside the others, and that whole candidate measured inside the budget
        outcome = f"the chosen model still prunes it at {rate * 100:g}%, where the whole model is inside the budget"
    if unprobed:
        return f"{group}: {outcome}: the time budget ran out before it was pruned alone at {PROBE_RATE:.0%}"
    if bound == float("inf"):
        return f"{probe}, it failed: {outcome}"
    return f"{probe}, its drop bound is {bound:.2%} ({confidence:.0%} confidence), over the budget: {outcome}"


def _costly(search: Search, options: CompressOptions) -> list[tuple[str, float]]:
    return [(g, d) for g, d in search.sensitivity.items() if d > options.max_drop]


class _Progress:
    """A progress bar on stderr with the best model so far (tqdm, the ``bench`` extra; nothing without it)."""

    def __init__(self) -> None:
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(desc="compress", unit="candidate", leave=False, disable=None, file=sys.stderr)

    def update(self, best: Evaluated | None, count: int) -> None:
        if self.bar is None:
            return
        self.bar.n = count
        if best is not None:
            self.bar.set_postfix_str(f"best {best.speedup:.2f}x: {best.recipe.label}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
