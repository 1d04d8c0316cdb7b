"""What ``onnxsat prune`` did, as a table for people and JSON for scripts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from onnxsat.core import ReportBase
from onnxsat.metrics import Score, with_score_headlines
from onnxsat.metrics.text import summary_lines, table_lines
from onnxsat.report import LatencyComparison
from onnxsat.verification import VerificationResult


@dataclass
class GroupReport:
    index: int
    roots: list[str]
    structure: str
    """one-to-one, one-to-many, many-to-one or many-to-many (the paper's Figure 4)."""
    channels: int
    kept: int
    rate: float
    status: str
    """``pruned``, ``excluded``, or ``unprunable: why``."""
    unit: str = "channel"
    """What one of ``channels`` is: ``channel``, ``head/64`` (an attention head of 64 features) or
    ``block/4`` (4 contiguous features kept together by a split channel axis)."""


@dataclass
class LeafFit:
    """One leaf refitted by ``--reconstruct``: its relative output error before and after the refit, on
    calibration samples the refit was not solved on (``held_out``), or on all of them when there were too few."""

    node: str
    error_before: float
    error_after: float
    accepted: bool
    held_out: bool = True


@dataclass
class PruneReport(ReportBase):
    input: str
    output: str | None
    criterion: str
    mode: str
    """``tree-level`` or ``single-node``."""
    rate: float
    groups: list[GroupReport] = field(default_factory=list)
    params: dict[str, int] = field(default_factory=dict)
    macs: dict[str, int | None] = field(default_factory=dict)
    macs_unknown: str = ""
    """Why ``macs`` holds None (a shape no inference or run could tell), "" when both were counted."""
    sizes: dict[str, int] = field(default_factory=dict)
    data: str | None = None
    """What calibration ran on (HRank, reconstruction)."""
    scored_on: str | None = None
    """The data the pruned model was scored on against the original (``--data``'s held-out part)."""
    metrics: dict[str, dict[str, str]] = field(default_factory=dict)
    baseline: Score | None = None
    accuracy: Score | None = None
    collapsed: str | None = None
    """Why the model pruned at the rate asked for no longer does its job (``collapse_warning``), if so."""
    latency: list[LatencyComparison] = field(default_factory=list)
    """The pruned model timed beside the original (``--latency``): fewer MACs need not mean faster."""
    reconstruction: list[LeafFit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verification: VerificationResult | None = None
    seconds: float = 0.0
    written: bool = False

    def to_dict(self) -> dict[str, Any]:
        return with_score_headlines(asdict(self), self.baseline, self.accuracy, None)

    def summary(self) -> list[str]:
        params = self.params
        return [
            f"{self.mode} {self.criterion} at rate {self.rate:g}: params {params['pruned']:,} of "
            f"{params['original']:,}, {self._macs_text()}",
            *summary_lines(self.scored_on, self.baseline, self.accuracy, None),
            *self.notes,
        ]

    def _macs_text(self) -> str:
        """``MACs 5 of 10``, or ``MACs unknown: why`` when either count is missing."""
        before, after = self.macs.get("original"), self.macs.get("pruned")
        if before is None or after is None:
            return f"MACs unknown: {self.macs_unknown or 'not counted'}"
        return f"MACs {after:,} of {before:,}"

    def to_table(self) -> str:
        lines = [f"ONNXSat prune  {self.input} -> {self.output or '(not written)'}"]
        pruned = [g for g in self.groups if g.status == "pruned"]
        lines.append(
            f"criterion {self.criterion} ({self.mode}), rate {self.rate:g}: {len(pruned)} of {len(self.groups)} "
            "channel groups pruned"
        )
        lines.append("")
        lines.append(f"{'group':>5}  {'roots':<44}{'structure':<14}{'unit':<10}{'count':>6}{'kept':>7}  status")
        for group in self.groups:
            roots = ", ".join(group.roots)
            roots = roots if len(roots) <= 43 else roots[:40] + "..."
            lines.append(
                f"{group.index:>5}  {roots:<44}{group.structure:<14}{group.unit:<10}{group.channels:>6}"
                f"{group.kept:>7}  {group.status}"
            )
        heads = [g for g in pruned if g.unit.startswith("head")]
        if heads:
            removed = sum(g.channels - g.kept for g in heads)
            total = sum(g.channels for g in heads)
            lines.append(f"attention heads: {removed} of {total} removed in {len(heads)} attention blocks")
        lines.append("")
        lines.append(_ratio_line("parameters", self.params))
        if self.macs.get("original") is not None and self.macs.get("pruned") is not None:
            lines.append(_ratio_line("MACs", self.macs))  # type: ignore[arg-type]
        else:
            lines.append(self._macs_text())
        if self.sizes:
            lines.append(_ratio_line("file bytes", self.sizes))
        if self.reconstruction:
            lines.append(f"reconstruction on {self.data} (errors on samples each refit was not solved on):")
            for fit in self.reconstruction:
                verdict = "refitted" if fit.accepted else "kept (no gain)"
                where = "" if fit.held_out else "  (too few samples: on those it was solved on)"
                lines.append(
                    f"  {fit.node[:44]:<46}relative error {fit.error_before:.4f} -> {fit.error_after:.4f}  "
                    f"{verdict}{where}"
                )
        lines += table_lines(self.scored_on, self.metrics, self.baseline, self.accuracy, None)
        lines.extend(f"note: {note}" for note in self.notes)
        if self.verification is not None:
            status = "PASSED" if self.verification.ok else "FAILED"
            lines.append(
                f"verification {status}: {self.verification.error or 'passes the checker, runs in ONNX Runtime'}"
            )
            lines.extend(f"  {output.name}: {output.note}" for output in self.verification.outputs if output.note)
        lines.extend(lat.line("pruned") + ("" if lat.speedup >= 1.0 else " (slower)") for lat in self.latency)
        lines.append(f"seconds: {self.seconds:.2f}")
        return "\n".join(lines)


def _ratio_line(what: str, values: dict[str, int]) -> str:
    before, after = values.get("original", 0), values.get("pruned", 0)
    ratio = f" ({after / before:.1%} kept)" if before else ""
    return f"{what}: {before:,} -> {after:,}{ratio}"
