"""What ``onnxsat quantize`` did: per node and per mode, accuracy, latency and sizes; a table and JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from onnxsat.core import ReportBase
from onnxsat.latency import latency_phrase
from onnxsat.metrics import HeldOut, Score, with_score_headlines
from onnxsat.metrics.text import summary_lines, table_lines
from onnxsat.verification import VerificationResult


@dataclass
class NodeDecision:
    """One quantizable node: quantized or kept in float, and the measurements that decided it."""

    node: str
    op_type: str
    quantized: bool
    why: str
    speed: float | None = None
    """fp32 time / int8 time of the node alone on this machine (above 1: int8 pays); None if not measured."""
    sensitivity: float | None = None
    """Relative change of the scored outputs with this node alone quantized; None if not measured."""


@dataclass
class ModeTrial:
    """One mode tried: how many nodes it quantized, its drop on the search data and its measured speed."""

    mode: str
    quantized: int = 0
    kept: int = 0
    drop: float | None = None
    speedup: float | None = None
    evaluations: int = 0
    seconds: float = 0.0
    """Wall time of the mode's search: node timing, quantizing, scoring, the budget search and its latency."""
    error: str | None = None
    """Why the mode gave no usable model (nothing to quantize, budget missed, ORT refused it)."""
    note: str = ""
    """What whole-model timing decided over the node timings (nodes slower alone, quantized anyway or not)."""
    worst: list[tuple[str, float]] = field(default_factory=list)
    """The most damaging nodes of a mode searched for the budget, with their damage: why it missed it, or what
    the search left in float first."""

    def add_note(self, note: str) -> None:
        """``note`` after what the trial already says, ``; `` between."""
        self.note = "; ".join(text for text in (self.note, note) if text)

    def worst_text(self) -> str:
        """``most damaging nodes: a (0.3), b (0.1)``, or nothing when the mode was not searched."""
        shown = ", ".join(f"{name} ({damage:.3g})" for name, damage in self.worst)
        return f"most damaging nodes: {shown}" if shown else ""


@dataclass
class QuantizeReport(ReportBase):
    input: str
    output: str | None
    mode: str
    """The mode asked for (``auto`` or one of the modes)."""
    chosen: str | None = None
    weight_bits: int | None = None
    """Bits of the chosen mode's int8 weights (8, or 7 where full-range products clip); None for weight-only."""
    trials: list[ModeTrial] = field(default_factory=list)
    nodes: list[NodeDecision] = field(default_factory=list)
    data: str | None = None
    metric: str | None = None
    metrics: dict[str, dict[str, str]] = field(default_factory=dict)
    baseline: Score | None = None
    accuracy: Score | None = None
    held_out: HeldOut | None = None
    max_drop: float | None = None
    confidence: float = 0.5
    """How sure a candidate had to be to count as inside ``max_drop`` (see ``Score.bound``)."""
    latency: dict[str, float] = field(default_factory=dict)
    """fp32_ms, quantized_ms, speedup, threads: ORT with all optimizations, interleaved rounds, medians."""
    sizes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    verification: VerificationResult | None = None
    seconds: float = 0.0
    written: bool = False

    def to_dict(self) -> dict[str, Any]:
        return with_score_headlines(asdict(self), self.baseline, self.accuracy, self.held_out)

    def summary(self) -> list[str]:
        quantized = sum(n.quantized for n in self.nodes)
        lines = [f"{self.chosen or 'nothing'}: {quantized} of {len(self.nodes)} quantizable nodes quantized"]
        if self.latency:
            lines.append("latency " + latency_phrase(self.latency, "fp32_ms", "quantized_ms"))
        lines += summary_lines(self.data, self.baseline, self.accuracy, self.held_out)
        return lines + self.notes

    def to_table(self) -> str:
        lines = [f"ONNXSat quantize  {self.input} -> {self.output or '(not written)'}"]
        lines.append(f"mode {self.mode}: chosen {self.chosen or 'none'}")
        if self.trials:
            lines.append("")
            lines.append(f"{'mode':<13}{'quantized':>10}{'kept':>6}{'drop':>9}{'speedup':>9}{'seconds':>9}  note")
            for t in self.trials:
                drop = f"{t.drop:.2%}" if t.drop is not None else "-"
                speed = f"{t.speedup:.2f}x" if t.speedup is not None else "-"
                lines.append(
                    f"{t.mode:<13}{t.quantized:>10}{t.kept:>6}{drop:>9}{speed:>9}{t.seconds:>9.1f}  {t.error or t.note}"
                )
                if t.worst:
                    lines.append(f"{'':<13}{t.worst_text()}")
        if self.nodes:
            kept = [n for n in self.nodes if not n.quantized]
            lines.append("")
            lines.append(
                f"{len(self.nodes) - len(kept)} of {len(self.nodes)} searchable nodes quantized"
                + ("; in float:" if kept else "")
            )
            if kept:
                lines.append(f"{'node':<44}{'op':<9}{'int8 speed':>11}{'damage':>9}  why")
            for n in kept:
                speed = f"{n.speed:.2f}x" if n.speed is not None else "-"
                damage = f"{n.sensitivity:.3g}" if n.sensitivity is not None else "-"
                lines.append(f"{n.node[:43]:<44}{n.op_type:<9}{speed:>11}{damage:>9}  {n.why}")
        lines += table_lines(self.data, self.metrics, self.baseline, self.accuracy, self.held_out)
        if self.max_drop is not None:
            lines.append(f"budget: drop at most {self.max_drop:.2%} at {self.confidence:.0%} confidence")
        if self.latency:
            lines.append("latency, original -> quantized: " + latency_phrase(self.latency, "fp32_ms", "quantized_ms"))
        if self.sizes:
            lines.append("file size: " + ", ".join(f"{k} {v:,} bytes" for k, v in self.sizes.items()))
        lines.extend(f"note: {note}" for note in self.notes)
        if self.verification is not None:
            status = "PASSED" if self.verification.ok else "FAILED"
            lines.append(f"verification {status}: {self.verification.error or 'loads and runs in ONNX Runtime'}")
        lines.append(f"seconds: {self.seconds:.2f}")
        return "\n".join(lines)
