"""``onnxsat prune --html`` and ``onnxsat bench prune --html``: channel groups, params and MACs, per setting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from onnxsat.html.charts import grouped_bars, horizontal_bars
from onnxsat.html.optimize import add_latency_table
from onnxsat.html.page import Page
from onnxsat.html.scores import add_scores
from onnxsat.html.verification import add_verification
from onnxsat.pruning.report import PruneReport


def prune_page(report: PruneReport) -> Page:
    page = Page("ONNXSat prune", f"{report.input} -> {report.output or '(not written)'}")
    pruned = [g for g in report.groups if g.status == "pruned"]
    page.facts(
        [
            ("input", report.input),
            ("output", report.output or "not written"),
            ("criterion", f"{report.criterion} ({report.mode})"),
            ("rate", f"{report.rate:g}"),
            ("groups pruned", f"{len(pruned)} of {len(report.groups)}"),
            ("seconds", f"{report.seconds:.2f}"),
        ]
    )
    page.heading("Size and compute")
    measures = [("parameters", report.params), ("MACs", report.macs), ("file bytes", report.sizes)]
    rows = [
        (what, values.get("original"), values.get("pruned"), _kept(values))
        for what, values in measures
        if values.get("original") is not None and values.get("pruned") is not None
    ]
    page.table(["measure", "original", "pruned", "kept"], rows)
    if rows:
        page.figure(
            grouped_bars(
                [row[0] for row in rows],
                {"pruned / original (%)": [100 * float(row[2]) / float(row[1] or 1) for row in rows]},
                "% of the original",
                "What pruning kept",
                reference=100.0,
            ),
            alt="bar chart of parameters, MACs and bytes kept",
        )
    add_scores(page, report.scored_on, report.metrics, report.baseline, report.accuracy)
    page.heading("Channel groups")
    page.table(
        ["group", "roots", "structure", "unit", "count", "kept", "status"],
        [(g.index, ", ".join(g.roots), g.structure, g.unit, g.channels, g.kept, g.status) for g in report.groups],
    )
    if pruned:
        page.figure(
            horizontal_bars(
                [", ".join(g.roots) for g in pruned],
                [100 * g.kept / g.channels if g.channels else 100.0 for g in pruned],
                "channels kept (%)",
                "Channels kept per pruned group",
            ),
            alt="bar chart of channels kept per pruned group",
        )
    if report.reconstruction:
        page.heading(f"Reconstruction on {report.data}")
        page.table(
            ["node", "relative error before", "after", "refitted", "on samples not solved on"],
            [(f.node, f.error_before, f.error_after, f.accepted, f.held_out) for f in report.reconstruction],
        )
    if report.latency:
        add_latency_table(page, "Latency, side by side", report.latency, "pruned")
    for note in report.notes:
        page.paragraph(f"Note: {note}", note=True)
    add_verification(page, report.verification, "passes the checker, runs in ONNX Runtime")
    return page


def _kept(values: dict[str, int] | dict[str, int | None]) -> str:
    before, after = values.get("original"), values.get("pruned")
    return f"{after / before:.1%}" if before and after is not None else "–"


class BenchPruneRow(Protocol):
    """What the page shows of one ``bench prune`` setting (``pruning.bench.BenchRow`` has these fields).

    A protocol, not an import: ``pruning.bench`` is a benchmark, above the pages, and a page renders
    what it is given without importing the code that measured it."""

    rate: float
    mode: str
    reconstruct: bool
    params: float
    macs: float | None
    speedup: float | None
    top1: float | None
    error: float
    cosine: float


@dataclass
class BenchPruneSection:
    """One model of ``bench prune``: its rows, what they were measured on, and the dense top-1 if labelled."""

    model: str
    measured: str
    rows: Sequence[BenchPruneRow]
    baseline_top1: float | None = None


def _setting(row: BenchPruneRow) -> str:
    return f"{row.rate:g} {row.mode}{' +refit' if row.reconstruct else ''}"


def bench_prune_page(sections: Sequence[BenchPruneSection]) -> Page:
    page = Page("ONNXSat bench prune", f"{len(sections)} model(s)")
    for section in sections:
        page.heading(section.model)
        page.paragraph(section.measured)
        rows = [
            (
                row.rate,
                row.mode,
                row.reconstruct,
                f"{row.params:.1%}",
                f"{row.macs:.1%}" if row.macs is not None else None,
                f"{row.speedup:.2f}x" if row.speedup is not None else None,
                f"{row.top1:.2%}" if row.top1 is not None else None,
                row.error,
                row.cosine,
            )
            for row in section.rows
        ]
        if section.baseline_top1 is not None:
            rows.insert(0, (0.0, "dense", None, "100%", "100%", "1.00x", f"{section.baseline_top1:.2%}", 0.0, 1.0))
        page.table(["rate", "mode", "reconstruct", "params", "MACs", "speedup", "top-1", "rel. error", "cosine"], rows)
        settings = [_setting(row) for row in section.rows]
        page.figure(
            grouped_bars(
                settings,
                {
                    "params (%)": [100 * row.params for row in section.rows],
                    "MACs (%)": [100 * (row.macs or 0.0) for row in section.rows],
                },
                "% of the dense model",
                f"{section.model}: what each setting kept",
            ),
            alt=f"bar chart of params and MACs kept per setting for {section.model}",
        )
        timed = [row for row in section.rows if row.speedup is not None]
        if timed:
            page.figure(
                grouped_bars(
                    [_setting(row) for row in timed],
                    {"speedup": [float(row.speedup or 0.0) for row in timed]},
                    "dense time / pruned time",
                    f"{section.model}: speedup under ONNX Runtime",
                    reference=1.0,
                ),
                alt=f"bar chart of speedup per setting for {section.model}",
            )
        page.figure(
            grouped_bars(
                settings,
                {"relative output error": [row.error for row in section.rows]},
                "median ||y - y_dense|| / ||y_dense||",
                f"{section.model}: output error per setting",
            ),
            alt=f"bar chart of output error per setting for {section.model}",
        )
    return page
