"""``onnxsat prune`` end to end: trees, importance, channels removed, optional reconstruction, verification.

Structured pruning changes the model's outputs by design, so verification means: the result passes the
checker, ONNX Runtime runs it, and every graph output keeps its shape and type (groups reaching a graph
output are never pruned, so a changed output shape would be a bug). How much accuracy it keeps is for
the data to tell (``onnxsat.pruning.bench``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from threadpoolctl import threadpool_limits

from onnxsat import model_io
from onnxsat.data.model_input import (
    batch_size_for,
    data_input,
    evaluation_data,
    fitted_to_model,
    sized_by_data,
    with_data_rows,
)
from onnxsat.data.sources import Dataset
from onnxsat.eqsat.portable import portable_form
from onnxsat.errors import SettingsError
from onnxsat.external_data import given_bytes, stored_bytes
from onnxsat.inputs import InputSpec, random_inputs
from onnxsat.metrics import MetricSpec, check_spec, collapse_warning, metric_option, with_fidelity
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.normal_form import densify_sparse_initializers, normal_form
from onnxsat.options import float_list, option, percent
from onnxsat.proto_fields import all_graphs
from onnxsat.pruning.apply import apply_pruning, drop_orphans
from onnxsat.pruning.cost import counted_macs, parameter_count
from onnxsat.pruning.graph import GraphIndex, node_label
from onnxsat.pruning.importance import (
    CRITERIA,
    feature_ranks,
    get_criterion,
    group_scores,
    ranked_maps,
    select_kept,
)
from onnxsat.pruning.library import load_library
from onnxsat.pruning.reconstruct import reconstruct
from onnxsat.pruning.report import GroupReport, PruneReport
from onnxsat.pruning.trees import ChannelGroup, Forest, build_groups, format_trees, render_trees
from onnxsat.pruning.unfuse import fused_count, split_fused
from onnxsat.quantized_already import quantized_note
from onnxsat.verification import check_lossy, reference_run

RANDOM_CALIBRATION_SAMPLES = 16
"""Seeded normal inputs used for HRank or reconstruction when no data is given (said in the report)."""
VERIFY_SAMPLES = 16
"""Samples of the scored data the verification's "changed by" figures come from (not a random input)."""


CHANNEL_MULTIPLE = 8
"""Kept channel counts are rounded up to multiples of this by default (ORT runs convolutions in layouts
blocked by 8 or 16 channels)."""


@dataclass
class PruneOptions:
    """The prune pass's settings: ``onnxsat prune``'s flags, the ``prune`` pipeline keys, keywords."""

    rate: float = option(0.5, type=percent, help="fraction of each group's channels to remove")
    """Fraction of each group's channels to remove (floor, at least one channel kept; see channel_multiple)."""
    criterion: str = option("l1", choices=lambda: CRITERIA, help="channel importance (default l1)")
    single_node: bool = option(False, help="score root filters only, not the whole tree")
    """Score root filters only, instead of the whole tree (the paper's baseline)."""
    exclude: list[str] = option(default_factory=list, metavar="NAME", help="root nodes whose group stays whole")
    """Root node (or weight) names whose whole group stays intact."""
    rates: dict[str, float] = option(
        default_factory=dict,
        nargs="+",
        metavar="NAME=RATE",
        parse=lambda specs: parse_rates(specs),
        help="per-root-node rates",
    )
    """Per root node (or weight) name: the rate for its group (the smallest when a group's roots differ)."""
    reconstruct: bool = option(False, help="refit the next layers by least squares")
    channel_multiple: int = option(
        CHANNEL_MULTIPLE, help="round kept channel counts up to multiples of this (ORT's blocked layouts; 1: exact)"
    )
    """Kept channel counts are rounded up to multiples of this where the original count is one (1: off)."""
    data: str | None = option(None, help="calibration data for hrank/--reconstruct: digits, a folder, CIFAR, an .npz")
    """Calibration data for HRank and reconstruction, as ``load_dataset`` takes it; None: random inputs."""
    limit: int | None = option(None, type=int, help="use at most this many calibration samples")
    holdout: float = option(
        0.2, type=percent, help="share of --data kept out of calibration to score the pruned model on (default 20%%)"
    )
    """Reconstruction fits the data it calibrates on, so its accuracy there flatters it: the figure comes
    from a part it never saw."""
    metric: MetricSpec = metric_option()
    metric_output: list[str] = option(default_factory=list, metavar="NAME", help="outputs the accuracy is scored on")
    fidelity: bool = option(False, help="ignore labels: agreement with the original model")
    mean: Sequence[float] | None = option(
        None, type=float_list, help="per-channel mean subtracted from images scaled to [0, 1]"
    )
    std: Sequence[float] | None = option(None, type=float_list, help="per-channel std images are divided by")
    library: str | Path | None = option(
        None, metavar="JSON", help='extra node attribute library: {"OpType": "category"}'
    )
    """A JSON file extending the node attribute library."""
    normalize: bool = option(
        True, flag="--no-normalize", negate=True, help="prune the model as given, without folding constants first"
    )
    """Start from ONNXSat's portable optimization when it verifies (constants, BatchNorm and Reshape
    targets folded, so channels can be followed through them); off: the model exactly as given."""
    inputs: InputSpec = field(default_factory=InputSpec)
    batch_size: int = 32

    def check(self) -> None:
        _check_rate(self.rate, "--rate")
        if self.channel_multiple < 1:
            raise SettingsError(f"--channel-multiple must be at least 1, got {self.channel_multiple}")
        for name, rate in self.rates.items():
            _check_rate(rate, f"--rates {name}")
        get_criterion(self.criterion)
        if self.limit is not None and self.limit < 1:
            raise SettingsError(f"--limit must be at least 1, got {self.limit}")
        if self.batch_size < 1:
            raise SettingsError(f"batch size must be at least 1, got {self.batch_size}")
        if not 0.0 <= self.holdout < 1.0:
            raise SettingsError(f"--holdout must be in [0%, 100%), got {self.holdout:.2%}")
        self.metric, self.fidelity = with_fidelity(self.metric, self.fidelity)
        check_spec(self.metric)

    @property
    def mode(self) -> str:
        return "single-node" if self.single_node else "tree-level"


def _check_rate(rate: float, what: str) -> None:
    if not 0.0 <= rate < 1.0:
        raise SettingsError(f"{what} must be in [0, 1), got {rate:g}")


def parse_rates(specs: Sequence[str]) -> dict[str, float]:
    """``["conv1=0.3", ...]`` -> ``{"conv1": 0.3}`` (the CLI's ``--rates``)."""
    rates: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            rates[name] = float(value[:-1]) / 100 if value.endswith("%") else float(value)
        except ValueError:
            raise SettingsError(f"--rates expects NAME=RATE, e.g. conv1=0.3 (got {spec!r})") from None
    return rates


def association_trees(
    model: onnx.ModelProto, library: str | Path | None = None, base_dir: Path | None = None
) -> tuple[onnx.ModelProto, GraphIndex, Forest]:
    """The working form of ``model`` (in normal form, ORT's fused ops split: see ``unfuse``),
    its lookups, and its channel groups."""
    work, _ = normal_form(split_fused(model)[0])
    index = GraphIndex(work, base_dir)
    return work, index, build_groups(work, load_library(library), index)


def _plan(forest: Forest, options: PruneOptions, quantized: str = "") -> dict[int, tuple[float, str]]:
    """Per group: the rate to prune it at and its status (pruned, excluded, unprunable: why); ``quantized``
    ends the refusal of a model none of whose groups can be pruned (``quantized_note``)."""
    names = {name for g in forest.groups for r in g.roots for name in (r.node, r.weight)}
    for flag, given in (("--exclude", options.exclude), ("--rates", list(options.rates))):
        unknown = [name for name in given if name not in names]
        if unknown:
            raise SettingsError(
                f"{flag} {unknown[0]!r} names no root node (Conv, ConvTranspose, Gemm, MatMul, LSTM, GRU, RNN) of "
                "the model"
            )
    plan: dict[int, tuple[float, str]] = {}
    for group in forest.groups:
        named = {name for r in group.roots for name in (r.node, r.weight)}
        if not group.prunable:
            plan[group.index] = (0.0, "unprunable: " + "; ".join(group.reasons or ["a single channel"]))
        elif named & set(options.exclude):
            plan[group.index] = (0.0, "excluded")
        else:
            overrides = [rate for name, rate in options.rates.items() if name in named]
            plan[group.index] = (min(overrides) if overrides else options.rate, "pruned")
    prunable = [g for g in forest.groups if g.prunable]
    if not prunable:  # each group's first reason, in graph order: what first stopped its walk
        firsts = list(dict.fromkeys(g.reasons[0] if g.reasons else "a single channel" for g in forest.groups))
        more = f"; and {len(firsts) - 3} more" if len(firsts) > 3 else ""
        detail = f" ({'; '.join(firsts[:3])}{more})" if firsts else ""
        raise SettingsError(
            f"the model has no channel group that can be pruned{detail}" + (quantized or "; see --show-trees")
        )
    if all(plan[g.index][1] == "excluded" for g in prunable):
        raise SettingsError("--exclude leaves no channel group to prune")
    return plan


def calibration_batches(
    model: onnx.ModelProto, options: PruneOptions, dataset: Dataset | None = None
) -> tuple[list[dict[str, np.ndarray]], str]:
    """The calibration feeds and what they are: ``dataset``, ``options.data``, or seeded random inputs."""
    if dataset is None and options.data is not None:
        dataset = evaluation_data(
            model, options.data, options.inputs, limit=options.limit, mean=options.mean, std=options.std
        )
    if dataset is None:
        initializers = {t.name for t in model.graph.initializer}
        fed = [v.name for v in model.graph.input if v.name not in initializers]
        if fed and all(name in options.inputs.given for name in fed):  # nothing random to vary: one batch
            return [random_inputs(model, options.inputs, 0)], f"the values {options.inputs.source or '--inputs'} gives"
        feeds = [random_inputs(model, options.inputs, seed) for seed in range(RANDOM_CALIBRATION_SAMPLES)]
        return feeds, f"random ({RANDOM_CALIBRATION_SAMPLES} seeded normal inputs)"
    given = options.inputs.given
    name = data_input(model, given).name
    size = batch_size_for(model, options.batch_size, given)
    fixed = size != options.batch_size
    dataset = fitted_to_model(model, dataset, given)
    batches = [
        {**given, **companions, name: inputs}
        for inputs, companions, _ in dataset.feed_batches(size)
        if not fixed or len(inputs) == size
    ]
    if not batches:
        raise SettingsError(f"{dataset.name}: fewer samples than the model's fixed batch size {size}")
    return batches, f"{dataset.name} ({sum(len(b[name]) for b in batches)} samples)"


def choose_channels(
    index: GraphIndex,
    forest: Forest,
    plan: dict[int, tuple[float, str]],
    options: PruneOptions,
    batches: list[dict[str, np.ndarray]] | None = None,
) -> dict[int, np.ndarray]:
    """Per pruned group, the channels kept (scored by ``options.criterion`` and mode)."""
    pruned = [g for g in forest.groups if plan[g.index][1] == "pruned"]
    ranks = None
    if get_criterion(options.criterion).ranks_roots:
        assert batches is not None
        first_outputs = {node_label(node): node.output[0] for node in index.model.graph.node if node.output}
        outputs = {root: tensor for g in pruned for root, tensor in ranked_maps(g, first_outputs).items()}
        ranks = feature_ranks(index.model, outputs, batches, index.base_dir)
    kept = {}
    for group in pruned:
        scores = group_scores(group, index.value, options.criterion, options.single_node, ranks)
        kept[group.index] = select_kept(scores, plan[group.index][0], kept_multiple(group, options.channel_multiple))
    return kept


def kept_multiple(group: ChannelGroup, multiple: int = CHANNEL_MULTIPLE) -> int:
    """What ``group``'s kept count is rounded to: ``multiple`` for channels; heads and blocks are counted,
    not blocked, so 1."""
    return multiple if group.unit == 1 else 1


def prune_model(
    model: onnx.ModelProto,
    options: PruneOptions,
    source: str = "<memory>",
    base_dir: Path | None = None,
    dataset: Dataset | None = None,
) -> tuple[onnx.ModelProto, PruneReport]:
    """Prune ``model`` (left unchanged) as ``options`` say; ``dataset`` overrides ``options.data``.

    Numpy's BLAS runs on one thread here: least squares summed over two threads rounds differently, and
    a compress recipe (built in a one-thread worker) must replay bit for bit under ``onnxsat run``."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _prune_model(model, options, source, base_dir, dataset)


def _prune_model(
    model: onnx.ModelProto, options: PruneOptions, source: str, base_dir: Path | None, dataset: Dataset | None
) -> tuple[onnx.ModelProto, PruneReport]:
    start = time.perf_counter()
    options.check()
    _check_roots_outside_bodies(model)  # before any run: a 194 MB tree ensemble spent 17 s and 3.7 GB first
    rows = with_data_rows(options.inputs, options.data, model)  # inputs --data feeds per sample
    options = replace(options, inputs=rows)
    given_size = given_bytes(model, source)
    calibrates = get_criterion(options.criterion).ranks_roots or options.reconstruct
    scored_on = None
    if dataset is None and options.data is not None:  # compress gives its own data and scores itself
        dataset, scored_on = _scoring_split(model, options, calibrates)  # data that does not fit is said first
        options = replace(options, inputs=sized_by_data(model, options.inputs, dataset))  # random inputs as it
    original = reference_run(model, options.inputs, base_dir=base_dir)  # then an input ORT cannot run
    report = PruneReport(input=source, output=None, criterion=options.criterion, mode=options.mode, rate=options.rate)
    start_from = _normalized(model, options, base_dir, report) if options.normalize else model
    work, index, forest = association_trees(start_from, options.library, base_dir)
    plan = _plan(forest, options, quantized_note(model, "prune"))
    fused, left = fused_count(model), fused_count(work)
    if fused:
        report.notes.append(f"{fused - left} of {fused} ORT fused ops split into op + activation to be pruned")
    batches = None
    if calibrates:
        batches, report.data = calibration_batches(work, options, dataset)
        if report.data.startswith("random"):
            report.notes.append(f"calibrated on {report.data}: give --data for real activations")
    kept = choose_channels(index, forest, plan, options, batches)
    applied = apply_pruning(work, forest, kept, base_dir)
    pruned = applied.model
    if options.reconstruct:
        assert batches is not None
        pruned, report.reconstruction, notes = reconstruct(work, applied, forest, batches, base_dir=base_dir)
        report.notes.extend(notes)
    drop_orphans(pruned.graph, applied.orphans)
    report.groups = [_group_report(g, plan, kept) for g in forest.groups]
    report.params = {"original": parameter_count(model), "pruned": parameter_count(pruned)}
    if report.params["pruned"] > report.params["original"]:  # small shared constants (biases) copied
        report.notes.append(
            f"the pruned model has {report.params['pruned'] - report.params['original']:,} parameters more than "
            "the original: constants it sliced are shared with nodes it left whole, and were copied"
        )
    original_macs, why_original = counted_macs(model, options.inputs.dims(), base_dir, options.inputs.given)
    pruned_macs, why_pruned = counted_macs(pruned, options.inputs.dims(), base_dir, options.inputs.given)
    report.macs = {"original": original_macs, "pruned": pruned_macs}
    report.macs_unknown = why_original or why_pruned
    report.sizes = {"original": given_size, "pruned": stored_bytes(pruned)}
    if scored_on is not None:  # the verification's "changed by" figures then come from real samples too
        samples = _score(model, pruned, scored_on, options, report, base_dir)
        original = reference_run(model, samples, base_dir=base_dir)
        report.notes.append(f"verification compared the outputs on {samples.source}, not on random inputs")
    names = [output.name for output in model.graph.output]
    _, report.verification = check_lossy(original, pruned, names, "pruning", base_dir)
    report.seconds = time.perf_counter() - start
    return pruned, report


def _scoring_split(model: onnx.ModelProto, options: PruneOptions, calibrates: bool) -> tuple[Dataset, Dataset | None]:
    """(data to calibrate on, data to score on) from ``--data``, fitted to ``model``'s data input: a held-out
    part when calibration uses the data (none when ``--holdout`` leaves none), else all of it."""
    dataset = evaluation_data(
        model,
        options.data,
        options.inputs,
        limit=options.limit,
        mean=options.mean,
        std=options.std,
        fidelity=options.fidelity,
    )
    assert dataset is not None
    if not calibrates:
        return dataset, dataset
    calibration, held_out = dataset.split(options.holdout)
    return (replace(calibration, name=f"{dataset.name} (calibration part)") if held_out else calibration), held_out


def _score(
    model: onnx.ModelProto,
    pruned: onnx.ModelProto,
    data: Dataset,
    options: PruneOptions,
    report: PruneReport,
    base_dir: Path | None,
) -> InputSpec:
    """The original's and the pruned model's scores on ``data`` (labels when it has them), into the report;
    returns its first samples as inputs to verify with."""
    given = options.inputs.given
    name = data_input(model, given).name
    scorer = ModelScorer(
        model,
        name,
        data,
        metric=options.metric,
        outputs=options.metric_output,
        given=given,
        batch_size=batch_size_for(model, options.batch_size, given),
        base_dir=base_dir,
    )
    report.scored_on, report.baseline = data.name, scorer.baseline
    report.metrics = scorer.budget.describe()
    report.accuracy = scorer.score(pruned)
    advice = "a lower --rate" + ("" if options.reconstruct else ", --reconstruct to refit what is kept")
    report.collapsed = collapse_warning(report.accuracy, advice + ", or `onnxsat compress` to search within a budget")
    report.notes += [f"warning: {report.collapsed}"] if report.collapsed else []
    report.notes += scorer.blind_spots()
    feeds = scorer.sample_feeds(VERIFY_SAMPLES)
    return InputSpec(options.inputs.shapes, feeds, f"the first {len(feeds[name])} samples of {data.name}")


def _normalized(
    model: onnx.ModelProto, options: PruneOptions, base_dir: Path | None, report: PruneReport
) -> onnx.ModelProto:
    """The portable form to prune (as the report says), or ``model`` when that fails, does not verify, or
    loses a node ``--rates``/``--exclude`` name."""
    form = portable_form(model, options.inputs, base_dir)
    if form.not_used:
        report.notes.append(f"pruned as given: {form.not_used}")
        return model
    if not form.folded:
        return model
    names = {name for node in form.model.graph.node for name in (node.name, *node.output)}
    names |= {t.name for t in form.model.graph.initializer}
    lost = [name for name in (*options.exclude, *options.rates) if name not in names]
    if lost:
        report.notes.append(f"pruned as given: folding constants first would lose {lost[0]!r}, named by the options")
        return model
    report.notes.append(f"normalised first: {form.folded} nodes folded away (ONNXSat optimize --target portable)")
    return form.model


def _group_report(group: ChannelGroup, plan: dict[int, tuple[float, str]], kept: dict[int, np.ndarray]) -> GroupReport:
    rate, status = plan[group.index]
    count = len(kept[group.index]) if group.index in kept else group.channels
    if status == "pruned" and count == group.channels:  # a rate of 0 (--rate 0 beside --rates), or too low
        status = "kept whole: its rate removes no channel"
    roots = [r.node for r in group.roots]
    return GroupReport(group.index, roots, group.structure, group.channels, count, rate, status, group.kind)


ROOT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN"})


def _check_roots_outside_bodies(model: onnx.ModelProto) -> None:
    """Refuse at once a model whose Convs and MatMuls all sit inside If/Loop/Scan bodies, which channel
    groups do not enter: a merged KV-cache decoder (every MatMul in its two branches) spent two minutes in
    its normal form before the same answer."""
    if any(node.op_type in ROOT_OPS for node in model.graph.node):
        return
    inside = sum(node.op_type in ROOT_OPS for body in all_graphs(model.graph) for node in body.node)
    where = f": {inside} are inside If/Loop/Scan bodies, which prune does not enter" if inside else ""
    raise SettingsError(
        f"the model has no channel group that can be pruned (no Conv, Gemm or MatMul{where})"
        + quantized_note(model, "prune")  # its weighted ops are integer ones (MatMulInteger, DynamicQuantizeLSTM)
    )


def show_trees(
    input_path: str | Path,
    library: str | Path | None = None,
    image: str | Path | None = None,
    normalize: bool = True,
) -> str:
    """The node association trees of the model at ``input_path`` as text (and drawn to ``image``): those of
    the model prune starts from (``normalize``: its portable form, when that verifies)."""
    (model, _), base_dir = model_io.load_runnable(input_path), model_io.model_folder(input_path)
    densify_sparse_initializers(model, base_dir)  # as prune reads them
    if normalize:
        model = portable_form(model, base_dir=base_dir).model
    _, _, forest = association_trees(model, library, base_dir)
    if image is not None:
        render_trees(forest.groups, image)
    if not forest.groups:
        return (
            "no channel group: no Conv, ConvTranspose, Gemm, MatMul, LSTM, GRU or RNN with a constant weight and "
            "a known rank"
        )
    return format_trees(forest.groups)
