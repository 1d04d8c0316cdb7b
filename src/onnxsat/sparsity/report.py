"""What ``onnxsat sparsify`` did, as a table for people and JSON for scripts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from onnxsat.core import ReportBase
from onnxsat.metrics import HeldOut, Score, with_score_headlines
from onnxsat.metrics.text import summary_lines, table_lines
from onnxsat.sparsity.methods import LayerSparsity
from onnxsat.verification import VerificationResult


@dataclass
class SparsifyReport(ReportBase):
    input: str
    output: str | None
    method: str
    requested: float | None
    """The level asked for (None when a budget search chose it)."""
    layers: list[LayerSparsity] = field(default_factory=list)
    overall: float = 0.0
    span_fraction: float | None = None
    notes: list[str] = field(default_factory=list)
    data: str | None = None
    metric: str | None = None
    """The metric of the output that counts (the worst); ``metrics`` has every scored output's."""
    metrics: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per scored output: its metric and why (``auto: one score per class per sample ([10])``)."""
    baseline: Score | None = None
    accuracy: Score | None = None
    held_out: HeldOut | None = None
    collapsed: str | None = None
    """Why the model made at the level asked for no longer does its job (``collapse_warning``), if so."""
    max_drop: float | None = None
    confidence: float = 0.5
    """How sure a level had to be to count as inside ``max_drop`` (see ``Score.bound``)."""
    search: dict[str, object] = field(default_factory=dict)
    """Budget search: uniform and per-layer results and the evaluations made (see ``search.py``)."""
    sizes: dict[str, int] = field(default_factory=dict)
    """Serialized bytes: original, dense pruned, and with sparse initializers if asked for."""
    sparse_storage: dict[str, object] = field(default_factory=dict)
    verification: VerificationResult | None = None
    seconds: float = 0.0
    written: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for layer, entry in zip(self.layers, data["layers"], strict=True):
            entry["sparsity"] = layer.sparsity
            entry["size"] = layer.size
        return with_score_headlines(data, self.baseline, self.accuracy, self.held_out)

    def summary(self) -> list[str]:
        lines = [f"{self.method}: {self.overall:.1%} of the prunable weights are zero"]
        lines += summary_lines(self.data, self.baseline, self.accuracy, self.held_out)
        return lines + self.notes

    def to_table(self) -> str:
        lines = [f"ONNXSat sparsify  {self.input} -> {self.output or '(not written)'}"]
        level = "chosen by search" if self.requested is None else f"{self.requested:.1%} requested"
        lines.append(f"method {self.method}, {level}, {self.overall:.2%} reached over {len(self.layers)} weights")
        if self.span_fraction is not None:
            lines.append(f"common threshold: {self.span_fraction:.4g} x the reference span")
        lines.append("")
        lines.append(f"{'weight':<40}{'op':<12}{'params':>10}{'zeros before':>14}{'sparsity':>10}{'|w| cut':>11}")
        for layer in self.layers:
            lines.append(
                f"{layer.name[:39]:<40}{layer.op_type:<12}{layer.size:>10,}{layer.zeros_before:>14,}"
                f"{layer.sparsity:>10.2%}{layer.threshold:>11.4g}"
            )
        total = sum(layer.size for layer in self.layers)
        lines.append(f"{'total':<52}{total:>10,}{sum(x.zeros_before for x in self.layers):>14,}{self.overall:>10.2%}")
        lines.extend(f"note: {note}" for note in self.notes)
        lines += table_lines(self.data, self.metrics, self.baseline, self.accuracy, self.held_out)
        if self.search:
            lines.append("")
            lines.append(f"budget: {self.metric} drop at most {self.max_drop:.2%} at {self.confidence:.0%} confidence")
            for name in ("uniform", "per_layer"):
                found = self.search.get(name)
                if isinstance(found, dict):
                    lines.append(
                        f"  {name.replace('_', '-'):<10} {found['sparsity']:.2%} sparsity, drop {found['drop']:.2%}"
                    )
            lines.append(f"  chosen: {self.search.get('chosen')}, {self.search.get('evaluations')} evaluations")
        if self.sizes:
            lines.append("")
            lines.append("file size: " + ", ".join(f"{k} {v:,} bytes" for k, v in self.sizes.items()))
        if self.sparse_storage:
            moved = self.sparse_storage.get("moved", [])
            kept = self.sparse_storage.get("kept_dense", {})
            lines.append(f"sparse initializers: {len(moved)} moved, {len(kept)} kept dense")  # type: ignore[arg-type]
            for name, why in kept.items():  # type: ignore[union-attr]
                lines.append(f"  {name}: {why}")
        if self.verification is not None:
            status = "PASSED" if self.verification.ok else "FAILED"
            lines.append(f"verification {status}: {self.verification.error or 'loads and runs in ONNX Runtime'}")
            lines.extend(f"  {output.name}: {output.note}" for output in self.verification.outputs if output.note)
        lines.append(f"seconds: {self.seconds:.2f}")
        return "\n".join(lines)
