"""``onnxsat quantize --html``: the modes tried, every quantizable node's decision, accuracy, latency, sizes."""

from __future__ import annotations

from onnxsat.html.page import Page
from onnxsat.html.scores import add_outcome, held_out_facts
from onnxsat.latency import latency_phrase
from onnxsat.quantization.report import QuantizeReport


def quantize_page(report: QuantizeReport) -> Page:
    page = Page("ONNXSat quantize", f"{report.input} -> {report.output or '(not written)'}")
    facts = [
        ("input", report.input),
        ("output", report.output or "not written"),
        ("mode", f"{report.mode} (chosen: {report.chosen or 'none'})"),
        ("seconds", f"{report.seconds:.2f}"),
    ]
    if report.latency:
        facts.append(("latency", latency_phrase(report.latency, "fp32_ms", "quantized_ms")))
    facts += held_out_facts(report.held_out)
    page.facts(facts)
    if report.trials:
        page.heading("Modes tried")
        page.table(
            ["mode", "quantized", "kept in float", "drop", "speedup", "seconds", "note"],
            [
                (
                    t.mode,
                    t.quantized,
                    t.kept,
                    f"{t.drop:.2%}" if t.drop is not None else "-",
                    f"{t.speedup:.2f}x" if t.speedup is not None else "-",
                    f"{t.seconds:.1f}",
                    "; ".join(filter(None, [t.error or t.note, t.worst_text()])),
                )
                for t in report.trials
            ],
        )
    if report.nodes:
        page.heading("Nodes")
        page.table(
            ["node", "op", "int8 speed alone", "damage alone", "decision"],
            [
                (
                    n.node,
                    n.op_type,
                    f"{n.speed:.2f}x" if n.speed is not None else "-",
                    f"{n.sensitivity:.3g}" if n.sensitivity is not None else "-",
                    "quantized" if n.quantized else f"float: {n.why}",
                )
                for n in report.nodes
            ],
        )
    add_outcome(page, report)
    return page
