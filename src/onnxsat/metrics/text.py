"""The lines every budgeted pass's report prints about scores: which metric each output got, before and
after on the search data, and the held-out figure."""

from __future__ import annotations

from collections.abc import Mapping

from onnxsat.metrics.budget import HeldOut, Score


def summary_lines(
    data: str | None, baseline: Score | None, result: Score | None, held_out: HeldOut | None
) -> list[str]:
    """Two short lines for a pipeline's report: before -> after, and the held-out drop."""
    lines = []
    if baseline is not None and result is not None:
        lines.append(f"{baseline.kind} on {data}: {baseline.text()} -> {result.text()}")
    if held_out is not None:
        lines.append(f"held out {held_out_text(held_out)}")
    return lines


def held_out_text(held_out: HeldOut) -> str:
    """The held-out result with its verdict: where it was measured, before -> after, the drop, and whether
    the budget held there (what a reader of any report looks for first)."""
    if held_out.within_budget:
        verdict = "inside the budget"
    elif held_out.refuted and held_out.as_is:
        verdict = "OUTSIDE the budget; its metric gives no per-sample measure, so the drop is held as it is"
    elif held_out.refuted:
        verdict = "OUTSIDE the budget beyond its sampling error"
    else:
        verdict = "OUTSIDE the budget, within its sampling error"
    return (
        f"on {held_out.data} ({held_out.score.samples} samples the search never used): "
        f"{held_out.baseline.text()} -> {held_out.score.text()}, drop {held_out.drop:.2%} ({verdict})"
    )


def table_lines(
    data: str | None,
    metrics: Mapping[str, Mapping[str, str]],
    baseline: Score | None,
    result: Score | None,
    held_out: HeldOut | None,
) -> list[str]:
    """The report table's section: each scored output's metric and why, its value before and after with
    the finer figures, and the held-out line saying whether the budget held there."""
    lines: list[str] = []
    if metrics:
        lines += ["", "scored outputs:"]
        lines += [f"  {name}: {m['metric']} ({m['why']})" for name, m in metrics.items()]
    if baseline is not None and result is not None:
        lines += ["", f"{baseline.kind} on {data} ({baseline.samples} samples):"]
        for before, after in zip(baseline.outputs, result.outputs, strict=True):
            details = ", ".join(f"{k} {v:.4g}" for k, v in after.details.items())
            lines.append(
                f"  {before.output}: {before.metric} {before.value:.2%} -> {after.value:.2%}"
                + (f" ({details})" if details else "")
            )
    if held_out is not None:
        lines.append(f"held out {held_out_text(held_out)}")
    return lines
