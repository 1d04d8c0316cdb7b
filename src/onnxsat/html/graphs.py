"""The before/after graph picture a page embeds, or the reason it has none.

A page is written after the command's real work is done, so a missing Graphviz or a graph too large to
draw must not fail the command: the page says why the picture is absent and how to get it.
"""

from __future__ import annotations

import onnx

from onnxsat.html.page import Page
from onnxsat.show.graph import compare_dot
from onnxsat.show.render import INSTALL_HINT, dot_available, render

PICTURE_MAX_NODES = 300
"""Largest graph drawn into a page: past it the SVG runs to megabytes and the boxes are unreadable at
page width; ``onnxsat show`` draws larger graphs on their own."""


def add_comparison(
    page: Page,
    original: onnx.ModelProto,
    result: onnx.ModelProto,
    titles: tuple[str, str],
    fusions: dict[str, int] | None = None,
) -> None:
    """The two graphs side by side, fused nodes highlighted (``onnxsat show --compare``'s picture)."""
    largest = max(len(original.graph.node), len(result.graph.node))
    if largest > PICTURE_MAX_NODES:
        page.paragraph(
            f"No graph picture: the graph has {largest} nodes, more than the {PICTURE_MAX_NODES} a page draws; "
            "`onnxsat show MODEL --compare RESULT -o graph.svg` draws it on its own.",
            note=True,
        )
        return
    if not dot_available():
        page.paragraph(f"No graph picture: {INSTALL_HINT}.", note=True)
        return
    dot, highlights = compare_dot(original, result, titles, fusions)
    page.image(
        render(dot, "svg"),
        "image/svg+xml",
        alt=f"graphs of {titles[0]} and {titles[1]}",
        caption=(
            f"Left: {titles[0]}; right: {titles[1]}. Filled in orange: {len(highlights.fused)} nodes that each "
            f"stand for several original ops; greyed: {len(highlights.removed)} original nodes the result "
            "no longer has."
        ),
    )
