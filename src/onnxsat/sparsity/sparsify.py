"""``onnxsat sparsify`` end to end: targets, scores, masks (or a budget search), storage, verification.

The pruned model changes outputs by design, so verification here means: it passes the checker and
runs in ONNX Runtime; with sparse initializers, it gives exactly the dense pruned model's outputs; with
a budget, its measured drop is inside the budget (the search guarantees it and the report shows it).
A budget search stops at ``--budget-minutes`` (counted from the start, as quantize and compress count
it) with the sparsest level inside the budget found by then.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from onnxsat.data.model_input import (
    data_input,
    fitted_to_model,
    in_input_type,
    input_dims,
    random_dataset,
    sized_by_data,
    with_data_rows,
)
from onnxsat.data.outputs import check_state, first_feeds, parse_stateful
from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.eqsat.facts import NONDETERMINISTIC_OPS
from onnxsat.eqsat.portable import portable_form
from onnxsat.errors import NothingPaysError, SettingsError
from onnxsat.external_data import given_bytes, stored_bytes, tensor_value
from onnxsat.inputs import InputSpec, random_inputs
from onnxsat.memory import batch_slices
from onnxsat.metrics import (
    HeldOut,
    Metric,
    MetricSpec,
    check_confidence,
    check_spec,
    collapse_warning,
    confidence_option,
    metric_option,
    with_fidelity,
)
from onnxsat.options import float_list, option, percent
from onnxsat.proto_fields import all_nodes, bodies_of
from onnxsat.quantized_already import quantized_note, quantized_parts
from onnxsat.sparsity.bodies import lift_body_weights
from onnxsat.sparsity.calibration import channel_norms
from onnxsat.sparsity.methods import METHODS, MaskResult, check_sparsity, get_method, sparsity_masks
from onnxsat.sparsity.report import SparsifyReport
from onnxsat.sparsity.search import (
    Evaluator,
    MaskMaker,
    Tried,
    mask_maker,
    search_per_layer,
    search_uniform,
)
from onnxsat.sparsity.storage import to_sparse_initializers, with_masks
from onnxsat.sparsity.targets import SparsityTarget, select, sparsity_targets
from onnxsat.time_budget import BUDGET_MINUTES, Deadline, check_budget_minutes, out_of_time
from onnxsat.verification import Tolerance, check_lossy, reference_run, verify

RANDOM_CALIBRATION_SAMPLES = 32
RANDOM_STREAMS = 4
RANDOM_STREAM_STEPS = 32


@dataclass
class SparsifyOptions:
    """The sparsify pass's settings: ``onnxsat sparsify``'s flags, the ``sparsify`` pipeline keys, keywords."""

    method: str = option("relative", choices=lambda: METHODS, help="how weights are scored (default relative)")
    sparsity: float | None = option(
        0.5, cli_default=None, type=percent, help="fraction of prunable weights to zero, e.g. 0.5 or 50%%"
    )
    """The level to reach; None with ``max_drop`` (the search chooses it)."""
    max_drop: float | None = option(None, type=percent, help="search the highest sparsity whose drop stays within this")
    """Largest allowed drop of ``metric`` as a fraction (0.01 = one point), or None for no search."""
    metric: MetricSpec = metric_option()
    """A built-in metric, ``auto``, ``module:function``, or (Python API) a function
    ``(reference, candidate, labels) -> score in [0, 1]``."""
    metric_output: list[str] = option(
        default_factory=list, metavar="NAME", help="outputs the budget applies to (default all but fed-back state)"
    )
    confidence: float = confidence_option()
    stateful: list[str] = option(
        default_factory=list,
        metavar="IN=OUT",
        help="state input fed from this output, step after step; --data then holds streams [S, T, ...]",
    )
    holdout: float = option(
        0.2, type=percent, help="share of --data the search never sees, scored at the end (default 20%%; 0: none)"
    )
    data: str | None = option(
        None, help="digits, an image folder, a CIFAR-10 batches folder, an .npz (inputs, labels), or random"
    )
    """A dataset spec for ``load_dataset``, or ``random`` (seeded normal inputs: fidelity only)."""
    fidelity: bool = option(False, help="ignore labels: agreement with the dense model")
    """Ignore the data's labels: measure agreement with the dense model (data from another task)."""
    limit: int | None = option(None, type=int, help="use at most this many samples of the data")
    mean: Sequence[float] | None = option(
        None, type=float_list, help="per-channel mean subtracted from images scaled to [0, 1]"
    )
    std: Sequence[float] | None = option(None, type=float_list, help="per-channel std images are divided by")
    per_layer: bool = option(
        True, flag="--uniform-only", negate=True, help="budget search: one level for every layer only"
    )
    """With a budget and a per-layer method: also try sensitivity-guided per-layer levels."""
    step: float = option(0.05, type=percent, help="budget search: level step (default 0.05)")
    budget_minutes: float = option(
        BUDGET_MINUTES,
        type=float,
        help="budget search: stop after this long and keep the sparsest level found inside --max-drop "
        f"(default {BUDGET_MINUTES:g})",
    )
    """A search evaluates the whole data per level, and per layer per level for its sensitivity scan: 245
    evaluations, 519 s, on a face-embedding net. The same limit, and default, as quantize's and compress's."""
    exclude: list[str] = option(default_factory=list, metavar="NAME", help="weights or nodes to leave dense")
    sparse_initializers: bool = option(False, help="store sparse weights in COO form")
    min_sparsity: float = option(0.5, type=percent, help="COO only at or above this (default 0.5)")
    batch_size: int = 64
    inputs: InputSpec = field(default_factory=InputSpec)

    def check(self) -> None:
        get_method(self.method)
        if self.sparsity is not None:
            check_sparsity(self.sparsity)
        check_sparsity(self.min_sparsity, "--min-sparsity")
        if self.max_drop is not None:
            if not 0.0 <= self.max_drop < 1.0:
                raise SettingsError(f"--max-drop must be in [0%, 100%), got {self.max_drop:.2%}")
            if self.data is None:
                raise SettingsError("--max-drop needs --data to measure the drop on")
        elif self.sparsity is None:
            raise SettingsError("give --sparsity, or --max-drop with --data to search for it")
        if not 0.0 < self.step < 1.0:
            raise SettingsError(f"--step must be in (0, 1), got {self.step:g}")
        if self.limit is not None and self.limit < 1:
            raise SettingsError(f"--limit must be at least 1, got {self.limit}")
        if not 0.0 <= self.holdout < 1.0:
            raise SettingsError(f"--holdout must be in [0%, 100%), got {self.holdout:.2%}")
        check_budget_minutes(self.budget_minutes)
        self.metric, self.fidelity = with_fidelity(self.metric, self.fidelity)
        check_spec(self.metric)
        check_confidence(self.confidence)
        parse_stateful(self.stateful)

    @property
    def state(self) -> dict[str, str]:
        return parse_stateful(self.stateful)


def _calibration_batches(
    model: onnx.ModelProto, dataset: Dataset | None, options: SparsifyOptions
) -> Iterator[dict[str, np.ndarray]]:
    """The data's batches, or seeded random inputs when no data was given (said in the report)."""
    if dataset is not None:
        given = options.inputs.given
        fixed = {**given, **_zero_state(model, options.state)}
        name = data_input(model, fixed).name
        if dataset.streams:
            for inputs, companions, _ in dataset.feed_batches(1):
                yield {**fixed, **companions, name: inputs}
            return
        own_batch = (input_dims(model, fixed) or [None])[0]  # else memory sizes them: the norms keep a batch whole
        for start, stop in batch_slices(len(dataset.inputs), options.batch_size, own_batch):
            yield {**fixed, **dataset.rows(start, stop), name: dataset.inputs[start:stop]}
        return
    for seed in range(RANDOM_CALIBRATION_SAMPLES):
        yield random_inputs(model, options.inputs, seed)


def _dataset(model: onnx.ModelProto, options: SparsifyOptions) -> Dataset | None:
    """The evaluation data: loaded, or ``random`` made from seeded normal inputs; labels dropped for
    ``fidelity``."""
    if options.data is None:
        return None
    excluded = set(options.inputs.given) | set(options.state)
    if options.data == "random":
        if options.state:  # seeded random streams: 4 of 32 steps each (or --limit streams)
            streams = options.limit or RANDOM_STREAMS
            spec = options.inputs
            fed = InputSpec(spec.shapes, {**spec.given, **_zero_state(model, options.state)}, spec.source)
            steps = random_dataset(model, streams * RANDOM_STREAM_STEPS, fed).inputs
            steps = steps.reshape(streams, RANDOM_STREAM_STEPS, *steps.shape[1:])
            return Dataset(
                steps, None, f"random ({streams} streams of {RANDOM_STREAM_STEPS} seeded normal steps)", True
            )
        return random_dataset(model, options.limit or RANDOM_CALIBRATION_SAMPLES, options.inputs)
    dims = input_dims(model, excluded, options.inputs.shapes)
    dataset = load_dataset(
        options.data,
        dims,
        limit=options.limit,
        mean=options.mean,
        std=options.std,
        streams=bool(options.state),
        labels=not options.fidelity,
        carried=options.inputs.from_data,
    )
    if options.fidelity:
        dataset = replace(dataset, labels=None, name=f"{dataset.name} (fidelity)")
    if dataset.streams:
        return in_input_type(data_input(model, excluded), dataset)
    return fitted_to_model(model, dataset, options.inputs.given)


def _zero_state(model: onnx.ModelProto, state: dict[str, str]) -> dict[str, np.ndarray]:
    """Zeros for each state input (dynamic dims 1): calibration runs steps from a fresh state."""
    feeds = {}
    for value in model.graph.input:
        if value.name in state:
            dims = [d.dim_value if d.dim_value > 0 else 1 for d in value.type.tensor_type.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
            feeds[value.name] = np.zeros(dims, dtype=dtype)
    return feeds


def _computed_weights(model: onnx.ModelProto) -> int:
    """How many Conv/ConvTranspose/Gemm/MatMul weights the graph computes from constants alone (Keras' jax
    backend stores each kernel HWIO and transposes it for the Conv; weight normalization exported unfolded
    computes ``g * v / ||v||``): no initializer to prune, until folded."""
    graph = model.graph
    static = {t.name for t in graph.initializer} - {v.name for v in graph.input}
    computed: set[str] = set()
    for node in graph.node:  # in topological order (the runner's normal form sorts them)
        if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC_OPS or any(bodies_of(node)):
            continue
        if node.op_type == "Constant":
            static.update(node.output)
        elif node.input and all(i in static for i in node.input if i):
            static.update(node.output)
            computed.update(node.output)
    weighted = ("Conv", "ConvTranspose", "Gemm", "MatMul")
    return sum(n.op_type in weighted and len(n.input) > 1 and n.input[1] in computed for n in graph.node)


def _weights_folded(
    model: onnx.ModelProto, options: SparsifyOptions, base_dir: Path | None
) -> tuple[onnx.ModelProto, list[str]]:
    """The model to prune, and a note: its portable form (constants folded) when weights are computed from
    constants and that form verifies; else the model as given."""
    computed = _computed_weights(model)
    if not computed:
        return model, []
    form = portable_form(model, options.inputs, base_dir)
    if form.not_used is not None:
        return model, [f"{computed} weights computed from constants are left as they are: {form.not_used}"]
    names = {t.name for t in form.model.graph.initializer} | {n.name for n in form.model.graph.node}
    lost = [name for name in options.exclude if name not in names]
    if lost:  # the user named what they see in their model
        return model, [
            f"{computed} weights computed from constants are left as they are: folding would lose {lost[0]!r}"
        ]
    folded = computed - _computed_weights(form.model)
    if folded <= 0:  # a quantized weight's DequantizeLinear, a Cast from a narrow type: none of them folds
        return model, [f"{computed} weights computed from constants are left as they are: none of them folds"]
    return form.model, [
        f"normalised first: weights computed from constants ({folded} of {computed}; e.g. a Transpose of the stored "
        "kernel as Keras' jax backend writes them, weight normalization left unfolded) folded so they can be pruned "
        "(ONNXSat optimize --target portable)"
    ]


def sparsify_model(
    model: onnx.ModelProto,
    options: SparsifyOptions,
    source: str = "<memory>",
    base_dir: Path | None = None,
    unpruned_if_nothing_fits: bool = False,
) -> tuple[onnx.ModelProto, SparsifyReport]:
    """Prune ``model`` (left unchanged) as ``options`` say; return the result and its report. A budget no level
    fits raises ``NothingPaysError``, unless ``unpruned_if_nothing_fits`` (a benchmark measuring every model it
    is given): then the model comes back unpruned."""
    start = time.perf_counter()
    options.check()
    deadline = Deadline(options.budget_minutes)  # the work before the search counts too
    rows = with_data_rows(options.inputs, options.data, model)  # inputs --data feeds per sample
    options = replace(options, inputs=rows)
    given_size = given_bytes(model, source)
    graph = model.graph
    check_state(options.state, [v.name for v in graph.input], [v.name for v in graph.output])
    dataset = _dataset(model, options)  # data that does not fit is said first, and sizes random inputs like it
    options = replace(options, inputs=sized_by_data(model, options.inputs, dataset, options.state))
    model, normalised = _weights_folded(model, options, base_dir)
    model, lifted = lift_body_weights(model)
    original = reference_run(model, options.inputs, base_dir=base_dir)  # an input ORT cannot run is said first
    targets = select(sparsity_targets(model), options.exclude)
    if not targets:
        hidden = _weighted_nodes_in_bodies(model.graph)
        where = (
            f"; its {hidden} Conv/Gemm/MatMul nodes inside If/Loop/Scan bodies read no constant weight"
            if hidden
            else ""
        )
        raise SettingsError(
            f"the model has no prunable weights (Conv, ConvTranspose, Gemm or MatMul initializers){where}"
            + quantized_note(model, "sparsify")
        )
    weights = {t.name: np.asarray(_initializer_value(model, t, base_dir)) for t in targets}
    report = SparsifyReport(input=source, output=None, method=options.method, requested=options.sparsity)
    report.notes += normalised
    if quantized := quantized_parts(model):  # a face detector's 9 float head weights of 162 values, 64 in int8
        report.notes.append(
            f"it is quantized already in part ({quantized}): those weights are left as they are, and the sparsity "
            f"is over the {len(targets)} float weight{'s' if len(targets) != 1 else ''} only"
        )
    if lifted:
        report.notes.append(
            f"{len(lifted)} weights inside If/Loop/Scan bodies moved to the main graph (read from there by name, "
            "values unchanged) so they can be pruned"
        )
    norms = None
    if get_method(options.method).needs_activations:
        norms = _norms(model, targets, _calibration_batches(model, dataset, options), report)
        if dataset is None:
            report.notes.append(
                f"calibrated on {RANDOM_CALIBRATION_SAMPLES} seeded random inputs: give --data for real activations"
            )
    masks_at = mask_maker(options.method, targets, weights, norms)
    held_out = None
    if dataset is not None:
        if options.max_drop is not None:  # the search never sees the held-out part
            dataset, held_out = dataset.split(options.holdout)
        evaluator = _evaluator(model, targets, weights, dataset, options, options.metric, base_dir)
        report.data, report.baseline = dataset.name, evaluator.baseline
        unreached = _unreached(evaluator, targets)
        if unreached:  # their pruning could not be measured: a branch the data never takes
            targets = [t for t in targets if t.name not in unreached]
            if not targets:
                raise SettingsError(
                    "no prunable weight is reached by the data: every one sits in a branch it never takes"
                )
            masks_at = mask_maker(options.method, targets, weights, norms)
            named = ", ".join(sorted(unreached)[:3]) + (" ..." if len(unreached) > 3 else "")
            report.notes.append(
                f"{len(unreached)} weights inside If/Loop/Scan bodies left dense: the data never reaches them "
                f"(a branch it does not take), so their pruning could not be measured: {named}"
            )
        report.metric, report.metrics = evaluator.baseline.metric, evaluator.budget.describe()
        report.notes += evaluator.budget.blind_spots()
    if options.max_drop is not None:
        report.confidence = options.confidence
        result = _search(evaluator, masks_at, targets, options, report, deadline, not unpruned_if_nothing_fits)
        if held_out is not None:
            held = _evaluator(model, targets, weights, held_out, options, evaluator.budget.metrics, base_dir)
            _, score = held.drop(result.masks)
            report.held_out = HeldOut.of(held_out.name, held.baseline, score, options.max_drop, options.confidence)
        else:
            report.notes.append("no held-out score: the data has fewer than two samples (streams) or --holdout is 0")
    else:
        assert options.sparsity is not None
        result = sparsity_masks(options.method, targets, weights, options.sparsity, norms)
        if dataset is not None:
            report.accuracy = evaluator.drop(result.masks)[1]
            report.collapsed = collapse_warning(report.accuracy, "give --max-drop to search for the level it allows")
            report.notes += [f"warning: {report.collapsed}"] if report.collapsed else []
        elif any(t.in_body for t in targets):
            report.notes.append(
                "weights inside If/Loop/Scan bodies were pruned with no --data to show which branches run: "
                "give --data to leave the ones it never reaches dense"
            )
    report.layers, report.overall = result.layers, result.sparsity
    report.span_fraction, report.notes = result.span_fraction, report.notes + result.notes
    sparse = with_masks(model, result.masks, base_dir)
    names = [output.name for output in model.graph.output]
    checked_on = _data_samples(evaluator, options) if dataset is not None else None
    if checked_on is not None:  # the "changed by" figures from real samples, as the report says the input is
        original = reference_run(model, checked_on, base_dir=base_dir)
        report.notes.append(f"verification compared the outputs on {checked_on.source}, not on random inputs")
    reference, report.verification = check_lossy(original, sparse, names, "sparsity", base_dir)
    report.sizes = {"original": given_size, "pruned": stored_bytes(sparse)}
    if options.sparse_initializers and reference is not None:
        dense = sparse
        sparse = onnx.ModelProto()
        sparse.CopyFrom(dense)
        storage = to_sparse_initializers(sparse, [t.name for t in targets], options.min_sparsity)
        report.sparse_storage = {"moved": storage.moved, "kept_dense": storage.kept_dense}
        report.sizes["sparse initializers"] = stored_bytes(sparse)
        tolerance = Tolerance(rtol=0.0, atol=0.0, ort_rounding=0.0)
        inputs = checked_on or options.inputs
        report.verification = verify(dense, sparse, inputs, tolerance, reference=reference, base_dir=base_dir)
    report.seconds = time.perf_counter() - start
    return sparse, report


VERIFY_SAMPLES = 16
"""Samples of the data the verification's "changed by" figures are measured on."""


def _data_samples(evaluator: Evaluator, options: SparsifyOptions) -> InputSpec | None:
    """The first samples of ``--data`` as one run's feeds (None for streams): random inputs can hide a change
    (pixels of noise saturate a StandardScaler+LogisticRegression, and it read "no element differs" where
    labels changed on 3% of the data)."""
    runner = evaluator.runner
    if runner.dataset.streams:
        return None
    given, fixed = runner.given, runner.fixed_batch
    count = min(VERIFY_SAMPLES, runner.batch_size)  # one run: no more than memory allows in a batch
    feeds = first_feeds(runner.dataset, runner.input_name, given, fixed, runner.dtype, count)
    samples = len(feeds[runner.input_name])
    return InputSpec(options.inputs.shapes, feeds, f"the first {samples} samples of {runner.dataset.name}")


def _unreached(evaluator: Evaluator, targets: list[SparsityTarget]) -> set[str]:
    """Body weights whose removal leaves every scored output exactly as it was on the data."""
    unreached = set()
    for target in targets:
        if target.in_body and evaluator.distortion({target.name: np.ones(target.shape, dtype=bool)}) == 0.0:
            unreached.add(target.name)
    return unreached


def _norms(
    model: onnx.ModelProto,
    targets: list[SparsityTarget],
    batches: Iterator[dict[str, np.ndarray]],
    report: SparsifyReport,
) -> dict[str, np.ndarray]:
    """Channel norms for the calibrated method; a weight inside a body (whose activation cannot be made a
    graph output) gets norms of one: it is scored by |w| alone, as the report says."""
    tapped = [t for t in targets if not t.in_body]
    norms = channel_norms(model, tapped, batches) if tapped else {}
    inside = [t for t in targets if t.in_body]
    for target in inside:
        norms[target.name] = np.ones(int(target.channel_of_elements().max()) + 1)
    if inside:
        report.notes.append(f"calibrated: {len(inside)} weights inside If/Loop/Scan bodies scored by |w| alone")
    return norms


def _weighted_nodes_in_bodies(graph: onnx.GraphProto) -> int:
    """How many Conv/ConvTranspose/Gemm/MatMul nodes the control-flow bodies of ``graph`` hold (nested too)."""
    ops = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
    return sum(n.op_type in ops for node in graph.node for body in bodies_of(node) for n in all_nodes(body))


def _evaluator(
    model: onnx.ModelProto,
    targets: list[SparsityTarget],
    weights: dict[str, np.ndarray],
    dataset: Dataset,
    options: SparsifyOptions,
    metric: MetricSpec | Mapping[str, Metric],
    base_dir: Path | None,
) -> Evaluator:
    given = options.inputs.given
    state, outputs, confidence = options.state, options.metric_output, options.confidence
    return Evaluator(
        model, targets, weights, dataset, metric, options.batch_size, given, outputs, state, confidence, base_dir
    )


def _initializer_value(model: onnx.ModelProto, target: SparsityTarget, base_dir: Path | None) -> np.ndarray:
    tensor = next(t for t in model.graph.initializer if t.name == target.name)
    return tensor_value(tensor, base_dir)


def _search(
    evaluator: Evaluator,
    masks_at: MaskMaker,
    targets: list[SparsityTarget],
    options: SparsifyOptions,
    report: SparsifyReport,
    deadline: Deadline,
    refuse_nothing: bool = True,
) -> MaskResult:
    """The budget search: uniform, then per-layer if asked and the method allows it and there is time; the
    sparser wins. Cut short by ``deadline``, the sparsest inside the budget found by then, which the notes say."""
    assert options.max_drop is not None
    report.max_drop = options.max_drop
    best = search_uniform(evaluator, masks_at, options.max_drop, options.step, deadline=deadline)
    report.search["uniform"] = {"level": best.levels, "sparsity": best.chosen.sparsity, "drop": best.drop}
    trail = best.trail
    per_layer_asked = options.per_layer and get_method(options.method).per_layer and len(targets) > 1
    if per_layer_asked and not deadline.passed():
        per_layer, curves = search_per_layer(
            evaluator, masks_at, targets, options.max_drop, options.step, outside=best.outside, deadline=deadline
        )
        report.search["sensitivity"] = curves
        if per_layer is not None:
            report.search["per_layer"] = {
                "levels": per_layer.levels,
                "sparsity": per_layer.chosen.sparsity,
                "drop": per_layer.drop,
            }
            trail = trail + per_layer.trail
            if per_layer.chosen.sparsity > best.chosen.sparsity:
                best = per_layer
    report.search["chosen"] = "per-layer" if isinstance(best.levels, dict) else "uniform"
    report.search["evaluations"] = evaluator.evaluations
    report.search["trail"] = trail
    report.accuracy = best.accuracy
    if not any(tried.fits for tried in trail):
        if refuse_nothing:
            raise NothingPaysError(_nothing_fits(trail, options, deadline, "nothing written"))
        report.notes.append(_nothing_fits(trail, options, deadline, "the model is left unpruned"))
    elif deadline.reached:
        report.notes.append(
            f"{out_of_time(options.budget_minutes)}, with the sparsest level inside the budget found by then"
        )
    return best.chosen


def _nothing_fits(trail: list[Tried], options: SparsifyOptions, deadline: Deadline, outcome: str) -> str:
    """Why no model is written: a copy of the input at 0% sparsity is no answer a script should take for one,
    as ``quantize`` and ``compress`` write nothing when nothing fits; the closest level tried is named."""
    assert options.max_drop is not None
    if not trail:  # the scan tries a level first unless the time is out (--step is below 100%)
        return f"{out_of_time(options.budget_minutes)} before any level was scored; {outcome}"
    closest = min(trail, key=lambda tried: tried.drop)
    ran_out = f" found before --budget-minutes ({options.budget_minutes:g} min) ran out" if deadline.reached else ""
    return (
        f"no sparsity level inside --max-drop {options.max_drop:.2%}{ran_out}: the closest, {closest.what} "
        f"({closest.sparsity:.1%} sparsity), dropped {closest.drop:.2%}; {outcome} (a larger --max-drop or "
        "lower --confidence lets one in)"
    )
