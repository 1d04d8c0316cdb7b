"""The equality-saturation optimizer on one in-memory model: check, encode, saturate, extract, decode, verify.

Timed phase by phase for the report. Reading and writing files is the runner's job (``onnxsat.runner``).
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from egglog import EGraph

from onnxsat import model_io
from onnxsat.eqsat.control_flow.bodies import BodyStats, body_nodes, rewrite_bodies
from onnxsat.eqsat.control_flow.branches import Settled, settle
from onnxsat.eqsat.control_flow.constants import localize_constants
from onnxsat.eqsat.control_flow.scopes import shadowed_names, unshadow
from onnxsat.eqsat.costs import COST_MODELS, DEFAULT_COST_MODEL, get_cost_model
from onnxsat.eqsat.decode import decode
from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.extract import extract
from onnxsat.eqsat.facts import count_dead_nodes
from onnxsat.eqsat.frozen import freeze
from onnxsat.eqsat.partial_shapes import fold_partial_shapes, static_shape_reads
from onnxsat.eqsat.rules import TARGETS, applicable, rulesets_for
from onnxsat.eqsat.saturate import SaturationLimits, SaturationStats, egraph_size, saturate
from onnxsat.eqsat.warm import WarmEGraph, warm_egraph
from onnxsat.errors import SettingsError
from onnxsat.external_data import expected_nbytes, given_bytes, inference_view, stored_bytes
from onnxsat.inputs import InputSpec
from onnxsat.options import option
from onnxsat.report import OptimizeReport, op_counts
from onnxsat.specialize import declare_fixed_outputs, specialize
from onnxsat.surgery.surgeons.branches import sum_branches
from onnxsat.surgery.surgeons.matmul import EinsumToMatMul
from onnxsat.verification import DEFAULT_RUN_TIMEOUT, Tolerance, reference_run, verify, weights_apart, weights_back

_LIMITS = SaturationLimits()


@dataclass
class OptimizeOptions:
    """The eqsat pass's settings: ``onnxsat optimize``'s flags, the ``eqsat`` pipeline keys, keywords."""

    target: str = option(
        "ort",
        choices=lambda: sorted(TARGETS),
        help="ort: may emit com.microsoft fused ops; portable: standard ONNX only",
    )
    cost_model: str = option(
        DEFAULT_COST_MODEL,
        flag="--cost",
        choices=lambda: sorted(COST_MODELS),
        help="cost model for extraction: uniform (fewest nodes), analytic (flops and bytes), "
        "measured (ONNX Runtime micro-benchmarks, cached per machine)",
    )
    max_iterations: int = option(_LIMITS.max_iterations, help="stop the e-graph search after this many iterations")
    max_enodes: int = option(_LIMITS.max_enodes, help="stop the e-graph search when it holds this many e-nodes")
    max_seconds: float = option(_LIMITS.max_seconds, help="stop the e-graph search after this many seconds")
    max_memory_mib: float = option(
        _LIMITS.max_memory_mib, help="stop the e-graph search when the process's resident memory exceeds this"
    )
    specialize: bool = option(
        False,
        help="fix the inputs given with --inputs as constants and the sizes given with --input-shape in the "
        "result, so what they decide (an If on a sample rate, a size check) folds away; the result then takes "
        "only those",
    )
    inputs: InputSpec = field(default_factory=InputSpec)
    tolerance: Tolerance = field(default_factory=Tolerance)
    force: bool = False
    run_timeout: float = DEFAULT_RUN_TIMEOUT
    """Seconds each verification run under ONNX Runtime may take."""
    widen_weights: bool = False
    """Fold Casts that widen stored weights (int8 or float16 to float32) into weights of the wider type: for a
    lossy pass that then computes in that type and stores its own result, not for the lossless optimization,
    whose file would grow for nothing (ONNX Runtime widens them once when it loads the model)."""

    @property
    def limits(self) -> SaturationLimits:
        return SaturationLimits(self.max_iterations, self.max_enodes, self.max_seconds, self.max_memory_mib)

    def check(self) -> None:
        rulesets_for(self.target)
        if self.cost_model not in COST_MODELS:
            raise SettingsError(f"unknown cost model {self.cost_model!r}; choose from {', '.join(sorted(COST_MODELS))}")
        if not self.run_timeout > 0:  # also NaN, which compares false with everything
            raise SettingsError(f"--run-timeout must be positive (got {self.run_timeout:g})")
        limits = (("--max-iterations", self.max_iterations), ("--max-enodes", self.max_enodes))
        limits += (("--max-seconds", self.max_seconds), ("--max-memory-mib", self.max_memory_mib))
        for flag, value in limits:
            if not value > 0:  # also NaN ("--max-seconds nan" meant no limit)
                raise SettingsError(f"{flag} must be positive (got {value:g})")


class _Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while ~100k small objects are made and kept.

    The snapshot and decoder create no reference cycles worth collecting mid-phase; the collector's
    repeated walks over them took half of the extract phase on the 6,000-node benchmark.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


FREED_MEMORY_WORTH_RETURNING = 16 << 20
"""Bytes of weights from which a model's decode leaves enough freed memory to collect and give back at once."""


def _return_freed_memory(weight_bytes: int) -> None:
    """Give the C heap's free pages back to the system before the result's verification run.

    Decoding reads the weights a rule folds and builds the new ones (Q, K and V merged for Attention)
    through several temporary copies; glibc keeps the freed pages, 260 MB on ViT-base, and the
    verification session's weights came on top. Elsewhere than glibc this does nothing. Below
    ``FREED_MEMORY_WORTH_RETURNING`` of weights it is not done: a full collection walks every object of the
    process, 86 ms each in a long-lived one (the test suite), 40% of optimizing a small graph there, for
    temporaries of a few megabytes that the collector frees on its own.
    """
    if weight_bytes < FREED_MEMORY_WORTH_RETURNING:
        return
    gc.collect()  # the decoder's value cache is freed with it (the collector was paused while decoding)
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _einsums_as_matmuls(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` with each Einsum on a constant weight that is a MatMul written as one (``EinsumToMatMul``:
    Keras' EinsumDense, every projection of its attention), and how many: rules, the cost model, ORT's
    quantizer, pruning and sparsity know MatMul; on a Keras attention classifier ORT ran the MatMul form
    1.06-1.2x faster. Checked with the whole result against the original."""
    if not any(node.op_type == "Einsum" for node in model.graph.node):
        return model, 0  # a surgeon copies the model, weights and all
    outcome = EinsumToMatMul().apply(model)
    return outcome.model, sum(node.op_type == "Einsum" for node in model.graph.node) - sum(
        node.op_type == "Einsum" for node in outcome.model.graph.node
    )


def _branches_as_one_conv(model: onnx.ModelProto, base_dir: Path | None) -> tuple[onnx.ModelProto, int]:
    """``model`` with each sum of parallel convolution branches of one input written as one Conv
    (``ParallelConvsToConv``: RepVGG and MobileOne blocks as trained), and how many. The branches meet only
    at their Add, where no local rule sees them; timm's train-time RepVGG-A0 ran 1.11-1.20x faster as one
    Conv per block. Checked with the whole result against the original."""
    made = {output: node.op_type for node in model.graph.node for output in node.output}
    branchy = any(
        node.op_type == "Add" and any(made.get(name) in ("Conv", "BatchNormalization") for name in node.input)
        for node in model.graph.node
    )
    if not branchy:
        return model, 0  # a surgeon copies the model, weights and all
    summed, count = sum_branches(model, base_dir)
    return (summed, count) if count else (model, 0)


def _shape_inferred(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model's structure with inferred value types (its large weights as graph inputs of their type and
    dims, which is all inference reads of them: a whole model would be serialized, parsed and held again,
    weights and all), or None when inference cannot run (custom ops)."""
    try:
        view = inference_view(model)
        _as_standard_ops(view.graph)
        # data_prop: shapes computed by Shape -> Gather -> Concat -> Expand chains become known too
        return onnx.shape_inference.infer_shapes(view, strict_mode=False, data_prop=True)
    except Exception:  # inference is an aid to rule conditions, never a requirement
        return None


_SHAPED_LIKE = {"FusedConv": ("Conv", 3), "FusedGemm": ("Gemm", 3)}
"""com.microsoft ops a rewrite writes, and the standard op (and its inputs) whose output has their shape."""


def _as_standard_ops(graph: onnx.GraphProto) -> None:
    """In place, in an inference view: the fused ops a rewrite writes become the standard ops of their shapes.
    ONNX's inference has no rule for com.microsoft ops, and every size after the first FusedConv was lost,
    so a later round could not fold what the first had made known."""
    for node in graph.node:
        if node.domain == "com.microsoft" and node.op_type in _SHAPED_LIKE:
            op, inputs = _SHAPED_LIKE[node.op_type]
            kept = [a for a in node.attribute if not a.name.startswith("activation")]
            node.op_type, node.domain = op, ""
            del node.input[inputs:]
            del node.attribute[:]
            node.attribute.extend(kept)


@dataclass
class _Rewritten:
    """What the report shows of one e-graph search over one graph (not its result, which the caller
    holds alone: a model's weights are freed only with it)."""

    fusions: Counter[str]
    stats: SaturationStats
    egraph: dict[str, object]


@dataclass
class _ControlFlow:
    """What the optimizer did inside and to control flow, at every depth."""

    settled: Counter[str] = field(default_factory=Counter)
    bodies: BodyStats = field(default_factory=BodyStats)
    localized: int = 0
    settles: bool = True
    """Settle decided If and Loop nodes and move weights into bodies (not for target ``none``)."""
    left_alone: str = ""
    """Why the bodies were left as they are, when they were."""

    @property
    def active(self) -> bool:
        """Whether the model had control flow anything was done to or decided about."""
        bodies = self.bodies
        return bool(
            self.settled or self.localized or bodies.rewritten or bodies.refused or bodies.skipped or self.left_alone
        )

    def to_dict(self, renamed: int) -> dict[str, object]:
        return {
            "settled": dict(self.settled),
            "bodies": self.bodies.to_dict(),
            "constants_moved_into_bodies": self.localized,
            "names_renamed": renamed,
            "left_alone": self.left_alone,
        }


WARM_GRAPH_NODES = 100
"""Graphs of at most this many nodes (and every control-flow body) are searched on the process's ready
e-graph, larger ones on a fresh e-graph. A fresh one costs 0.2-0.8 s before its first match, most of a small
graph's search: the fuzz sample's graphs check twice as fast on the ready one (37 s -> 18 s for 20), a
22-node CNN saturates in 0.02 s instead of 0.6 s. But on a pushed e-graph egglog joins the parallel-product
merges far more slowly once a graph has many of them: ViT-base's saturation took 27 s against 1.9 s fresh,
a 4-layer BERT's 4.3 s against 1.8 s."""
_ROUNDS = 8
"""Rewrites of one graph at most: again after folding decided an If or Loop whose taken path was inlined, or
made sizes known that shape inference could not see before (``_static_shape_reads``)."""


def _rewrite(
    model: onnx.ModelProto,
    typed: onnx.ModelProto | None,
    options: OptimizeOptions,
    base_dir: Path | None,
    phases: _Phases,
    warm: WarmEGraph | None = None,
) -> tuple[onnx.ModelProto, _Rewritten]:
    """Encode, saturate, extract and decode one graph (its bodies stay opaque here).

    ``warm``: search on that ready e-graph (pushed, then popped) instead of a fresh one.
    """
    if warm is None:
        return _search(model, typed, options, base_dir, phases, None, None)
    with warm.scratch() as egraph:
        return _search(model, typed, options, base_dir, phases, egraph, warm.translated)


def _search(
    model: onnx.ModelProto,
    typed: onnx.ModelProto | None,
    options: OptimizeOptions,
    base_dir: Path | None,
    phases: _Phases,
    egraph: EGraph | None,
    translated: dict | None,
) -> tuple[onnx.ModelProto, _Rewritten]:
    cost_model = get_cost_model(options.cost_model)
    with phases("encode"), _collector_paused():
        if options.target != "none":  # a round trip with no rewrites
            model, _ = fold_partial_shapes(model, typed)
        encoded = encode(model, typed, base_dir, egraph, options.widen_weights)
        enodes_before = egraph_size(encoded.egraph)
    rulesets = applicable(rulesets_for(options.target), model.graph, bool(encoded.facts.parallel_pairs))
    with phases("saturate"):
        stats = saturate(encoded.egraph, rulesets, options.limits, translated)
    with phases("extract"), _collector_paused():
        snapshot = freeze(encoded.egraph)
        extraction = extract(snapshot, cost_model, encoded, ort_lookahead=options.target == "ort")
    with phases("decode"), _collector_paused():
        decoded = decode(encoded, snapshot, extraction.choice)
    egraph = {
        "enodes_before": enodes_before,
        "enodes_after": stats.enodes or enodes_before,
        "eclasses": len(snapshot.classes),
        "iterations": stats.iterations,
        "stop_reason": stats.stop_reason,
        "grow_bans": stats.banned,
        "encode_commands": encoded.n_commands,
        "extracted_cost": extraction.cost,
        "tree_cost": extraction.tree_cost,
        "dag_switches": extraction.dag_switches,
        "ort_fusions_avoided": extraction.ort_kept_apart,
    }
    extraction.choice.clear()  # the e-graph, snapshot and choices go with this frame
    return decoded.model, _Rewritten(decoded.fusions, stats, egraph)


def _optimize_graph(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    options: OptimizeOptions,
    base_dir: Path | None,
    phases: _Phases,
    control: _ControlFlow,
    is_body: bool = False,
) -> tuple[onnx.ModelProto, list[_Rewritten]]:
    """Settle decided control flow, rewrite the bodies (recursively), then the graph itself.

    ``feeds`` are the values of the model's inputs in the verification run; each rewritten body is checked
    against its original with the values it sees there. The graph itself is verified by the caller.
    """
    model, settled = settle(model) if control.settles else (model, Settled())
    control.settled.update(settled.counts)
    typed = _shape_inferred(model)

    def rewrite_standalone(
        standalone: onnx.ModelProto, body_feeds: dict[str, np.ndarray]
    ) -> tuple[onnx.ModelProto, Counter[str]]:
        rewritten, rewrites = _optimize_graph(standalone, body_feeds, options, base_dir, phases, control, is_body=True)
        return rewritten, sum((r.fusions for r in rewrites), Counter())

    if not control.left_alone:
        model = rewrite_bodies(
            model, typed, rewrite_standalone, control.bodies, options.tolerance, feeds, base_dir, options.run_timeout
        )
    rewrites: list[_Rewritten] = []
    unfolded: set[str] = set()  # Shape nodes whose read dims were known after a round: the next must fold them
    for _ in range(_ROUNDS):
        warm = warm_egraph(options.target) if is_body or len(model.graph.node) <= WARM_GRAPH_NODES else None
        model, rewritten = _rewrite(model, typed, options, base_dir, phases, warm)
        rewrites.append(rewritten)
        model, settled = settle(model) if control.settles else (model, Settled())
        if settled:
            control.settled.update(settled.counts)
            typed = _shape_inferred(model)  # the taken paths' nodes are the graph's own now: rewrite again
            continue
        if not any(node.op_type == "Shape" for node in model.graph.node):
            break
        typed = _shape_inferred(model)
        known = static_shape_reads(model, typed)
        if not known or known & unfolded:
            break  # else a fold made sizes known that inference could not see before: rewrite again
        unfolded = known
    return model, rewrites


def optimize_model(
    model: onnx.ModelProto,
    options: OptimizeOptions | None = None,
    source: str = "<memory>",
    phases: _Phases | None = None,
    base_dir: Path | None = None,
) -> tuple[onnx.ModelProto, OptimizeReport]:
    """Optimize an in-memory model (left unchanged); return the result and its report (verified).

    ``base_dir`` is the folder of the model's external data, if it has any (see ``model_io.load_model``);
    the result keeps referring to that data for every weight it did not fold.
    """
    options = options or OptimizeOptions()
    phases = phases or _Phases()
    cost_model = get_cost_model(options.cost_model)
    report = OptimizeReport(input=source, output=None, target=options.target, cost_model=cost_model.name)
    with phases("check"):
        model_io.check_model(model)
    with phases("verify"):
        reference = reference_run(model, options.inputs, base_dir=base_dir, timeout=options.run_timeout)
    control = _ControlFlow(settles=options.target != "none")
    shadowing = sorted(shadowed_names(model.graph))
    ambiguous = sorted(shadowed_names(model.graph, initializers_only=True))
    if ambiguous:
        # ONNX Runtime reads a body initializer named like an outer tensor as the outer tensor with its
        # optimizations off and as the initializer with them on: no rewrite of such bodies can be checked.
        # (A body input named like an outer tensor is read as the input either way.)
        control.settles = False
        control.left_alone = (
            f"body initializers are named like outer tensors ({', '.join(ambiguous[:3])}"
            f"{', ...' if len(ambiguous) > 3 else ''}), which ONNX Runtime reads one way with its optimizations "
            "and another without: control flow left as it is"
        )
    working = model
    if options.specialize:
        working, report.specialised = specialize(model, options.inputs)
    working, einsums = _einsums_as_matmuls(working) if options.target != "none" else (working, 0)
    working, branches = _branches_as_one_conv(working, base_dir) if options.target != "none" else (working, 0)
    feeds = {value.name: reference.feeds[value.name] for value in working.graph.input if value.name in reference.feeds}
    optimized, rewrites = _optimize_graph(working, feeds, options, base_dir, phases, control)
    control.bodies.nodes_before, control.bodies.nodes_after = body_nodes(model.graph), body_nodes(optimized.graph)
    renamed = unshadow(optimized.graph, keep=frozenset(shadowing))
    control.localized = localize_constants(optimized) if control.settles else 0
    if options.specialize:  # optimized is ours: specialize copied the model
        report.specialised += declare_fixed_outputs(optimized, _shape_inferred(optimized))
    # The result's verification run is the peak of the whole optimization: the weights a rule made are held
    # once, as the arrays ORT reads (the model they came from is dropped), and the e-graphs, snapshots and
    # extractions, gone with their frames, return their memory first.
    weight_bytes = sum(expected_nbytes(tensor) or 0 for tensor in optimized.graph.initializer)
    light, weights = weights_apart(optimized)
    del optimized
    _return_freed_memory(weight_bytes)
    with phases("verify"):
        result = verify(
            model,
            light,
            options.inputs,
            options.tolerance,
            reference=reference,
            base_dir=base_dir,
            timeout=options.run_timeout,
            weights=weights,
        )
    optimized = weights_back(light, weights)
    del light, weights
    last = rewrites[-1]
    report.nodes_before = dict(op_counts(model))
    report.nodes_after = dict(op_counts(optimized))
    report.fusions = dict(sum((r.fusions for r in rewrites), Counter(control.bodies.fusions)))
    if einsums:
        report.fusions["Einsum -> MatMul"] = einsums
    if branches:
        report.fusions["parallel Conv branches -> Conv"] = branches
    report.rule_matches = dict(sum((Counter(r.stats.rule_matches) for r in rewrites), Counter()))
    # every round's saturation (a second round after folds made sizes known): RAFT's first round took 22 s, and a
    # table of the last one alone showed 2
    family_seconds = sum((r.stats.family_seconds for r in rewrites), Counter())
    searched_seconds = sum((r.stats.searched_seconds for r in rewrites), Counter())
    report.rule_seconds = [
        {
            "family": family,
            "seconds": round(seconds, 4),
            "search_apply_seconds": round(searched_seconds[family], 4),
        }
        for family, seconds in family_seconds.most_common()
    ]
    if len(rewrites) > 1:
        report.egraph = {**last.egraph, "rounds": len(rewrites)}
    else:
        report.egraph = last.egraph
    report.dead_nodes_removed = count_dead_nodes(model.graph)
    if control.active:
        report.control_flow = control.to_dict(renamed)
    report.verification = result
    report.sizes = {"original": given_bytes(model, source), "optimized": stored_bytes(optimized)}
    report.phases = phases.seconds
    return optimized, report
