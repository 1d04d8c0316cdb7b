"""What ``onnxsat compress`` did: every candidate it evaluated, the Pareto front of latency against
accuracy, the chosen recipe and what each of its techniques contributed; a table and JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from onnxsat.core import ReportBase
from onnxsat.data.sources import Dataset
from onnxsat.latency import latency_phrase
from onnxsat.metrics import HeldOut, Score, with_score_headlines
from onnxsat.metrics.text import summary_lines, table_lines
from onnxsat.verification import VerificationResult


@dataclass
class CandidateRow:
    """One evaluated candidate: its recipe, accuracy on the search data, and speed where it was timed."""

    index: int
    stage: str
    """The search stage that proposed it (sensitivity, prune, quantize, refine, fuse)."""
    label: str
    recipe: dict[str, Any]
    drop: float | None = None
    bound: float | None = None
    """The drop the budget was held against: ``drop`` plus the sampling error at ``--confidence``."""
    value: float | None = None
    """The worst scored output's metric value on the search data."""
    within_budget: bool = False
    speedup: float | None = None
    """Original's time / this one's, ORT all optimizations, side by side on the machine that runs compress."""
    latency_ms: float | None = None
    size: int = 0
    seconds: float = 0.0
    """Build and scoring time in its worker."""
    error: str | None = None
    pareto: bool = False
    """On the front: no other timed candidate is both faster and more accurate."""


@dataclass
class Contribution:
    """One step of the chosen recipe and the speed it reached (cumulative, side by side)."""

    step: str
    speedup: float
    drop: float | None
    size: int


@dataclass
class CompressReport(ReportBase):
    input: str
    output: str | None
    max_drop: float
    confidence: float = 0.5
    """How sure a candidate had to be to count as inside ``max_drop`` (see ``Score.bound``)."""
    data: str | None = None
    metric: str | None = None
    metrics: dict[str, dict[str, str]] = field(default_factory=dict)
    baseline: Score | None = None
    accuracy: Score | None = None
    held_out: HeldOut | None = None
    chosen: str | None = None
    """The chosen recipe's label."""
    recipe: list[dict[str, Any]] = field(default_factory=list)
    """The chosen recipe as pipeline entries (written beside the model as a pipeline file)."""
    recipe_path: str | None = None
    candidates: list[CandidateRow] = field(default_factory=list)
    contributions: list[Contribution] = field(default_factory=list)
    latency: dict[str, float] = field(default_factory=dict)
    """original_ms, compressed_ms, speedup, threads, batch: ORT all optimizations, interleaved rounds."""
    latency_where: str = ""
    """The machine every latency figure was measured on."""
    evaluated_on: str = ""
    """Where candidates were built and scored (the executor)."""
    sizes: dict[str, int] = field(default_factory=dict)
    stopped_early: bool = False
    """The time budget ran out before the search was done: the best model found so far."""
    notes: list[str] = field(default_factory=list)
    verification: VerificationResult | None = None
    seconds: float = 0.0
    written: bool = False
    fitted_on: str | None = None
    """The samples pruning refitted on, when not those scored (``data``)."""
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    """The sizes of dynamic inputs every run used (``--input-shape``, and the data input's as its samples):
    the recipe gives them, so that its replay runs the model as the search did."""
    search_data: Dataset | None = field(default=None, repr=False)
    """Every search sample, which quantization calibrated on (and pruning refitted on, with no ``fit_data``)."""
    fit_data: Dataset | None = field(default=None, repr=False)
    """The part of them pruning refitted on, when set apart. Both are written beside the recipe so it replays
    exactly (neither is part of the JSON)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, search_data=None, fit_data=None))
        data.pop("search_data")
        data.pop("fit_data")
        return with_score_headlines(data, self.baseline, self.accuracy, self.held_out)

    def summary(self) -> list[str]:
        lines = [f"chosen: {self.chosen or 'nothing'} ({len(self.candidates)} candidates evaluated)"]
        if self.latency:
            lines.append("latency " + latency_phrase(self.latency, "original_ms", "compressed_ms"))
        lines += summary_lines(self.data, self.baseline, self.accuracy, self.held_out)
        return lines + self.notes

    def to_table(self) -> str:
        lines = [f"ONNXSat compress  {self.input} -> {self.output or '(not written)'}"]
        lines.append(
            f"budget: drop at most {self.max_drop:.2%} at {self.confidence:.0%} confidence; candidates built and "
            f"scored on {self.evaluated_on}"
        )
        if self.candidates:
            lines += ["", f"{'#':>3} {'stage':<12}{'drop':>8}{'bound':>8}{'speedup':>9}{'size':>12}  recipe"]
            for row in self.candidates:
                drop = f"{row.drop:.2%}" if row.drop is not None else "-"
                bound = f"{row.bound:.2%}" if row.bound is not None else "-"
                speed = f"{row.speedup:.2f}x" if row.speedup is not None else "-"
                mark = "*" if row.pareto else " "
                tail = f"  ({row.error})" if row.error else ("" if row.within_budget else "  (over the budget)")
                figures = f"{drop:>8}{bound:>8}{speed:>9}{row.size:>12,}{mark}"
                lines.append(f"{row.index:>3} {row.stage:<12}{figures} {row.label}{tail}")
            lines.append("    (* on the Pareto front of speed and accuracy; bound: the drop plus its sampling error")
            lines.append(f"     at {self.confidence:.0%} confidence, which the budget is held against)")
        lines += ["", f"chosen: {self.chosen or 'nothing'}"]
        if self.contributions:
            lines.append("what each step adds (cumulative, side by side with the original):")
            for c in self.contributions:
                drop = f"drop {c.drop:.2%}" if c.drop is not None else ""
                lines.append(f"  {c.step:<44}{c.speedup:>7.2f}x  {c.size:>10,} bytes  {drop}")
        lines += table_lines(self.data, self.metrics, self.baseline, self.accuracy, self.held_out)
        if self.fitted_on:
            lines.append(f"pruning refitted on {self.fitted_on}")
        if self.latency:
            phrase = latency_phrase(self.latency, "original_ms", "compressed_ms", self.latency_where)
            lines.append("latency, original -> compressed: " + phrase)
        if self.sizes:
            lines.append("file size: " + ", ".join(f"{k} {v:,} bytes" for k, v in self.sizes.items()))
        if self.recipe_path:
            lines.append(f"recipe: {self.recipe_path} (`onnxsat run {self.recipe_path}` rebuilds this model)")
        if self.stopped_early:
            lines.append("stopped early: the time budget ran out; this is the best model found by then")
        lines.extend(f"note: {note}" for note in self.notes)
        if self.verification is not None:
            status = "PASSED" if self.verification.ok else "FAILED"
            lines.append(f"verification {status}: {self.verification.error or 'loads and runs in ONNX Runtime'}")
        lines.append(f"seconds: {self.seconds:.2f}")
        return "\n".join(lines)


def mark_pareto(rows: list[CandidateRow]) -> None:
    """Flag the timed candidates no other timed candidate beats on both speed and accuracy."""
    timed = [r for r in rows if r.speedup is not None and r.value is not None]
    for row in timed:
        row.pareto = not any(
            other is not row
            and other.speedup >= row.speedup  # type: ignore[operator]
            and other.value >= row.value  # type: ignore[operator]
            and (other.speedup > row.speedup or other.value > row.value)  # type: ignore[operator]
            for other in timed
        )
