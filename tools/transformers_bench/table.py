"""The side-by-side table: per model, each tool's optimize time, peak memory, e-graph and ORT-all speedup.

One Markdown table for every model so the issue's goals read off it directly: optimize under 10 s, peak
RSS under 1.5x the model file, and ONNXSat-then-ORT-all against ORT all on the original (speedup =
original's time / variant's time, per interleaved round, median and 90% bootstrap interval, as ``bench
compare`` measures it), with the geometric mean over BERT, ViT and GPT-2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from onnxsat.bench.compare import BASELINE, ModelComparison, Variant, noise_line
from onnxsat.timing import geometric_mean
from tools.transformers_bench.produce import Produced

GOAL_SECONDS = 10.0
GOAL_RSS_RATIO = 1.5
MB = 1e6
PHASE_ORDER = ("load", "check", "verify", "encode", "saturate", "extract", "decode", "save")
"""The order ``onnxsat optimize`` runs its phases in (its report stores them by name)."""

COLUMNS = (
    "model",
    "file MB",
    "variant",
    "optimize s",
    "peak RSS MB (x file)",
    "e-graph e-nodes",
    "ORT-all ms",
    "speedup vs ORT all (90% CI)",
    "outputs (max abs diff)",
)


@dataclass
class ModelBench:
    """One model's measurements: its file size, each tool's child run, and the timing comparison."""

    label: str
    file_bytes: int
    produced: list[Produced]
    comparison: ModelComparison
    model_types: dict[str, str] = field(default_factory=dict)
    """Peer -> the model type it was given (ORT's transformers optimizer)."""

    def variant(self, source: str) -> Variant | None:
        return self.comparison.variant(BASELINE if source == "original" else f"{source}, ORT all")


def _rss(produced: Produced, file_bytes: int) -> str:
    if produced.run is None:
        return "-"
    peak = produced.run.peak_rss_bytes
    return f"{peak / MB:.0f} ({peak / file_bytes:.2f}x)"


def _egraph(produced: Produced) -> str:
    egraph = produced.report.get("egraph")
    if not egraph:
        return "-"
    return f"{egraph['enodes_before']} → {egraph['enodes_after']} ({egraph['iterations']} it, {egraph['stop_reason']})"


def _timing(bench: ModelBench, variant: Variant | None) -> list[str]:
    if variant is None or not variant.timed:
        return ["-", "-"]
    if variant.name == BASELINE:
        return [f"{variant.median_ms:.1f}", "1 (baseline)"]
    low, high = variant.interval
    verdict = bench.comparison.verdict(variant)
    return [f"{variant.median_ms:.1f}", f"{variant.speedup:.3f}x ({low:.3f}-{high:.3f}) {verdict}"]


def _outputs(variant: Variant | None) -> str:
    if variant is None or variant.outputs_match is None:
        return "-"
    diff = "-" if variant.max_abs_diff is None else f"{variant.max_abs_diff:.1e}"
    return f"{'ok' if variant.outputs_match else 'MISMATCH'} ({diff})"


def _seconds(produced: Produced) -> str:
    seconds = f"{produced.run.seconds:.1f}" if produced.run is not None else "-"
    return seconds + (f" ({produced.own_seconds:.1f})" if produced.own_seconds is not None else "")


def _measured(produced: Produced) -> bool:
    """The child did the tool's work (a result, or a failure): its time and memory mean something.

    A peer that is not installed or does not apply only imported its package: no figures for it.
    """
    return produced.run is not None and (produced.path is not None or produced.reason.startswith("failed"))


def rows(bench: ModelBench) -> list[list[str]]:
    """The table's rows for one model: the original under ORT all, then each tool."""
    size = f"{bench.file_bytes / MB:.0f}"
    original = bench.variant("original")
    out = [[bench.label, size, "original", "-", "-", "-", *_timing(bench, original), _outputs(original)]]
    for produced in bench.produced:
        name = produced.source
        if name in bench.model_types:
            name += f" ({bench.model_types[name]})"
        variant = bench.variant(produced.source)
        figures = [_seconds(produced), _rss(produced, bench.file_bytes)] if _measured(produced) else ["-", "-"]
        if produced.path is None or variant is None or variant.status != "ok":
            reason = produced.reason or (variant.reason if variant is not None else "")
            out.append(["", "", name, *figures, "-", "-", f"skipped: {reason}", "-"])
            continue
        out.append(["", "", name, *figures, _egraph(produced), *_timing(bench, variant), _outputs(variant)])
    return out


def markdown_table(benches: Sequence[ModelBench]) -> list[str]:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "| --- | ---: | --- | " + " | ".join("---:" for _ in COLUMNS[3:]) + " |",
    ]
    for bench in benches:
        for row in rows(bench):
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return lines


def geomean_line(benches: Sequence[ModelBench], labels: Sequence[str], source: str) -> str | None:
    """The geometric mean of one tool's speedup over the models named ``labels`` that it was timed on."""
    values = []
    for bench in benches:
        variant = bench.variant(source)
        if bench.label in labels and variant is not None and variant.timed:
            values.append((bench.label, variant.speedup))
    if not values:
        return None
    names = ", ".join(label for label, _ in values)
    mean = geometric_mean([speedup for _, speedup in values])
    return f"{source}: geometric mean of the speedup vs ORT all over {names}: {mean:.3f}x"


def goal_lines(benches: Sequence[ModelBench]) -> list[str]:
    """ONNXSat's goals per model: optimize under 10 s, peak RSS under 1.5x the file, outputs within tolerance."""
    lines = []
    for bench in benches:
        onnxsat = next((p for p in bench.produced if p.source == "onnxsat"), None)
        if onnxsat is None or onnxsat.run is None or onnxsat.path is None:
            lines.append(f"{bench.label}: ONNXSat made no model ({onnxsat.reason if onnxsat else 'not run'})")
            continue
        ratio = onnxsat.run.peak_rss_bytes / bench.file_bytes
        time_ok = "met" if onnxsat.run.seconds < GOAL_SECONDS else "NOT met"
        rss_ok = "met" if ratio < GOAL_RSS_RATIO else "NOT met"
        verified = onnxsat.report.get("verification", {}).get("ok")
        lines.append(
            f"{bench.label}: optimize {onnxsat.run.seconds:.1f} s < {GOAL_SECONDS:g} s {time_ok}; peak RSS "
            f"{ratio:.2f}x the file < {GOAL_RSS_RATIO}x {rss_ok}; onnxsat's own verification "
            f"{'passed' if verified else 'did not pass'}; ORT-off result matches: {bench.comparison.onnxsat_ok}"
        )
    return lines


def phase_lines(benches: Sequence[ModelBench]) -> list[str]:
    """ONNXSat's phase seconds from its report, so a slow optimize shows where the time went."""
    lines = []
    for bench in benches:
        onnxsat = next((p for p in bench.produced if p.source == "onnxsat"), None)
        phases = onnxsat.report.get("phases", {}) if onnxsat else {}
        ordered = sorted(phases, key=lambda name: PHASE_ORDER.index(name) if name in PHASE_ORDER else len(PHASE_ORDER))
        if phases:
            lines.append(f"{bench.label}: " + ", ".join(f"{name} {phases[name]:.2f}" for name in ordered))
    return lines


def notes(benches: Sequence[ModelBench]) -> list[str]:
    """The noise band of every model (a second session of the original, timed like any variant)."""
    return [f"{bench.label}: {noise_line(bench.comparison)}" for bench in benches]
