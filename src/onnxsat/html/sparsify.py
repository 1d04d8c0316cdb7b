"""``onnxsat sparsify --html``: sparsity per layer (table and chart), accuracy before and after, the search."""

from __future__ import annotations

from onnxsat.html.charts import horizontal_bars
from onnxsat.html.page import Page
from onnxsat.html.scores import add_scores, held_out_facts
from onnxsat.html.verification import add_verification
from onnxsat.sparsity.report import SparsifyReport


def sparsify_page(report: SparsifyReport) -> Page:
    page = Page("ONNXSat sparsify", f"{report.input} -> {report.output or '(not written)'}")
    level = "chosen by the budget search" if report.requested is None else f"{report.requested:.1%} requested"
    page.facts(
        [
            ("input", report.input),
            ("output", report.output or "not written"),
            ("method", report.method),
            ("level", level),
            ("sparsity reached", f"{report.overall:.2%} over {len(report.layers)} weights"),
            ("seconds", f"{report.seconds:.2f}"),
            *held_out_facts(report.held_out),
        ]
    )
    page.heading("Sparsity per weight")
    page.table(
        ["weight", "op", "shape", "params", "zeros before", "zeros after", "sparsity", "|w| cut"],
        [
            (
                layer.name,
                layer.op_type,
                "×".join(str(d) for d in layer.shape),
                layer.size,
                layer.zeros_before,
                layer.zeros_after,
                f"{layer.sparsity:.2%}",
                layer.threshold,
            )
            for layer in report.layers
        ],
    )
    if report.layers:
        page.figure(
            horizontal_bars(
                [layer.name for layer in report.layers],
                [100 * layer.sparsity for layer in report.layers],
                "sparsity (%)",
                f"Sparsity per weight (overall {report.overall:.1%})",
            ),
            alt="bar chart of sparsity per weight",
        )
    for note in report.notes:
        page.paragraph(f"Note: {note}", note=True)
    add_scores(page, report.data, report.metrics, report.baseline, report.accuracy, report.held_out)
    if report.search:
        _add_search(page, report)
    if report.sizes:
        page.heading("File size")
        page.table(["model", "bytes"], list(report.sizes.items()))
    kept = report.sparse_storage.get("kept_dense", {})
    if isinstance(kept, dict) and kept:
        page.table(["weight kept dense", "why"], [(str(name), str(why)) for name, why in kept.items()])
    add_verification(page, report.verification, "loads and runs in ONNX Runtime")
    return page


def _add_search(page: Page, report: SparsifyReport) -> None:
    page.heading("Budget search")
    budget = f"{report.max_drop:.2%}" if report.max_drop is not None else "?"
    page.paragraph(
        f"{report.metric} drop at most {budget}; chosen: {report.search.get('chosen')} "
        f"after {report.search.get('evaluations')} evaluations."
    )
    found = [(name, report.search.get(name)) for name in ("uniform", "per_layer")]
    page.table(
        ["search", "sparsity", "drop"],
        [
            (name.replace("_", "-"), f"{f['sparsity']:.2%}", f"{f['drop']:.2%}")
            for name, f in found
            if isinstance(f, dict)
        ],
    )
    trail = report.search.get("trail")
    if isinstance(trail, list) and trail:
        page.table(
            ["tried", "sparsity", "drop", "within budget"],
            [(what, f"{sparsity:.2%}", f"{drop:.2%}", fits) for what, sparsity, drop, fits in trail],
            caption="Within budget: the drop with its sampling error at the search's confidence, as the search "
            "held it.",
        )
