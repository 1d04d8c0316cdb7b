"""The optimize pass end to end: load, encode, saturate, extract, decode, verify, save.

Timed phase by phase for the report. The input file is only read; the result is written only when
it passes verification (or the caller forces it), and always atomically.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from onnxsat import model_io
from onnxsat.eqsat.costs import DEFAULT_COST_MODEL, get_cost_model
from onnxsat.eqsat.decode import decode
from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.extract import extract
from onnxsat.eqsat.facts import count_dead_nodes
from onnxsat.eqsat.frozen import freeze
from onnxsat.eqsat.rules import applicable, rulesets_for
from onnxsat.eqsat.saturate import SaturationLimits, egraph_size, saturate
from onnxsat.errors import VerificationFailedError
from onnxsat.report import OptimizeReport, op_counts
from onnxsat.verification import DEFAULT_RUN_TIMEOUT, Tolerance, reference_run, verify


@dataclass
class OptimizeOptions:
    target: str = "ort"
    cost_model: str = DEFAULT_COST_MODEL
    input_shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    tolerance: Tolerance = field(default_factory=Tolerance)
    limits: SaturationLimits = field(default_factory=SaturationLimits)
    force: bool = False
    run_timeout: float = DEFAULT_RUN_TIMEOUT
    """Seconds each verification run under ONNX Runtime may take."""


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


def _shape_inferred(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model with inferred value types, or None when inference cannot run (custom ops, size)."""
    try:
        # data_prop: shapes computed by Shape -> Gather -> Concat -> Expand chains become known too
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # inference is an aid to rule conditions, never a requirement
        return None


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
    rulesets = rulesets_for(options.target)
    cost_model = get_cost_model(options.cost_model)
    report = OptimizeReport(input=source, output=None, target=options.target, cost_model=cost_model.name)
    with phases("check"):
        model_io.check_model(model)
    with phases("verify"):
        reference = reference_run(model, options.input_shapes, base_dir=base_dir, timeout=options.run_timeout)
    with phases("encode"), _collector_paused():
        encoded = encode(model, _shape_inferred(model), base_dir)
        enodes_before = egraph_size(encoded.egraph)
    rulesets = applicable(rulesets, model.graph, bool(encoded.facts.parallel_pairs))
    with phases("saturate"):
        stats = saturate(encoded.egraph, rulesets, options.limits)
    with phases("extract"), _collector_paused():
        snapshot = freeze(encoded.egraph)
        extraction = extract(snapshot, cost_model, encoded, ort_lookahead=options.target == "ort")
    with phases("decode"), _collector_paused():
        decoded = decode(encoded, snapshot, extraction.choice)
    with phases("verify"):
        result = verify(
            model,
            decoded.model,
            options.input_shapes,
            options.tolerance,
            reference=reference,
            base_dir=base_dir,
            timeout=options.run_timeout,
        )
    report.nodes_before = dict(op_counts(model))
    report.nodes_after = dict(op_counts(decoded.model))
    report.fusions = dict(decoded.fusions)
    report.rule_matches = dict(stats.rule_matches)
    report.dead_nodes_removed = count_dead_nodes(model.graph)
    report.egraph = {
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
    report.verification = result
    report.phases = phases.seconds
    return decoded.model, report


def optimize(
    input_path: str | Path,
    output_path: str | Path,
    options: OptimizeOptions | None = None,
    report_path: str | Path | None = None,
) -> OptimizeReport:
    """Optimize the model at ``input_path`` into ``output_path`` and return the report.

    Raises an :class:`~onnxsat.errors.OnnxSatError` for bad input; raises
    :class:`VerificationFailedError` (with ``.report``) when the result does not match the original
    and ``options.force`` is not set, in which case nothing is written.
    """
    options = options or OptimizeOptions()
    phases = _Phases()
    model_io.check_input_path(input_path)
    target = model_io.check_output_path(input_path, output_path)
    if report_path is not None:
        model_io.check_report_path(report_path, input_path, output_path)
    with phases("load"):
        model = model_io.load_model(input_path)
    base_dir = model_io.model_folder(input_path)
    model_io.check_data_path(target, model, base_dir)
    optimized, report = optimize_model(model, options, source=str(input_path), phases=phases, base_dir=base_dir)
    verified = report.verification is not None and report.verification.ok
    if verified or options.force:
        with phases("save"):
            model_io.save_model(optimized, target, base_dir)
        report.output = str(target)
        report.written = True
    report.phases = phases.seconds
    if report_path is not None:
        model_io.write_text_atomic(report.to_json() + "\n", report_path)
    if not verified and not options.force:
        error = VerificationFailedError(
            "the optimized model does not match the original; nothing was written (use --force to write it anyway)"
        )
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report
