"""The op catalog: each op module registers its builders in its ``OpFamily``, with a draw weight and a first opset.

An op builder appends one op (or a short chain) to the graph being built, reading tensors from its pool; it returns
False when the graph so far offers it nothing to work on, and the generator draws again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tools.fuzz.graphs.builder import Builder

OpBuilder = Callable[[Builder], object]


@dataclass(frozen=True)
class Entry:
    """One registered op builder: the op it is named after, its first opset and its draw weight."""

    name: str
    opset: int
    weight: float
    build: OpBuilder


@dataclass
class OpFamily:
    """One op module's builders, in the order they were registered (part of what a seed means)."""

    entries: list[Entry] = field(default_factory=list)

    def register(self, name: str, weight: float = 1.0, opset: int = 7) -> Callable[[OpBuilder], OpBuilder]:
        """Register an op builder; it returns False when the graph so far offers it nothing to work on."""

        def add(builder: OpBuilder) -> OpBuilder:
            self.entries.append(Entry(name, opset, weight, builder))
            return builder

        return add


def weighted(families: Sequence[OpFamily], opset: int) -> list[OpBuilder]:
    """The builders ``opset`` allows, each repeated by its weight (a copy per 0.5): a uniform draw is a weighted one."""
    return [
        entry.build
        for family in families
        for entry in family.entries
        if entry.opset <= opset
        for _ in range(round(entry.weight * 2) or 1)
    ]
