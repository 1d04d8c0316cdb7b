"""``onnxsat optimize --html``: the report's tables, node counts as a chart, and the two graphs."""

from __future__ import annotations

from pathlib import Path

import onnx

from onnxsat.html.charts import grouped_bars
from onnxsat.html.graphs import add_comparison
from onnxsat.html.page import Page
from onnxsat.html.verification import add_verification
from onnxsat.model_io import load_model
from onnxsat.report import LatencyComparison, OptimizeReport


def optimize_page(
    report: OptimizeReport, original: onnx.ModelProto | None = None, optimized: onnx.ModelProto | None = None
) -> Page:
    """The page for one optimize run; the graph picture needs both models (the result only if written)."""
    before, after = sum(report.nodes_before.values()), sum(report.nodes_after.values())
    page = Page("ONNXSat optimize", f"{report.input} -> {report.output or '(not written)'}")
    page.facts(
        [
            ("input", report.input),
            ("output", report.output or "not written"),
            ("target", report.target),
            ("cost model", report.cost_model),
            ("nodes", f"{before:,} -> {after:,}"),
            ("fusions", sum(report.fusions.values())),
            ("dead nodes removed", report.dead_nodes_removed),
        ]
    )
    page.heading("Nodes per op type")
    ops = sorted(set(report.nodes_before) | set(report.nodes_after))
    rows = [(op, report.nodes_before.get(op, 0), report.nodes_after.get(op, 0)) for op in ops]
    page.table(["op type", "before", "after", "change"], [(*row, row[2] - row[1]) for row in rows])
    page.figure(
        grouped_bars(
            ops, {"before": [r[1] for r in rows], "after": [r[2] for r in rows]}, "nodes", "Nodes per op type"
        ),
        alt="bar chart of nodes per op type before and after",
    )
    page.heading("Fusions in the result")
    if report.fusions:
        page.table(["fusion", "count"], sorted(report.fusions.items()))
    else:
        page.paragraph("None.")
    if report.specialised or report.control_flow:
        _control_flow_section(page, report)
    page.heading("E-graph")
    graph = report.egraph
    page.table(
        ["e-nodes before", "e-nodes after", "e-classes", "iterations", "stopped"],
        [
            (
                _int(graph.get("enodes_before")),
                _int(graph.get("enodes_after")),
                _int(graph.get("eclasses")),
                _int(graph.get("iterations")),
                str(graph.get("stop_reason", "?")),
            )
        ],
    )
    page.table(["phase", "seconds"], list(report.phases.items()))
    if report.rule_seconds:
        page.table(
            ["rule family", "saturation seconds", "of which search+apply (egglog)"],
            [(t["family"], t["seconds"], t["search_apply_seconds"]) for t in report.rule_seconds],
        )
    add_verification(page, report.verification)
    if report.latency:
        add_latency_table(page, "Latency under ONNX Runtime", report.latency, "optimized")
        page.figure(
            grouped_bars(
                [x.ort_level for x in report.latency],
                {
                    "original": [x.original_ms for x in report.latency],
                    "optimized": [x.optimized_ms for x in report.latency],
                },
                "median ms",
                "Latency, original vs optimized",
            ),
            alt="bar chart of latency, original and optimized",
        )
    if original is not None and optimized is not None:
        page.heading("Graph before and after")
        titles = (Path(report.input).name, Path(report.output or "result").name)
        add_comparison(page, original, optimized, titles, report.fusions)
    return page


def add_latency_table(page: Page, heading: str, latency: list[LatencyComparison], result: str) -> None:
    """Side-by-side latencies (``onnxsat optimize --latency``, ``prune --latency``), the new model called
    ``result``."""
    page.heading(heading)
    page.table(
        ["ORT level", "threads", "pairs", "original ms", f"{result} ms", "speedup"],
        [(x.ort_level, x.threads, x.pairs, x.original_ms, x.optimized_ms, x.speedup) for x in latency],
    )


def _control_flow_section(page: Page, report: OptimizeReport) -> None:
    """What was fixed with --specialize, settled, rewritten inside bodies and moved into them."""
    page.heading("Control flow")
    for note in report.specialised:
        page.paragraph(f"Specialised: {note}.")
    flow = report.control_flow
    if not flow:
        return
    bodies = flow["bodies"]
    page.table(
        ["what", "count"],
        [
            *((f"{op} settled to its taken path", count) for op, count in sorted(flow["settled"].items())),
            ("bodies rewritten", bodies["rewritten"]),
            ("of which verified on their own", bodies["verified"]),
            ("of which verified only within the model", bodies["unverifiable"]),
            ("bodies kept as they were (their rewrite did not verify)", len(bodies["refused"])),
            ("bodies left alone (one node, or an untyped capture)", bodies["skipped"]),
            ("nodes inside bodies, before", bodies["nodes_before"]),
            ("nodes inside bodies, after", bodies["nodes_after"]),
            ("weights moved into the bodies that read them", flow["constants_moved_into_bodies"]),
        ],
    )
    for reason in bodies["refused"]:
        page.paragraph(f"Kept as it was: {reason}")


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def optimize_page_from_files(report: OptimizeReport) -> Page:
    """``optimize_page`` with the models read back from the report's paths (structure only: external
    weights stay on disk); the result only if it was written."""
    optimized = load_model(report.output) if report.written and report.output else None
    return optimize_page(report, load_model(report.input), optimized)
