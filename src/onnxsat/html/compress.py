"""``onnxsat compress --html``: the Pareto front of speed against accuracy drop over every candidate, the
chosen recipe and what each technique added, accuracy (held-out too), latency, sizes."""

from __future__ import annotations

from onnxsat.compression.report import CompressReport
from onnxsat.html.charts import pareto_scatter
from onnxsat.html.page import Page
from onnxsat.html.scores import add_outcome, held_out_facts
from onnxsat.latency import latency_phrase


def compress_page(report: CompressReport) -> Page:
    page = Page("ONNXSat compress", f"{report.input} -> {report.output or '(not written)'}")
    facts = [
        ("input", report.input),
        ("output", report.output or "not written"),
        ("chosen", report.chosen or "nothing"),
        ("budget", f"drop at most {report.max_drop:.2%} on {report.data}"),
        ("candidates", f"{len(report.candidates)}, built and scored on {report.evaluated_on}"),
        ("seconds", f"{report.seconds:.1f}" + (" (stopped by the time budget)" if report.stopped_early else "")),
    ]
    if report.latency:
        facts.append(("latency", latency_phrase(report.latency, "original_ms", "compressed_ms", report.latency_where)))
    facts += held_out_facts(report.held_out)
    if report.recipe_path:
        facts.append(("recipe", f"{report.recipe_path} (onnxsat run rebuilds the model from it)"))
    page.facts(facts)
    timed = [r for r in report.candidates if r.speedup is not None and r.drop is not None]
    if timed:
        chosen = next((r for r in reversed(timed) if r.label == report.chosen), None)
        page.heading("Speed against accuracy")
        page.figure(
            pareto_scatter(
                [(r.drop * 100, r.speedup, r.pareto) for r in timed],  # type: ignore[operator]
                (chosen.drop * 100, chosen.speedup) if chosen is not None else None,  # type: ignore[operator]
                report.max_drop * 100,
                "accuracy drop on the search data (points)",
                "speedup over the original (x)",
                "every timed candidate",
            ),
            alt="scatter plot of speedup against accuracy drop for every timed candidate",
            caption="Each point is a candidate timed side by side with the original; the line joins the Pareto "
            "front, the dashed line is the budget.",
        )
    if report.contributions:
        page.heading("What each technique added")
        page.table(
            ["step", "speedup (cumulative)", "bytes", "drop"],
            [
                (c.step, f"{c.speedup:.2f}x", c.size, f"{c.drop:.2%}" if c.drop is not None else "-")
                for c in report.contributions
            ],
        )
    if report.candidates:
        page.heading("Every candidate")
        page.table(
            ["#", "stage", "recipe", "drop", f"bound ({report.confidence:.0%})", "speedup", "bytes", "front", "note"],
            [
                (
                    r.index,
                    r.stage,
                    r.label,
                    f"{r.drop:.2%}" if r.drop is not None else "-",
                    f"{r.bound:.2%}" if r.bound is not None else "-",
                    f"{r.speedup:.2f}x" if r.speedup is not None else "-",
                    r.size,
                    "yes" if r.pareto else "",
                    r.error or ("" if r.within_budget else "over the budget"),
                )
                for r in report.candidates
            ],
        )
    add_outcome(page, report)
    return page
