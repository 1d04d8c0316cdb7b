"""The bar charts the HTML pages embed, drawn with matplotlib on its Agg canvas (no display, no pyplot).

Every report's figures are comparisons of a few quantities (before/after, per layer, per setting), so
two kinds of chart cover them: grouped vertical bars and horizontal bars for long lists of names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from onnxsat.extras import require

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2")
MAX_BARS = 60
"""Bars per chart before the rest are left out (the table beside it still lists every row)."""


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib figure on the Agg canvas: no pyplot, so no global backend or state is touched.

    matplotlib is optional (extra ``report``) and imported here, when a figure is drawn: a command that
    draws nothing runs without it, and one that does says which extra to install.
    """
    backend = require("matplotlib.backends.backend_agg", "--html pages and plots")
    figure = require("matplotlib.figure", "--html pages and plots").Figure(
        figsize=(width, height), layout="constrained"
    )
    backend.FigureCanvasAgg(figure)
    return figure


def grouped_bars(
    categories: Sequence[str],
    series: dict[str, Sequence[float]],
    ylabel: str,
    title: str,
    reference: float | None = None,
) -> Figure:
    """One group of bars per category, one bar per series; ``reference`` draws a dashed line (1.0x)."""
    shown = list(categories)[:MAX_BARS]
    width = max(5.0, min(16.0, 1.0 + 0.45 * len(shown) * max(1, len(series))))
    figure = new_figure(width, 3.6)
    axes = figure.add_subplot()
    bar = 0.8 / max(1, len(series))
    for index, (name, values) in enumerate(series.items()):
        positions = [i + (index - (len(series) - 1) / 2) * bar for i in range(len(shown))]
        axes.bar(positions, list(values)[: len(shown)], bar, label=name, color=COLOURS[index % len(COLOURS)])
    if reference is not None:
        axes.axhline(reference, color="#333333", linestyle="--", linewidth=1)
    axes.set_xticks(
        range(len(shown)), shown, rotation=30 if len(shown) > 4 else 0, ha="right" if len(shown) > 4 else "center"
    )
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if len(series) > 1:
        axes.legend()
    axes.grid(axis="y", alpha=0.3)
    return figure


def horizontal_bars(names: Sequence[str], values: Sequence[float], xlabel: str, title: str) -> Figure:
    """One bar per name, top to bottom in the given order (per-layer sparsity, per-group kept channels)."""
    shown = list(names)[:MAX_BARS]
    figure = new_figure(8.0, max(2.0, 0.6 + 0.28 * len(shown)))
    axes = figure.add_subplot()
    positions = list(range(len(shown)))
    axes.barh(positions, list(values)[: len(shown)], color=COLOURS[0])
    axes.set_yticks(positions, [name if len(name) <= 40 else name[:18] + "…" + name[-18:] for name in shown])
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    axes.grid(axis="x", alpha=0.3)
    return figure


def pareto_scatter(
    points: Sequence[tuple[float, float, bool]],
    chosen: tuple[float, float] | None,
    budget: float,
    xlabel: str,
    ylabel: str,
    title: str,
) -> Figure:
    """Candidates as (x, y, on the front) points, the front joined by a step line, the chosen one ringed
    and the budget a dashed vertical line at ``budget``."""
    figure = new_figure(7.0, 4.2)
    axes = figure.add_subplot()
    others = [(x, y) for x, y, front in points if not front]
    front = sorted((x, y) for x, y, on in points if on)
    if others:
        axes.scatter(*zip(*others, strict=True), color=COLOURS[0], alpha=0.6, label="candidates")
    if front:
        axes.plot(*zip(*front, strict=True), color=COLOURS[1], marker="o", drawstyle="steps-post", label="Pareto front")
    if chosen is not None:
        axes.scatter([chosen[0]], [chosen[1]], s=180, facecolors="none", edgecolors=COLOURS[3], linewidths=2,
                     label="chosen")  # fmt: skip
    axes.axvline(budget, color="#333333", linestyle="--", linewidth=1, label="budget")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    return figure
