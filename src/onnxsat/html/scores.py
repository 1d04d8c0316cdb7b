"""The accuracy section every budgeted pass's page shares: scored outputs, their metrics, before and
after on the search data, and the held-out figure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnxsat.html.charts import grouped_bars
from onnxsat.html.page import Page
from onnxsat.html.verification import add_verification
from onnxsat.metrics import HeldOut, Score
from onnxsat.metrics.text import held_out_text


def held_out_facts(held_out: HeldOut | None) -> list[tuple[str, str]]:
    """The summary's line for the held-out result and its verdict (none without one): the figure the search
    could not flatter belongs beside the speedup, not only in the accuracy section."""
    return [] if held_out is None else [("held out", held_out_text(held_out))]


def add_scores(
    page: Page,
    data: str | None,
    metrics: Mapping[str, Mapping[str, str]],
    before: Score | None,
    after: Score | None,
    held_out: HeldOut | None = None,
) -> None:
    """The section, when the report has scores before and after; ``held_out``: the result on data the
    search never used."""
    if before is None or after is None:
        return
    page.heading("Accuracy")
    page.paragraph(f"{before.kind} on {data} ({before.samples} samples).")
    if metrics:
        page.table(["output", "metric", "why"], [(name, m["metric"], m["why"]) for name, m in metrics.items()])
    rows = []
    for base, result in zip(before.outputs, after.outputs, strict=True):
        details = ", ".join(f"{k} {v:.4g}" for k, v in result.details.items())
        rows.append(
            (
                base.output,
                base.metric,
                f"{base.value:.2%}",
                f"{result.value:.2%}",
                f"{base.value - result.value:.2%}",
                details,
            )
        )
    page.table(["output", "metric", "original", "result", "drop", "details"], rows)
    labels = [f"{o.output} ({o.metric})" for o in before.outputs]
    values = {"original": [100 * o.value for o in before.outputs], "result": [100 * o.value for o in after.outputs]}
    if held_out is not None:
        page.paragraph(f"Held out {held_out_text(held_out)}.", note=not held_out.within_budget)
        values["result (held out)"] = [100 * o.value for o in held_out.score.outputs]
    page.figure(
        grouped_bars(labels, values, f"{before.kind} (%)", f"{before.kind.capitalize()} before and after"),
        alt=f"bar chart of {before.kind} before and after",
    )


def add_outcome(page: Page, report: Any, passed_means: str = "loads and runs in ONNX Runtime") -> None:
    """How a budgeted pass's page ends (quantize, compress): its notes, the accuracy section, file sizes
    and the verification; ``report`` has those fields under the names every such report uses."""
    for note in report.notes:
        page.paragraph(f"Note: {note}", note=True)
    add_scores(page, report.data, report.metrics, report.baseline, report.accuracy, report.held_out)
    if report.sizes:
        page.heading("File size")
        page.table(["model", "bytes"], list(report.sizes.items()))
    add_verification(page, report.verification, passed_means)
