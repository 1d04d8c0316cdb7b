"""``onnxsat quantize`` end to end: normalise, calibrate, measure each node, search inside the budget.

1. **Normalise** with ONNXSat's own lossless passes (BatchNormalization folded, standard ops only, the
   normal form of weights and dims) and name every node, so the quantizer sees a clean graph.
2. **Measure speed per node**: each quantizable node alone, fp32 against int8, in ONNX Runtime on this
   machine; a node that is slower quantized stays in float.
3. **Quantize** with ONNX Runtime's quantizer (``modes``), calibrated once on the search part of the data.
4. **Budget**: the drop of the scored outputs (the metric registry, as sparsify) on the search part. If
   it is too large, each node's damage is measured alone (the outputs' relative change with only it
   quantized, a one-node quantization spliced in: ``alone``) and the fewest most damaging nodes are left
   in float, found by bisection. Both stop at ``--budget-minutes`` with the best model found (the damages
   get half the time left, so the bisection always runs).
5. **auto** tries the modes the model's ops call for and keeps the fastest result inside the budget,
   timed side by side with the fp32 model under ORT with every optimization on; a result slower than
   the fp32 model is not written. Every mode is first quantized whole and timed; the budget search of
   step 4 runs only for a mode whose whole form is faster than the best one already inside the budget.
6. **Verify**: the checker, a load and a run in ORT; a model ORT refuses is never written. The held-out
   part of the data gives the honest drop.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat import model_io
from onnxsat.data.model_input import (
    batch_size_for,
    data_input,
    defaulted_sizes,
    evaluation_data,
    fitted_to_model,
    random_dataset,
    sized_by_data,
    with_data_rows,
)
from onnxsat.data.sources import Dataset
from onnxsat.eqsat.portable import portable_form
from onnxsat.errors import InvalidModelError, NothingPaysError, RuntimeUnsupportedError, SettingsError
from onnxsat.external_data import given_bytes, inference_view, stored_bytes, structure_view, with_data_loaded
from onnxsat.inputs import InputSpec, fixed_dim, random_inputs
from onnxsat.latency import against_file_as_given, side_by_side
from onnxsat.metrics import (
    HeldOut,
    MetricSpec,
    Score,
    check_confidence,
    check_spec,
    confidence_option,
    metric_option,
    with_fidelity,
)
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.normal_form import normal_form
from onnxsat.op_kinds import FLOAT_TYPES, default_opset_version
from onnxsat.options import float_list, option, percent
from onnxsat.proto_fields import all_graphs, all_nodes, bodies_of
from onnxsat.quantization import node_speed
from onnxsat.quantization.biases import flatten_gemm_biases, own_biases
from onnxsat.quantization.budget_search import within_budget
from onnxsat.quantization.calibration import calibration_reader
from onnxsat.quantization.candidate import PAYS_SPEEDUP, Candidate, timing_ties
from onnxsat.quantization.damage import nan_as_worst
from onnxsat.quantization.modes import (
    CALIBRATIONS,
    MODES,
    Calibration,
    QuantMode,
    embedding_tables,
    looks_up,
)
from onnxsat.quantization.narrow_storage import STORED_AS_COMPUTED, NarrowWeights, narrow_chains
from onnxsat.quantization.opsets import PER_CHANNEL_OPSET, at_least_opset
from onnxsat.quantization.report import ModeTrial, NodeDecision, QuantizeReport
from onnxsat.quantization.tensor_types import type_from_runtime
from onnxsat.quantized_already import NARROW_TYPES, integer_nodes, quantized_note
from onnxsat.runtime.int8_sums import int8_pairs_saturate
from onnxsat.runtime.isolated import crash_in_child, has_control_flow
from onnxsat.surgery.surgeons.precision import Float16ToFloat32
from onnxsat.time_budget import (
    BUDGET_MINUTES,
    OUT_OF_TIME,
    Deadline,
    check_budget_minutes,
    late,
    out_of_time,
    seconds_per_run,
)
from onnxsat.verification import check_lossy, reference_run, run_model, session

AUTO_MODE = "auto"
SLOWER = 1.0
"""A node whose int8 form is not faster than this ratio stays in float."""
MARGINAL = 1.25
"""A node faster quantized alone by less than this ratio is checked in the whole model too: what a node costs
its neighbours (a convolution whose activation ORT no longer fuses, quantize and dequantize passes over its
output) is not in its own timing."""
NOT_SLOWER = 0.97
"""``auto`` writes nothing whose whole-model speedup is below this (ratio noise on this machine)."""
PAYS_SIZE = 0.9
"""Below ``PAYS_SPEEDUP`` (within timing noise), ``auto`` writes a quantized model only when its file is at most
this share of the given one: a model no faster, no smaller and a little less accurate pays nothing. Of the
forms tied with the fastest (``timing_ties``), ``auto`` takes the smallest file."""
LARGE_WEIGHT = 2**20
"""Elements from which a weight (a MatMul's, or an embedding table) makes ``auto`` try weight-only mode: 4 bits
pay in size on large tables (a Chinese tagger whose embedding is 94% of its file), not on small layers."""
RANDOM_SAMPLES = 32
SEVEN_BIT_WEIGHTS = (
    "weights quantized to 7 bits: this CPU's int8 kernels add uint8 x int8 products in pairs of 16 bits, which clip "
    "at full-range weights (x86 without VNNI); with 7 bits the model computes what its QDQ graph says, and it did "
    "less damage here than with 8"
)
LATENCY_ROUNDS, LATENCY_WARMUP = 20, 3


@dataclass
class QuantizeOptions:
    """The quantize pass's settings: ``onnxsat quantize``'s flags, the ``quantize`` pipeline keys, keywords."""

    mode: str = option(
        AUTO_MODE,
        choices=lambda: [AUTO_MODE, *MODES],
        help="auto (default: the fastest of the modes the model's ops call for), static, dynamic, weight-only",
    )
    max_drop: float | None = option(
        0.01, type=percent, help="largest allowed drop of the metric (default 1%%), measured on the data"
    )
    """Quantization can ruin a model silently (a text recognizer reading nothing, a detector finding
    nothing, both measured here), so there is always a budget; without --data it is measured on the values
    --inputs gives, else on seeded random inputs, and the report says so."""
    metric: MetricSpec = metric_option()
    metric_output: list[str] = option(default_factory=list, metavar="NAME", help="outputs the budget applies to")
    confidence: float = confidence_option()
    data: str | None = option(
        None, help="calibration and budget data: digits, an image folder, CIFAR-10, an .npz (inputs, labels), random"
    )
    fidelity: bool = option(False, help="ignore labels: agreement with the float model")
    limit: int | None = option(None, type=int, help="use at most this many samples of the data")
    mean: Sequence[float] | None = option(None, type=float_list, help="per-channel mean for images scaled to [0, 1]")
    std: Sequence[float] | None = option(None, type=float_list, help="per-channel std images are divided by")
    holdout: float = option(0.2, type=percent, help="share of --data the search never sees (default 20%%)")
    calibration: str = option("minmax", choices=CALIBRATIONS, help="calibration of activation ranges (static)")
    weight_bits: int | None = option(
        None,
        type=int,
        choices=[8, 7],
        help="bits of int8 weights (static, dynamic); default: 8, or 7 where this CPU's int8 kernels clip "
        "full-range products and 7 does less damage, measured",
    )
    """A model quantized on a CPU without VNNI for one with it (or the other way) can name the bits."""
    exclude: list[str] = option(default_factory=list, metavar="NODE", help="nodes to leave in float")
    threads: int = option(1, type=int, help="intra-op threads latency is measured with (default 1)")
    latency_batch: int = option(
        1, type=int, help="samples per run latency is measured at, whole model and node by node (default 1)"
    )
    """INT8 pays more on larger batches (a ResNet-18 on 32x32 digits: 3.0-3.2x at 1, 3.4-3.55x at 8), so which
    nodes pay, and how much, is measured at the batch the model will run at."""
    node_timing: bool = option(True, flag="--no-node-timing", negate=True, help="skip timing each node alone")
    budget_minutes: float = option(
        BUDGET_MINUTES,
        type=float,
        help=f"stop the budget search after this long and keep the best model found (default {BUDGET_MINUTES:g})",
    )
    """Leaving nodes in float for the budget measures each suspect node with a model build and a scoring run:
    on GPT-2 small, 20 s a node."""
    batch_size: int = 64
    inputs: InputSpec = field(default_factory=InputSpec)
    restated_inputs: tuple[str, ...] = ()
    """Weights the file as given also lists as graph inputs (the runner's normal form made them constants):
    the result is timed against that form too."""

    def check(self) -> None:
        if self.mode != AUTO_MODE:
            MODES.lookup(self.mode)
        if self.max_drop is not None and not 0.0 <= self.max_drop <= 1.0:
            raise SettingsError(f"--max-drop must be in [0%, 100%], got {self.max_drop:.2%}")
        if not 0.0 <= self.holdout < 1.0:
            raise SettingsError(f"--holdout must be in [0%, 100%), got {self.holdout:.2%}")
        if self.limit is not None and self.limit < 1:
            raise SettingsError(f"--limit must be at least 1, got {self.limit}")
        if self.threads < 1:
            raise SettingsError(f"--threads must be at least 1, got {self.threads}")
        if self.weight_bits not in (None, 8, 7):
            raise SettingsError(f"--weight-bits must be 8 or 7, got {self.weight_bits}")
        if self.latency_batch < 1:
            raise SettingsError(f"--latency-batch must be at least 1, got {self.latency_batch}")
        check_budget_minutes(self.budget_minutes)
        self.metric, self.fidelity = with_fidelity(self.metric, self.fidelity)
        check_spec(self.metric)
        check_confidence(self.confidence)


def quantize_model(
    model: onnx.ModelProto,
    options: QuantizeOptions,
    source: str = "<memory>",
    base_dir: Path | None = None,
    *,
    scorer: ModelScorer | None = None,
    timed: bool = True,
) -> tuple[onnx.ModelProto, QuantizeReport]:
    """Quantize ``model`` (left unchanged) as ``options`` say; return the result and its report.

    ``scorer``: ``model``'s scorer on the data ``options`` name, when the caller already holds one (compress's
    workers keep one for every candidate they quantize): the model's reference run over the data, a pass as long
    as scoring a candidate, is then not made again. ``timed=False`` where the caller times the result itself:
    compress's workers share cores with each other, so their figures are noise, and its driver times every
    candidate (on a YOLOv8-seg model, timing the result took 27 of a candidate's 160 s). Forms are still timed
    where timing chooses between them."""
    start = time.perf_counter()
    options.check()
    _check_weighted_ops(model)
    rows = with_data_rows(options.inputs, options.data, model)  # inputs --data feeds per sample
    options = replace(options, inputs=rows)
    given_size = given_bytes(model, source)
    deadline = Deadline(options.budget_minutes)
    report = QuantizeReport(input=source, output=None, mode=options.mode, max_drop=options.max_drop)
    report.confidence = options.confidence
    given, model_input, dataset = _budget_data(model, options, report)  # data that does not fit is said first
    if options.data is not None:  # random inputs sized like the user's data
        options = replace(options, inputs=sized_by_data(model, options.inputs, dataset))
    original_run = reference_run(model, options.inputs, base_dir=base_dir)  # then an input ORT cannot run
    model = with_data_loaded(model, base_dir)  # scored and timed from bytes, where a data file's path is lost
    prepared, narrow = _prepare(model, options, base_dir, report)
    defaults = _fed_defaults(prepared, options.inputs.given, report)
    unknown = [name for name in options.exclude if name not in {n.name for n in all_nodes(prepared.graph)}]
    if unknown:
        raise SettingsError(f"--exclude {unknown[0]!r} names no node of the model")
    modes = _modes(prepared, options)
    search, held_out = dataset.split(options.holdout) if options.data is not None else (dataset, None)
    batch = batch_size_for(prepared, options.batch_size, given)
    if scorer is None:
        scorer = ModelScorer(
            model,
            model_input.name,
            search,
            metric=options.metric,
            outputs=options.metric_output,
            given=given,
            batch_size=batch,
            threads=options.threads,
            confidence=options.confidence,
        )
    report.data, report.baseline = search.name, scorer.baseline
    report.metric, report.metrics = scorer.baseline.metric, scorer.budget.describe()
    report.notes += scorer.blind_spots(options.max_drop)
    feeds = _latency_feeds(prepared, search, model_input.name, given, options.latency_batch)
    timing_shapes = {**options.inputs.dims(), **{name: list(a.shape) for name, a in feeds.items()}}
    latency_batch = len(feeds[model_input.name])
    with tempfile.TemporaryDirectory(prefix="onnxsat-calibration-") as folder:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(model_input.type.tensor_type.elem_type)
        fixed = scorer.fixed_batch  # the model's own batch, or 1 where a given input fixes it (two cannot run)
        calibration = Calibration(
            lambda: calibration_reader(
                model_input.name, search, given, dtype, batch, fixed, equal_batches=options.calibration != "minmax"
            ),
            options.calibration,
            Path(folder) / "ranges.json",
        )
        candidates = _search_modes(
            modes,
            prepared,
            options,
            scorer,
            calibration,
            report,
            original_run.feeds,
            lambda quantized: {
                **_latency(model, quantized, feeds, options.threads, seconds_per_run(options.budget_minutes)),
                "batch": float(latency_batch),
            },
            timing_shapes,
            deadline,
            narrow,
            timed,
        )
    if deadline.passed():
        report.notes.append(f"{out_of_time(options.budget_minutes)}, with the best model found by then")
    try:
        chosen = _choose(candidates, options, report, given_size)
        if integer_nodes(chosen.model) <= integer_nodes(prepared):
            trial = next((t for t in report.trials if t.mode == chosen.mode), None)
            why = f"; {trial.note}" if trial is not None and trial.note else ""
            raise SettingsError(
                f"nothing was quantized: ONNX Runtime's quantizer left every node in float ({chosen.mode}{why})"
                + quantized_note(prepared, "quantize")
            )
    except SettingsError as error:  # the modes tried and what they measured are printed, and written with --report
        report.seconds = time.perf_counter() - start
        error.report = report
        raise
    report.chosen = chosen.mode
    report.nodes = _decisions(prepared, chosen, MODES[chosen.mode])
    if MODES[chosen.mode].int8_kernels:
        report.weight_bits = 7 if chosen.seven_bit else 8
    if chosen.seven_bit and options.weight_bits is None:
        report.notes.append(SEVEN_BIT_WEIGHTS)
    report.accuracy = chosen.score
    if held_out is not None:
        held = ModelScorer(
            model,
            model_input.name,
            held_out,
            metric=scorer.budget.metrics,
            outputs=options.metric_output,
            given=given,
            batch_size=batch,
            threads=options.threads,
        )
        score = held.score(chosen.model)
        report.held_out = HeldOut.of(held_out.name, held.baseline, score, options.max_drop, options.confidence)
    if defaults:  # the interface as given: the inputs the user fed keep their default values
        chosen.model = _with_initializers(chosen.model, defaults)
    report.latency = dict(chosen.latency)
    if options.restated_inputs and chosen.latency:
        figures, line = against_file_as_given(model, options.restated_inputs, chosen.model, feeds, options.threads)
        report.latency.update(figures)
        report.notes.append(line)
    names = [output.name for output in model.graph.output]
    _, report.verification = check_lossy(original_run, chosen.model, names, "quantization", base_dir)
    report.sizes = {"original": given_size, "quantized": stored_bytes(chosen.model)}
    report.seconds = time.perf_counter() - start
    return chosen.model, report


def _budget_data(
    model: onnx.ModelProto, options: QuantizeOptions, report: QuantizeReport
) -> tuple[dict[str, np.ndarray], onnx.ValueInfoProto, Dataset]:
    """(the inputs fed as given, the input data is fed to, the data): ``--data``; else the values
    ``--inputs`` gives the data input; else seeded random inputs. The report says which."""
    given = dict(options.inputs.given)
    fed = _fed_data(model, options) if options.data is None else None
    if fed is not None:
        name, samples = fed
        del given[name]
        report.notes.append(f"calibrated and scored on the {len(samples)} samples --inputs gives {name}")
        dataset = Dataset(samples, None, f"{name} from {options.inputs.source or '--inputs'}")
        return given, data_input(model, given), fitted_to_model(model, dataset, given)
    spec = options.inputs
    if options.data is None:
        given, spec = _hold_the_others(model, spec, report)
    model_input = data_input(model, given)
    dataset = evaluation_data(
        model,
        options.data,
        spec,
        limit=options.limit,
        mean=options.mean,
        std=options.std,
        fidelity=options.fidelity,
    )
    if dataset is None:
        dataset = random_dataset(model, RANDOM_SAMPLES, spec)
        note = f"calibrated and scored on {len(dataset)} seeded random inputs: give --data for real ones"
        sizes = defaulted_sizes(model, spec, dataset)
        report.notes.append(f"{note}; {sizes}" if sizes else note)
    return given, model_input, dataset


def _hold_the_others(
    model: onnx.ModelProto, spec: InputSpec, report: QuantizeReport
) -> tuple[dict[str, np.ndarray], InputSpec]:
    """(given, spec) for random data on a model with several inputs the user did not give (a BERT's
    input_ids and attention_mask): samples go to the first float input (else the first), and every other
    one is held at one seeded random value, as the report says (with a dynamic batch, that value is fed
    beside every sample: the dataset's companions)."""
    initializers = {t.name for t in model.graph.initializer}
    free = [v for v in model.graph.input if v.name not in initializers and v.name not in spec.given]
    if len(free) < 2:
        return dict(spec.given), spec
    fed = next((v for v in free if v.type.tensor_type.elem_type in FLOAT_TYPES), free[0])
    held = [v.name for v in free if v.name != fed.name]
    values = random_inputs(model, spec, seed=0)
    given = {**spec.given, **{name: values[name] for name in held}}
    report.notes.append(
        f"no --data: {', '.join(held)} held at one seeded random value, {fed.name} varies "
        "(give --data, and --inputs for the others, to calibrate on real values)"
    )
    return given, InputSpec(spec.shapes, given, spec.source)


def _fed_data(model: onnx.ModelProto, options: QuantizeOptions) -> tuple[str, np.ndarray] | None:
    """(input, samples) when every input is given by ``--inputs`` and one is a numeric tensor with a batch
    axis: the user's own values, better than random ones for calibration."""
    given = options.inputs.given
    initializers = {t.name for t in model.graph.initializer}
    free = [v for v in model.graph.input if v.name not in initializers]
    if not free or any(v.name not in given for v in free):
        return None
    for value in free:
        array = given[value.name]
        numeric = np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
        if numeric and array.ndim >= 2 and len(array) >= 1:
            return value.name, array
    return None


def _prepare(
    model: onnx.ModelProto, options: QuantizeOptions, base_dir: Path | None, report: QuantizeReport
) -> tuple[onnx.ModelProto, NarrowWeights]:
    """The model in the form the quantizer does best with: ONNXSat's portable optimization (BatchNorm
    folded into convolutions, standard ops) when it verifies, every node named, weights in memory; and
    how the model stored weights narrower than float32, which they are computed in here."""
    behind_casts = _cast_from_float16(model)  # optimization folds them into float32 weights of these names
    chains = narrow_chains(model)  # and these, stored in int8 behind a Cast and a scale
    form = portable_form(model, options.inputs, base_dir)
    prepared = form.model
    if form.not_used:
        report.notes.append(f"quantized as given: {form.not_used}")
    elif form.folded:
        report.notes.append(f"normalised first: {form.folded} nodes folded away (ONNXSat optimize --target portable)")
    named = prepared
    if prepared is model:  # as given: the caller's model is not to be changed (the optimized one is ours)
        named = onnx.ModelProto()
        named.CopyFrom(prepared)
    del form, prepared  # one copy of the weights at a time
    if base_dir is not None:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(named, str(base_dir))
    named, _ = normal_form(named, in_place=True)  # weights made as Constant nodes become initializers again
    named = _at_least_opset(named, PER_CHANNEL_OPSET, report)
    narrow = NarrowWeights(
        behind_casts | {t.name for t in named.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}, chains
    )
    if Float16ToFloat32().apply(structure_view(named)).changed:  # asked first of the weightless structure:
        named = Float16ToFloat32().apply(named).model  # a surgeon copies the model, weights and all
        report.notes.append(
            "the model computes in float16, which ONNX Runtime's quantizer cannot take: quantized from its float32 "
            "form (its inputs and outputs keep their types)"
        )
    flattened = flatten_gemm_biases(named.graph)
    if flattened:
        report.notes.append(f"{flattened} Gemm bias(es) of shape [1, N] read as [N] (the quantizer needs one axis)")
    copied = own_biases(named.graph)
    if copied:
        report.notes.append(
            f"{copied} bias(es) shared by several convolutions or Gemms copied, one per reader (ONNX Runtime's "
            "quantizer names its own copies after the bias, which can take another tensor's name)"
        )
    used = {node.name for node in named.graph.node if node.name}
    for index, node in enumerate(named.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)
    typed = type_from_runtime(named)
    if typed:
        report.notes.append(
            f"{typed} tensor(s) typed as ONNX Runtime types them (ONNX's shape inference does not know the ops "
            "making them), so the quantizer sees them"
        )
    return named, narrow


def _cast_from_float16(model: onnx.ModelProto) -> frozenset[str]:
    """Outputs of Casts to float32 of float16 weights (initializers or Constant nodes): a model exported with
    float16 storage computing in float32 (a distilled copy-detection net: 93 such Casts). Its nodes left in
    float store those weights in float16 again; as float32 its int8 form was 151% of the file."""
    half = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
    half |= {
        node.output[0]
        for node in model.graph.node
        if node.op_type == "Constant" and any(a.t.data_type == onnx.TensorProto.FLOAT16 for a in node.attribute)
    }
    return frozenset(
        node.output[0]
        for node in model.graph.node
        if node.op_type == "Cast"
        and node.input
        and node.input[0] in half
        and onnx.helper.get_node_attr_value(node, "to") == onnx.TensorProto.FLOAT
    )


def _fed_defaults(
    model: onnx.ModelProto, given: Mapping[str, np.ndarray], report: QuantizeReport
) -> list[onnx.TensorProto]:
    """In place: the initializers of graph inputs the user feeds (``--inputs``), taken out so the quantizer sees
    those inputs as the inputs they are, not as weights it may fold into int8 constants (its model would then
    refuse the fed value); returned, to be put back as the result's defaults."""
    names = {value.name for value in model.graph.input} & set(given)
    taken = [t for t in model.graph.initializer if t.name in names]
    if not taken:
        return []
    kept = [t for t in model.graph.initializer if t.name not in names]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    listed = ", ".join(t.name for t in taken)
    report.notes.append(f"{listed}: fed with --inputs, so quantized as input(s), not as weights (defaults kept)")
    return taken


def _with_initializers(model: onnx.ModelProto, tensors: Sequence[onnx.TensorProto]) -> onnx.ModelProto:
    result = onnx.ModelProto()
    result.CopyFrom(model)
    present = {t.name for t in result.graph.initializer}
    result.graph.initializer.extend(t for t in tensors if t.name not in present)
    return result


EVERY_NODE_IN_FLOAT = "every node stays in float (slower quantized, or excluded)"


def _at_least_opset(model: onnx.ModelProto, opset: int, report: QuantizeReport) -> onnx.ModelProto:
    """``model`` converted to ``opset`` when older (ONNX's version converter), as the report says."""
    current = default_opset_version(model, missing=opset)
    try:
        converted = at_least_opset(model, opset)
    except Exception as error:  # the converter raises several types on ops it cannot lift
        raise SettingsError(
            f"the model uses opset {current} and ONNX's converter cannot bring it to opset {opset}, which "
            f"per-channel quantization needs: {' '.join(str(error).split())[:160]}"
        ) from None
    if converted is not model:
        report.notes.append(f"converted from opset {current} to {opset} first (per-channel weights need it)")
    return converted


def _check_weighted_ops(model: onnx.ModelProto) -> None:
    """Refuse at once a model with no op a mode quantizes, anywhere (a 194 MB tree ensemble spent 76 s and 5.8 GB
    on its data and reference run first); whether their weights are constant is known after ``_prepare``."""
    if not any(node.op_type in _WEIGHTED_OPS or node.op_type == "Gather" for node in all_nodes(model.graph)):
        raise _nothing_to_quantize(model)


def _nothing_to_quantize(model: onnx.ModelProto) -> SettingsError:
    return SettingsError(
        "nothing to quantize: the model has no Conv, MatMul, Gemm or LSTM node with a constant weight"
        + quantized_note(model, "quantize")
    )


def _modes(model: onnx.ModelProto, options: QuantizeOptions) -> list[QuantMode]:
    """The modes to try: the one asked for, or for ``auto`` those the model's weighted ops call for."""
    weighted = {node.op_type for node in _weighted_nodes(model)}
    inside = _weighted_in_bodies(model)
    if options.mode != AUTO_MODE:
        mode = MODES[options.mode]
        if not weighted & mode.ops and not any(mode.in_bodies(node) for node in inside):
            raise SettingsError(
                f"nothing to quantize: the model has no {'/'.join(sorted(mode.ops))} node with a constant weight"
                + _inside_bodies(model)
                + quantized_note(model, "quantize")
            )
        return [mode]
    inside_ops = {node.op_type for node in inside}
    if not weighted | inside_ops:
        raise _nothing_to_quantize(model)
    modes = []
    if weighted & {"Conv", "ConvTranspose"} or weighted & {"MatMul", "Gemm"}:
        modes.append(MODES["static"])
    if (weighted | inside_ops) & {"MatMul", "Gemm", "LSTM"}:
        modes.append(MODES["dynamic"])
    bodies = any(MODES["weight-only"].in_bodies(node) for node in inside)
    if ({"MatMul", "Gemm", "Gather"} & weighted or bodies) and _largest_weight(model) >= LARGE_WEIGHT:
        modes.append(MODES["weight-only"])
    if not modes:  # an int4 decoder: its MatMuls are MatMulNBits already, its embedding table still float
        readers = "/".join(sorted(weighted | inside_ops))
        raise SettingsError(
            f"nothing for auto to quantize: the only float weights are read by {readers}; --mode weight-only "
            "stores embedding tables (Gather) in 4 bits" + quantized_note(model, "quantize")
        )
    return modes


def _inside_bodies(model: onnx.ModelProto) -> str:
    """What a refusal of a mode that leaves bodies alone (static: ORT's calibration never sees a body's
    tensors) adds when the weighted ops sit inside If/Loop/Scan bodies."""
    found = len(_weighted_in_bodies(model))
    holders = [node.op_type for node in model.graph.node if next(bodies_of(node), None) is not None]
    if not found:
        return ""
    hint = ""
    if "If" in holders:
        hint = "; when an input decides the branch, `onnxsat optimize --specialize --inputs` settles it first"
    kinds = "/".join(sorted(set(holders)))
    bodied = "/".join(name for name, mode in MODES.items() if mode.bodies)
    return f" outside control flow ({found} are inside {kinds} bodies, which only {bodied} mode quantizes{hint})"


def _weighted_in_bodies(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Conv, MatMul, Gemm and LSTM nodes inside If/Loop/Scan bodies (at any depth) whose weight is a float
    initializer of their body or of a graph around it."""
    found: list[onnx.NodeProto] = []

    def visit(graph: onnx.GraphProto, floats: frozenset[str], inside: bool) -> None:
        floats = floats | {t.name for t in graph.initializer if t.data_type in _FLOAT_WEIGHTS}
        for node in graph.node:
            if inside and node.op_type in _WEIGHTED_OPS and len(node.input) > 1 and node.input[1] in floats:
                found.append(node)
            for body in bodies_of(node):
                visit(body, floats, True)

    visit(model.graph, frozenset(), False)
    return found


_WEIGHTED_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM"})
_FLOAT_WEIGHTS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)


def _weighted_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Conv, ConvTranspose, MatMul, Gemm and LSTM nodes whose weight (input 1) is a float initializer, and
    embedding lookups: Gathers of rows (axis 0) of a float 2-D table (input 0)."""
    floats = {t.name for t in model.graph.initializer if t.data_type in _FLOAT_WEIGHTS}
    tables = embedding_tables(model, _FLOAT_WEIGHTS)
    return [
        n
        for n in model.graph.node
        if (n.op_type in _WEIGHTED_OPS and n.domain in ("", "ai.onnx") and len(n.input) > 1 and n.input[1] in floats)
        or looks_up(n, tables)
    ]


def _largest_weight(model: onnx.ModelProto) -> int:
    """Elements of the largest float weight weight-only mode stores in 4 bits: a MatMul's or Gemm's (in the
    main graph or a body), or an embedding table a Gather looks up."""
    sizes = {t.name: int(np.prod(t.dims)) for graph in all_graphs(model.graph) for t in graph.initializer}
    nodes = [*_weighted_nodes(model), *_weighted_in_bodies(model)]
    weights = [n.input[1] for n in nodes if n.op_type in ("MatMul", "Gemm")]
    tables = [n.input[0] for n in nodes if n.op_type == "Gather"]
    return max((sizes.get(name, 0) for name in [*weights, *tables]), default=0)


@dataclass
class _Started:
    """A mode with every searchable node quantized (those timed slower, or excluded, left in float), scored
    and timed: what decides whether its budget search is worth running."""

    trial: ModeTrial
    candidate: Candidate
    nodes: list[str]
    """The nodes its budget search may leave in float."""
    build: Callable[..., onnx.ModelProto]
    total: int
    """Every node of the mode's ops, those left in float from the start included."""


def _search_modes(
    modes: Sequence[QuantMode],
    model: onnx.ModelProto,
    options: QuantizeOptions,
    scorer: ModelScorer,
    calibration: Calibration,
    report: QuantizeReport,
    check_feeds: Mapping[str, np.ndarray],
    time_model: Callable[[onnx.ModelProto], dict[str, float]],
    shapes: Mapping[str, Sequence[int]],
    deadline: Deadline | None = None,
    narrow: NarrowWeights = STORED_AS_COMPUTED,
    timed: bool = True,
) -> list[Candidate]:
    """Each mode's best model inside the budget (see the module docstring); a trial per mode says how it went.

    First every mode is quantized whole, scored and timed. Then the modes over the budget are searched,
    fastest first, but only while their whole form is faster than the best mode already inside the
    budget (and, for ``auto``, than the float model): leaving nodes in float for the budget does not make
    a mode faster. On BERT-base that skipped 40 builds of a 4-bit model measured at 0.93x; on ViT-base
    a static search that dynamic, inside the budget at once, made pointless. Searches stop at ``deadline``
    (``time.monotonic``) with what they found, and the trial says so. ``narrow``: weights the model stored
    narrower (float16, int8 and a scale), stored so again where they stay in float. ``timed=False``: whole
    forms are not timed (the caller times the result), so no mode is passed over for its speed."""
    started = []
    for mode in modes:
        trial = ModeTrial(mode.name)
        report.trials.append(trial)
        if report.trials[:-1] and late(deadline):  # the first mode is tried whatever the time: else nothing is
            trial.error = f"not tried: {OUT_OF_TIME}"
            continue
        clock, evaluations = time.perf_counter(), scorer.evaluations
        start = _start_mode(mode, model, options, scorer, calibration, trial, check_feeds, shapes, time_model, narrow)
        if start is not None:
            if timed:
                start.candidate.latency = start.candidate.latency or time_model(start.candidate.model)
            _record(trial, start.candidate, start.total)
            started.append(start)
        trial.evaluations = scorer.evaluations - evaluations
        trial.seconds = time.perf_counter() - clock
    budget = options.max_drop
    fits = [s for s in started if budget is None or s.candidate.score is None or s.candidate.score.fits(budget)]
    candidates = [s.candidate for s in fits]
    for start in sorted((s for s in started if s not in fits), key=lambda s: -(s.candidate.speedup or 0.0)):
        trial, full = start.trial, start.candidate
        best = max((c.speedup or 0.0 for c in candidates), default=None)
        bar = max(best or 0.0, NOT_SLOWER if options.mode == AUTO_MODE else 0.0)
        if timed and (full.speedup or 0.0) <= bar:
            leader = max(candidates, key=lambda c: c.speedup or 0.0) if best and best >= bar else None
            than = f"{leader.mode} ({best:.2f}x), which fits the budget" if leader else "float"
            trial.error = f"not searched: with every node quantized it runs {full.speedup:.2f}x, no faster than {than}"
            continue
        if late(deadline):
            trial.error = f"not searched: {OUT_OF_TIME}"
            continue
        clock, evaluations = time.perf_counter(), scorer.evaluations
        assert budget is not None
        searched = within_budget(model, full, start.nodes, budget, scorer, start.build, trial, deadline, time_model)
        if searched is not None:
            if timed:
                searched.latency = searched.latency or time_model(searched.model)
            _record(trial, searched, start.total)
            candidates.append(searched)
            left = len(searched.excluded) - len(full.excluded)
            if trial.note:  # it spoke of the mode before the search: say what the search made of it
                trial.note += f"; then the budget left {left} more in float: {searched.speedup or 0.0:.2f}x"
        trial.evaluations += scorer.evaluations - evaluations
        trial.seconds += time.perf_counter() - clock
    return candidates


def _record(trial: ModeTrial, candidate: Candidate, total: int) -> None:
    """A mode's form in its trial: nodes quantized and kept in float, drop and speedup."""
    trial.quantized, trial.kept = total - len(candidate.excluded), len(candidate.excluded)
    trial.drop = candidate.score.drop if candidate.score is not None else None
    trial.speedup = candidate.speedup


def _start_mode(
    mode: QuantMode,
    model: onnx.ModelProto,
    options: QuantizeOptions,
    scorer: ModelScorer,
    calibration: Calibration,
    trial: ModeTrial,
    check_feeds: Mapping[str, np.ndarray],
    shapes: Mapping[str, Sequence[int]],
    time_model: Callable[[onnx.ModelProto], dict[str, float]] | None = None,
    narrow: NarrowWeights = STORED_AS_COMPUTED,
) -> _Started | None:
    """``mode`` with every searchable node quantized but those measured slower alone (fed inputs of
    ``shapes``), scored; None when nothing is left to quantize or ORT's quantizer or runtime refuses it
    (``trial.error`` says why).

    Timings alone do not add up: a node left in float puts a dequantize and a quantize (and, for
    convolutions, layout transposes) around itself. So when nodes were left in float for their own
    speed, the mode with them quantized too is timed whole beside it (``time_model``), and the faster
    form is kept: on a Keras CNN, its 1-channel stem ran 0.31x quantized alone, yet the model ran
    2.02x with it quantized against 1.41x without. The other way too: nodes barely faster alone
    (``MARGINAL``) are timed whole left in float: a YOLO-style stem ran 1.14x quantized alone, yet the
    model ran about 3% faster with it in float (its SiLU fused into the float convolution, no int8
    round trip over a 320x320 map)."""
    nodes = [node.name for node in _mode_nodes(model, mode)]
    weighted = {n.name for n in _weighted_nodes(model)}
    mode = replace(mode, seven_bit=mode.int8_kernels and options.weight_bits == 7)
    inside = [n for n in _weighted_in_bodies(model) if mode.in_bodies(n)]
    unnamed = [n for n in inside if not n.name]  # no name to leave it in float by: quantized with the rest
    if inside:
        trial.note = f"{len(inside)} inside control-flow bodies" + (
            f", {len(unnamed)} of them unnamed, quantized with the rest" if unnamed else ""
        )
    asked = {name: "asked (--exclude)" for name in options.exclude if name in nodes}
    excluded = dict(asked)
    speeds: dict[str, float] = {}
    if options.node_timing and mode.name in ("static", "dynamic"):
        timed = [n for n in nodes if n not in excluded and n in weighted]
        speeds = _node_speeds(model, timed, mode.name, shapes, options.threads)
    times = NodeTimes.of(speeds)
    excluded |= {name: f"slower quantized ({speeds[name]:.2f}x alone)" for name in times.slow}
    searchable = [n for n in nodes if n not in excluded]
    slow_alone = len(excluded) > len(asked) and time_model is not None
    if not searchable and not slow_alone and not unnamed:
        trial.error = EVERY_NODE_IN_FLOAT
        return None

    def build(left_out: Sequence[str], alone: str | None = None) -> onnx.ModelProto:
        """``mode`` with ``left_out`` (and the excluded) in float, or with node ``alone`` alone quantized."""
        calib = calibration if mode.calibrated else None
        try:
            if alone is not None:
                result = mode.alone(model, alone, calib)
            else:
                result = mode.apply(model, [*excluded, *left_out], calib)
        except Exception as error:  # ORT's quantizer raises many types on graphs it does not handle
            raise RuntimeUnsupportedError(
                f"ONNX Runtime's quantizer failed ({mode.name}): {type(error).__name__}: {error}"
            ) from None
        narrow.restore(result)  # what stays in float is no larger than the model had it
        _check_loads(result, mode.name, check_feeds)
        return result

    quantized = model
    try:
        if searchable or unnamed:
            quantized = build([])
    except RuntimeUnsupportedError as error:
        trial.error = str(error)
        return None
    latency: dict[str, float] = {}
    if slow_alone:
        assert time_model is not None
        latency = time_model(quantized)  # nothing left to quantize: the prepared float model, timed too
        slow = excluded
        excluded = dict(asked)  # ``build`` reads it: the mode with the slow nodes quantized too
        whole, whole_latency = _timed_whole(build, [], time_model)
        count = len(slow) - len(asked)
        nodes_text = f"{count} node{'s' if count != 1 else ''}"
        measured = _ran(whole_latency, latency)
        if whole is not None and whole_latency["speedup"] > latency["speedup"]:
            quantized, latency = whole, whole_latency
            searchable = [n for n in nodes if n not in excluded]
            trial.add_note(f"{nodes_text} slower alone quantized anyway: {measured}")
        else:
            excluded = slow
            trial.add_note(f"{nodes_text} slower alone kept in float: {measured}")
    marginal = [n for n in searchable if n in times.barely]
    if marginal and len(marginal) < len(searchable) and time_model is not None:
        latency = latency or time_model(quantized)
        without, without_latency = _timed_whole(build, marginal, time_model)
        count = f"{len(marginal)} node{'s' if len(marginal) != 1 else ''} barely faster alone (< {MARGINAL:.2f}x)"
        measured = _ran(latency, without_latency)
        if without is not None and without_latency["speedup"] > latency["speedup"]:
            quantized, latency = without, without_latency
            excluded = {
                **excluded,
                **{n: f"faster in float in the whole model ({speeds[n]:.2f}x alone)" for n in marginal},
            }
            searchable = [n for n in searchable if n not in excluded]
            trial.add_note(f"{count} kept in float: {measured}")
        else:
            trial.add_note(f"{count} quantized: {measured}")
    if not searchable and not unnamed:
        trial.error = EVERY_NODE_IN_FLOAT
        return None
    try:
        # the bits are weighed on the form the timings settled: the nodes they put back in float or quantized
        # anyway change which bits do less damage (NudeNet's YOLOv8, two of its convolutions slower alone:
        # without them 27% with 7 bits and 8; quantized anyway, 27% with 7 and 100% with 8)
        if mode.int8_kernels and options.weight_bits is None and int8_pairs_saturate():
            mode = replace(mode, seven_bit=True)  # ``build`` reads it: the 7-bit form is built next
            quantized, score, seven_bit = _fewer_bits_if_better(build, scorer, quantized, trial)
            mode = replace(mode, seven_bit=seven_bit)
        else:
            score = scorer.score(quantized)
    except RuntimeUnsupportedError as error:
        trial.error = str(error)
        return None
    candidate = Candidate(
        mode.name, quantized, dict(excluded), score, speeds=speeds, latency=latency, seven_bit=mode.seven_bit
    )
    return _Started(trial, candidate, searchable, build, len(nodes) + len(unnamed))


def _fewer_bits_if_better(
    build: Callable[..., onnx.ModelProto], scorer: ModelScorer, eight_bit: onnx.ModelProto, trial: ModeTrial
) -> tuple[onnx.ModelProto, Score, bool]:
    """Of the mode's form with 8-bit weights (``eight_bit``) and with 7 (``build`` makes it), the one that does
    less damage (drop, then distortion), its score, and whether it is the 7-bit one; 8 bits when ORT's
    quantizer or runtime refuses 7. Asked only where this CPU's int8 kernels clip full-range products: there
    8-bit weights are rounded finer but their products clipped, 7-bit ones computed as the graph says, and
    which costs less depends on the model (measured on a CPU without VNNI, every node quantized: PP-OCRv4's
    recognizer misread 2 of 8 lines with 7 bits against 3 with 8; a small random MLP changed 1 label of 32 with
    7 bits, none with 8)."""
    eight = scorer.judge(eight_bit)
    try:
        seven_bit = build([])
    except RuntimeUnsupportedError:
        return eight_bit, eight[0], False
    seven = scorer.judge(seven_bit)
    better = _damage_key(seven) < _damage_key(eight)
    said = f"drop {seven[0].drop:.2%} (distortion {seven[1]:.3g}) against {eight[0].drop:.2%} ({eight[1]:.3g}) with 8"
    trial.add_note(f"{'7-bit weights kept' if better else '8-bit weights kept'}: with 7 bits {said}")
    return (seven_bit, seven[0], True) if better else (eight_bit, eight[0], False)


def _damage_key(judged: tuple[Score, float]) -> tuple[float, float]:
    score, distortion = judged
    return nan_as_worst(score.drop), nan_as_worst(distortion)


def _timed_whole(
    build: Callable[..., onnx.ModelProto],
    left_out: Sequence[str],
    time_model: Callable[[onnx.ModelProto], dict[str, float]],
) -> tuple[onnx.ModelProto | None, dict[str, float]]:
    """The mode built with ``left_out`` in float and timed whole; (None, {}) when ORT refuses it."""
    try:
        model = build(left_out)
    except RuntimeUnsupportedError:
        return None, {}
    return model, time_model(model)


def _ran(with_them: dict[str, float], without: dict[str, float]) -> str:
    """What the model ran with some nodes quantized and without (an empty timing: ORT refused that form)."""

    def said(latency: dict[str, float]) -> str:
        return f"{latency['speedup']:.2f}x" if latency else "refused by ORT"

    return f"the model ran {said(with_them)} with them, {said(without)} without"


def _node_speeds(
    model: onnx.ModelProto, nodes: Sequence[str], mode: str, shapes: Mapping[str, Sequence[int]], threads: int
) -> dict[str, float]:
    """fp32 time / int8 time of each node alone (the node-speed module, cached per machine). For static
    mode, the int8 node between quantized neighbours (its own input quantization and output dequantization
    cut off, as ORT fuses them away inside a quantized chain); for dynamic mode, the node as it runs."""
    try:
        speeds = node_speed.node_speeds(model, nodes, mode=mode, threads=threads, shapes=shapes)
    except Exception:  # timing is advice: a model it cannot cut into nodes is quantized without it
        return {}
    return {
        name: speed.core_ratio if mode == "static" and speed.core_ratio is not None else speed.ratio
        for name, speed in speeds.items()
    }


def _check_loads(model: onnx.ModelProto, mode: str, feeds: Mapping[str, np.ndarray]) -> None:
    """A quantized model ORT refuses is a failed candidate, never a result: one that does not load (a
    per-channel axis below opset 13), or that runs at the batch it was calibrated with but not at the
    verification's with ORT's optimizations off (a per-axis scale sized by the calibration batch, which ORT's
    constant folding hides: seen on Magika)."""
    try:
        model_io.check_model(model)  # the structure, with stand-ins for large weights: no copy of a BERT
    except InvalidModelError as error:
        raise RuntimeUnsupportedError(f"the {mode} model fails the checker: {str(error)[:200]}") from None
    run_model(model, feeds, f"{mode} model")  # as verification will: ORT's optimizations off, its inputs
    if any(t.data_type in NARROW_TYPES for t in model.graph.initializer):
        try:  # as scoring and timing will: all optimizations on, which fuse QDQ pairs into integer ops
            session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, lean=True)
        except Exception as error:  # ORT's types: a float8 weight fused into a QLinearConv it then refuses
            text = " ".join(str(error).split())[:200]
            raise RuntimeUnsupportedError(
                f"the {mode} model does not load with ORT's optimizations on: {text}"
            ) from None
    crash = crash_in_child(model, feeds) if has_control_flow(model) else None  # scoring loads it in-process
    if crash:
        raise RuntimeUnsupportedError(f"the {mode} model: {crash}")


def _latency_feeds(
    model: onnx.ModelProto, dataset: Dataset, name: str, given: Mapping[str, np.ndarray], batch: int = 1
) -> dict[str, np.ndarray]:
    """One batch of ``batch`` samples (or the model's fixed batch) from the data, the given inputs beside it."""
    dims = model.graph.input
    value = next(v for v in dims if v.name == name)
    declared = value.type.tensor_type.shape.dim
    batch = (fixed_dim(declared[0]) or batch) if declared else 1
    sample, companions = dataset.first(batch)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    return {**given, **companions, name: sample.astype(dtype)}


def _latency(
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    threads: int,
    seconds: float | None = None,
) -> dict[str, float]:
    fp32_ms, quantized_ms, speedup = side_by_side(
        original, candidate, feeds, threads, LATENCY_ROUNDS, LATENCY_WARMUP, seconds
    )
    return {"fp32_ms": fp32_ms, "quantized_ms": quantized_ms, "speedup": speedup, "threads": float(threads)}


def _choose(
    candidates: list[Candidate], options: QuantizeOptions, report: QuantizeReport, given_size: int
) -> Candidate:
    """The fastest candidate; ``auto`` refuses one slower than the float model, or one that pays neither in
    speed nor in size (one line, nothing written); an asked-for mode is written with a note instead."""
    if not candidates:
        reasons = "; ".join(f"{t.mode}: {t.error}" for t in report.trials if t.error)
        raise NothingPaysError(f"no quantized model fits: {reasons}")  # whichever mode was asked for
    best = _fastest_then_smallest(candidates, report)
    message = ""
    if best.speedup is not None and best.speedup < NOT_SLOWER:
        message = f"every quantized form is slower than the float model here (best: {best.mode} {best.speedup:.2f}x)"
    elif best.speedup is not None and best.speedup < PAYS_SPEEDUP:
        size = stored_bytes(best.model)
        if size > PAYS_SIZE * given_size:
            message = (
                f"no quantized form pays here: the fastest, {best.mode} at {best.speedup:.2f}x, is no faster beyond "
                f"timing noise and its file is {size / given_size:.0%} of the given one ({size:,} bytes against "
                f"{given_size:,}; at most {PAYS_SIZE:.0%} pays)"
            )
    if message and options.mode == AUTO_MODE:
        raise NothingPaysError(f"{message}; nothing written")
    if message:
        report.notes.append(message)
    return best


def _fastest_then_smallest(candidates: list[Candidate], report: QuantizeReport) -> Candidate:
    """The fastest candidate, or of those tied with it within timing noise (and not slower than the float
    model), the one with the smallest file; a note says when size decided."""
    fastest = max(candidates, key=lambda c: c.speedup or 0.0)
    if fastest.speedup is None:
        return fastest
    tied = timing_ties(candidates, floor=NOT_SLOWER)
    if len(tied) < 2:
        return fastest
    sizes = {id(c): stored_bytes(c.model) for c in tied}
    smallest = min(tied, key=lambda c: sizes[id(c)])
    if smallest is not fastest and sizes[id(smallest)] < sizes[id(fastest)]:
        report.notes.append(
            f"{smallest.mode} chosen for its size: {smallest.speedup:.2f}x is within timing noise of {fastest.mode}'s "
            f"{fastest.speedup:.2f}x, and its file is {sizes[id(smallest)]:,} bytes against {sizes[id(fastest)]:,}"
        )
        return smallest
    return fastest


def _decisions(model: onnx.ModelProto, chosen: Candidate, mode: QuantMode) -> list[NodeDecision]:
    """Every node the chosen mode's search could leave in float: quantized or not, and what was measured."""
    return [
        NodeDecision(
            node.name,
            node.op_type,
            node.name not in chosen.excluded,
            chosen.excluded.get(node.name, ""),
            chosen.speeds.get(node.name),
            chosen.sensitivity.get(node.name),
        )
        for node in _mode_nodes(model, mode)
    ]


def _mode_nodes(model: onnx.ModelProto, mode: QuantMode) -> list[onnx.NodeProto]:
    """The nodes ``mode`` may quantize, and so its search may leave in float: those of its ops that read
    float values (with a constant weight, for a mode that quantizes nothing else), and for a mode that
    enters bodies, the named weighted nodes there (ORT's quantizer leaves a body's node in float by name
    too; one name may stand for a node in each branch of a merged decoder, on the same weight)."""
    weighted = {node.name for node in _weighted_nodes(model)} if mode.constant_weights_only else set()
    not_float = _typed_not_float(model)
    left = mode.left_float(model) if mode.left_float is not None else set()
    found = [
        node
        for node in model.graph.node
        if node.op_type in mode.ops
        and node.domain in ("", "ai.onnx")
        and node.input
        and node.input[0] not in not_float
        and node.name not in left
        and (not mode.constant_weights_only or node.name in weighted)
    ]
    if mode.bodies:
        named = {node.name for node in found}
        for node in _weighted_in_bodies(model):
            if mode.in_bodies(node) and node.name and node.name not in named:
                found.append(node)
                named.add(node.name)
    return found


def _typed_not_float(model: onnx.ModelProto) -> set[str]:
    """Main-graph tensors ONNX shape inference types as other than float32, as ORT's quantizer runs it: it
    quantizes none of them. A Concat or Add of int64 shape values (an LSTM's initial state size) is not a
    node to count as quantized, nor to search over. A tensor inference cannot type (the output of a
    com.microsoft op) the quantizer is told to take for float."""
    view = inference_view(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(view, strict_mode=False)
    except Exception:  # best effort, as in ORT's quantizer
        inferred = view
    graph = inferred.graph
    other = {tensor.name for tensor in graph.initializer if tensor.data_type != onnx.TensorProto.FLOAT}
    values = [*graph.input, *graph.value_info, *graph.output]
    typed = {v.name: v.type.tensor_type.elem_type for v in values if v.type.HasField("tensor_type")}
    return other | {name for name, elem_type in typed.items() if elem_type not in (0, onnx.TensorProto.FLOAT)}


def applicable_modes(model: onnx.ModelProto) -> list[str]:
    """The modes ``auto`` would try on ``model``: the ones its weighted ops call for (none: nothing to quantize)."""
    try:
        return [mode.name for mode in _modes(model, QuantizeOptions())]
    except SettingsError:
        return []


class NodeTimes(NamedTuple):
    """A mode's nodes, each timed alone on this machine (``slower_nodes``)."""

    slow: tuple[str, ...]
    """Slower quantized than in float."""
    barely: tuple[str, ...]
    """Faster quantized by less than ``MARGINAL``."""
    count: int = 0
    """Every node the mode quantizes."""

    @classmethod
    def of(cls, speeds: Mapping[str, float], count: int = 0) -> NodeTimes:
        """The nodes of ``speeds`` (fp32 time / int8 time, each alone) slower quantized, and barely faster."""
        slow = tuple(sorted(name for name, ratio in speeds.items() if ratio < SLOWER))
        return cls(slow, tuple(sorted(name for name, ratio in speeds.items() if SLOWER <= ratio < MARGINAL)), count)

    def float_sets(self) -> dict[str, tuple[str, ...]]:
        """The sets of nodes worth leaving in float, by what they hold, the measured default first; each is a
        form to build and time whole, since timings alone do not add up (quantize's ``_start_mode`` times the
        same forms). A set that leaves every node in float is no form."""
        sets = {"slower alone": self.slow, "none": (), "slower or barely faster alone": self.slow + self.barely}
        kept: dict[str, tuple[str, ...]] = {}
        for label, nodes in sets.items():
            if len(nodes) < self.count and tuple(sorted(nodes)) not in kept.values():
                kept[label] = tuple(sorted(nodes))
        return kept


def slower_nodes(model: onnx.ModelProto, mode: str, inputs: InputSpec, threads: int = 1) -> NodeTimes:
    """The nodes of ``model`` that run slower, or barely faster, quantized in ``mode`` than in float, each
    timed alone on this machine, and how many nodes the mode quantizes, as quantize searches them: those with
    a constant weight and those reading float values, a MatMul whose weight is dequantized at run time for
    one. Names are as quantization names them: what a caller that quantizes elsewhere (compress's workers)
    may leave in float. Modes that are not timed per node (weight-only) give none."""
    options = QuantizeOptions(mode=mode, inputs=inputs, threads=threads)
    report = QuantizeReport(input="<memory>", output=None, mode=mode, max_drop=None)
    prepared, _ = _prepare(model, options, None, report)
    count = len(_mode_nodes(prepared, MODES[mode]))
    nodes = [n.name for n in _weighted_nodes(prepared) if n.op_type in MODES[mode].ops]
    if mode not in ("static", "dynamic"):
        return NodeTimes((), (), count)
    return NodeTimes.of(_node_speeds(prepared, nodes, mode, inputs.dims(), threads), count)
