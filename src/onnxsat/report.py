"""What an optimization changed, as a human table (stdout) and as JSON (``--report``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx

from onnxsat.core import ReportBase
from onnxsat.op_kinds import qualified_op
from onnxsat.verification import VerificationResult


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Nodes per op type in the main graph (``domain::Op`` outside the default domain)."""
    return Counter(qualified_op(n.domain, n.op_type) for n in model.graph.node)


GROWING_OPS = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})
"""Ops that make a large tensor from a small one: a model that builds its weights with them (the onnx package's
light test models: 214 KB) is larger once they are folded (21 MB)."""


@dataclass
class LatencyComparison:
    """Latency of the original and the optimized model measured side by side in one process."""

    ort_level: str
    threads: int
    pairs: int
    original_ms: float
    optimized_ms: float
    speedup: float  # median of per-pair ratios original/optimized
    feeds: str = ""
    """The inputs' shapes as timed (``x [1000, 3, 32, 32]``): given rows are timed as given, which may be no
    batch of 1."""

    def line(self, result: str = "optimized") -> str:
        """The comparison as a report line, the new model called ``result``."""
        fed = f", inputs {self.feeds}" if self.feeds else ""
        return (
            f"latency under {self.ort_level} ({self.threads} thread, median of {self.pairs} interleaved pairs{fed}): "
            f"original {self.original_ms:.3f} ms, {result} {self.optimized_ms:.3f} ms, speedup {self.speedup:.3f}x"
        )


@dataclass
class OptimizeReport(ReportBase):
    input: str
    output: str | None
    target: str
    cost_model: str
    nodes_before: dict[str, int] = field(default_factory=dict)
    nodes_after: dict[str, int] = field(default_factory=dict)
    fusions: dict[str, int] = field(default_factory=dict)
    rule_matches: dict[str, int] = field(default_factory=dict)
    rule_seconds: list[dict[str, Any]] = field(default_factory=list)
    """Saturation time per rule family, slowest first: ``family``, ``seconds`` (wall time of its runs) and
    ``search_apply_seconds``, the part egglog's run reports give to its rules' search and apply (the rest
    is join planning, enumeration and rebuilding, where a rule that joins too much spends its time)."""
    dead_nodes_removed: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    egraph: dict[str, object] = field(default_factory=dict)
    specialised: list[str] = field(default_factory=list)
    """With ``--specialize``: each input fixed in the result, what the result no longer accepts, and each output
    whose dims the fixed inputs decide (declared fixed in the result)."""
    control_flow: dict[str, Any] = field(default_factory=dict)
    """Only for models with If, Loop or Scan: ``settled`` (op type -> how many were replaced by their taken
    path), ``constants_moved_into_bodies``, ``bodies`` (rewritten, verified alone, unverifiable alone,
    refused with why, skipped, nodes before and after at every depth) and ``names_renamed`` (body names
    that clashed with an enclosing scope's)."""
    verification: VerificationResult | None = None
    latency: list[LatencyComparison] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    """``original`` (the file as given) and ``optimized`` bytes, external data included."""
    written: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _size_line(self) -> list[str]:
        if not self.sizes:
            return []
        before, after = self.sizes["original"], self.sizes["optimized"]
        line = f"file size: {before:,} -> {after:,} bytes ({after / before:.0%})" if before else ""
        if after > 1.05 * before and self.control_flow.get("constants_moved_into_bodies"):
            line += "; weights several bodies read were copied into each (constants there, which ORT runs faster)"
        builders = sorted(op for op in GROWING_OPS if self.nodes_before.get(op))
        if line and after > 2 * before and builders:
            line += (
                f"; the input builds constants as it runs ({', '.join(builders)}): folded, they are stored in the "
                "file (ONNX Runtime folds them the same way when it loads the input)"
            )
        return [line] if line else []

    def summary(self) -> list[str]:
        fused = ", ".join(f"{op} {count}" for op, count in sorted(self.fusions.items())) or "none"
        before, after = sum(self.nodes_before.values()), sum(self.nodes_after.values())
        return [f"{before} -> {after} nodes; fusions: {fused}"]

    def _control_flow_lines(self) -> list[str]:
        if not self.control_flow:
            return []
        if self.control_flow.get("left_alone"):
            return [f"control flow: {self.control_flow['left_alone']}"]
        bodies = self.control_flow["bodies"]
        settled = ", ".join(f"{op} {count}" for op, count in sorted(self.control_flow["settled"].items())) or "none"
        lines = [
            f"control flow: settled to the path constants decide: {settled}; bodies rewritten "
            f"{bodies['rewritten']} ({bodies['verified']} verified on their own, {bodies['unverifiable']} only "
            f"within the model), {bodies['nodes_before']} -> {bodies['nodes_after']} nodes inside bodies; "
            f"weights moved into the bodies that read them: {self.control_flow['constants_moved_into_bodies']}"
        ]
        lines.extend(f"  body kept as it was: {reason}" for reason in bodies["refused"])
        return lines

    def record_phase(self, name: str, seconds: float) -> None:
        """Loading comes first among the phases, saving last."""
        self.phases = {name: seconds, **self.phases} if name == "load" else {**self.phases, name: seconds}

    def to_table(self) -> str:
        lines = [f"ONNXSat optimize  {self.input} -> {self.output or '(not written)'}"]
        lines.append(f"target {self.target}, cost model {self.cost_model}")
        lines.append("")
        lines.append(f"{'op type':<32}{'before':>8}{'after':>8}")
        for op in sorted(set(self.nodes_before) | set(self.nodes_after)):
            before, after = self.nodes_before.get(op, 0), self.nodes_after.get(op, 0)
            lines.append(f"{op:<32}{before:>8}{after:>8}")
        total_before, total_after = sum(self.nodes_before.values()), sum(self.nodes_after.values())
        lines.append(f"{'total':<32}{total_before:>8}{total_after:>8}")
        lines.append("")
        lines.append("fusions in the result:" if self.fusions else "fusions in the result: none")
        for label, count in sorted(self.fusions.items()):
            lines.append(f"  {label:<52}{count:>6}")
        if self.dead_nodes_removed:
            lines.append(f"dead nodes removed (no path to an output): {self.dead_nodes_removed}")
        lines.extend(f"specialised: {note}" for note in self.specialised)
        lines.extend(self._control_flow_lines())
        lines.extend(self._size_line())
        graph = self.egraph
        lines.append("")
        lines.append(
            f"e-graph: {graph.get('enodes_before', 0)} -> {graph.get('enodes_after', 0)} e-nodes, "
            f"{graph.get('eclasses', 0)} e-classes, {graph.get('iterations', 0)} iterations, "
            f"stopped: {graph.get('stop_reason', '?')}"
            + (
                f" (the last of {graph['rounds']} rewrite rounds; times below are all rounds')"
                if graph.get("rounds")
                else ""
            )
        )
        lines.append("seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in self.phases.items()))
        lines.extend(self._rule_time_lines())
        lines.append("")
        lines.extend(self._verification_lines())
        lines.extend(lat.line() for lat in self.latency)
        return "\n".join(lines)

    def _rule_time_lines(self, shown: int = 5) -> list[str]:
        """The slowest rule families, so a family that joins too much shows at once."""
        if not self.rule_seconds:
            return []
        count = min(shown, len(self.rule_seconds))
        lines = [f"saturation seconds by rule family (slowest {count}; search+apply in egglog):"]
        for spent in self.rule_seconds[:shown]:
            lines.append(f"  {spent['family']:<30}{spent['seconds']:>9.3f}  ({spent['search_apply_seconds']:.3f})")
        return lines

    def _verification_lines(self) -> list[str]:
        result = self.verification
        if result is None:
            return ["verification: not run"]
        tol = result.tolerance
        head = "PASSED" if result.ok else "FAILED"
        lines = [f"verification {head} (rtol {tol.rtol:g}, atol {tol.atol:g}, ORT optimizations off)"]
        if result.error:
            lines.append(f"  {result.error}")
        for out in result.outputs:
            mark = "ok" if out.ok else "MISMATCH"
            note = f"  {out.note}" if out.note else ""
            lines.append(f"  {out.name}: max abs {out.max_abs_diff:.3g}, max rel {out.max_rel_diff:.3g}  {mark}{note}")
        return lines
