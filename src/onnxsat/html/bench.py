"""``bench experiment --html``: a benchmark's Markdown write-up and its plots as a page.

``bench compare --html`` builds its page in ``bench/compare.py`` (bench sits above html: a page module
renders what it is given and imports no benchmark)."""

from __future__ import annotations

from collections.abc import Sequence

from onnxsat.html.page import Page


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
