"""``onnxsat bench compare --html`` and ``bench experiment --html``: the benchmark tables and their charts."""

from __future__ import annotations

from collections.abc import Sequence

from onnxsat.bench.compare import (
    NOISE_CONFIDENCE,
    CompareSettings,
    ModelComparison,
    Variant,
    noise_line,
    settings_line,
    speedup_summary,
)
from onnxsat.html.charts import grouped_bars
from onnxsat.html.page import Page


def _row(comparison: ModelComparison, variant: Variant) -> tuple[object, ...]:
    diff = None if variant.max_abs_diff is None else f"{variant.max_abs_diff:.1e}"
    if variant.outputs_match is False:
        diff = f"{diff or ''} MISMATCH {variant.diff_note}".strip()
    if variant.status != "ok":
        return (variant.name, None, None, None, None, None, None, f"skipped: {variant.reason}", None)
    if not variant.timed:
        return (variant.name, variant.nodes, variant.optimize_seconds, None, None, None, None, "", diff)
    low, high = variant.interval
    return (
        variant.name,
        variant.nodes,
        variant.optimize_seconds,
        variant.median_ms,
        variant.p95_ms,
        f"{variant.speedup:.3f}x",
        f"{low:.3f}-{high:.3f}",
        comparison.verdict(variant),
        diff,
    )


def compare_page(comparisons: Sequence[ModelComparison], settings: CompareSettings, environment: str) -> Page:
    page = Page("ONNXSat bench compare", environment)
    page.paragraph(settings_line(settings))
    page.paragraph(
        'Speedup: median over rounds of ("original, ORT all" time / variant time); every round runs each session '
        "once, in rotating order.",
        note=True,
    )
    header = [
        "variant",
        "nodes",
        "optimize s",
        "median ms",
        "p95 ms",
        "speedup",
        f"{NOISE_CONFIDENCE:.0%} CI",
        "verdict",
        "max |diff|",
    ]
    for comparison in comparisons:
        page.heading(f"{comparison.label}")
        page.paragraph(f"{comparison.path}: inputs {comparison.inputs}")
        page.table(
            header,
            [_row(comparison, v) for v in comparison.variants],
            bad_rows=[i for i, v in enumerate(comparison.variants) if v.outputs_match is False],
        )
        page.paragraph(noise_line(comparison), note=True)
        if comparison.constant_outputs:
            page.paragraph(
                "Warning: every output of the original is one value repeated on these inputs, so output "
                "differences show little.",
                note=True,
            )
        timed = [v for v in comparison.variants if v.timed]
        if timed:
            page.figure(
                grouped_bars(
                    [v.name for v in timed],
                    {"speedup": [v.speedup for v in timed]},
                    '"original, ORT all" time / variant time',
                    f"{comparison.label}: speedup per variant",
                    reference=1.0,
                ),
                alt=f"bar chart of speedup per variant for {comparison.label}",
            )
    summary = speedup_summary(comparisons)
    if summary:
        page.heading("Summary")
        page.table(["variant", "geometric mean speedup", "models"], [(n, f"{m:.3f}x", c) for n, m, c in summary])
        page.figure(
            grouped_bars(
                [name for name, _, _ in summary],
                {"geometric mean speedup": [mean for _, mean, _ in summary]},
                "speedup",
                "Geometric mean speedup over the models",
                reference=1.0,
            ),
            alt="bar chart of the geometric mean speedup per variant",
        )
    failed = [c.label for c in comparisons if not c.onnxsat_ok]
    if failed:
        page.status(False, f"ONNXSat failed or does not match the original on: {', '.join(failed)}")
    return page


def _split_row(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a literal bar, as ``markdown_table`` writes it)."""
    cells = line.strip().strip("|").replace("\\|", "\0").split("|")
    return [cell.strip().replace("\0", "|") for cell in cells]


def add_markdown(page: Page, markdown: str) -> None:
    """The Markdown the benchmarks write (headings, paragraphs, bullets, pipe tables) as page blocks.

    Only that subset: it is ONNXSat's own output, so a general Markdown library would add a dependency
    for syntax these documents never use."""
    table: list[list[str]] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            cells = _split_row(line)
            if not all(set(cell) <= set(":-") and cell for cell in cells):  # skip the |---| rule
                table.append(cells)
            continue
        if table:
            page.table(table[0], table[1:])
            table = []
        text = line.strip()
        if text.startswith("#"):
            level = len(text) - len(text.lstrip("#"))
            page.heading(text[level:].strip(), min(level + 1, 4))
        elif text:
            page.paragraph(text.removeprefix("- "))


def experiment_page(markdown: str, figures: Sequence[tuple[str, bytes]]) -> Page:
    """``bench experiment``'s write-up and its PNG plots ((file name, bytes) each)."""
    page = Page("ONNXSat bench experiment")
    add_markdown(page, markdown)
    if figures:
        page.heading("Figures")
    for name, data in figures:
        page.image(data, "image/png", alt=name, caption=name)
    return page
