"""One e-graph made ready once and searched many times: for the many small bodies of a model's control flow."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from egglog import EGraph, Schedule

from onnxsat.eqsat.encode import declare_language
from onnxsat.eqsat.rules import RuleSchedule, rulesets_for
from onnxsat.eqsat.saturate import ANALYSIS_SCHEDULE, Runs, SaturationStats


class WarmEGraph:
    """One e-graph whose language and rules are declared, translated and compiled once, searched many times.

    A fresh e-graph costs about 0.2-0.8 s before its first match (declaring the language, translating and
    compiling each rule family), which a model's many small If, Loop and Scan bodies would each pay. Every
    search runs on a copy pushed on egglog's stack and popped afterwards, so each starts from the empty
    e-graph with its rules ready.
    """

    def __init__(self, schedule: RuleSchedule) -> None:
        self.egraph = EGraph()
        declare_language(self.egraph)
        self.translated: dict[int, tuple[Schedule, object]] = {}
        runs = Runs(self.egraph, SaturationStats(), self.translated)
        for ruleset in [ANALYSIS_SCHEDULE, *schedule.simplify, *schedule.grow]:
            runs.timed("warm-up", ruleset)

    @contextmanager
    def scratch(self) -> Iterator[EGraph]:
        """The e-graph for one search; everything added to it is gone when the block ends."""
        known = set(self.translated)
        self.egraph.push()
        try:
            yield self.egraph
        finally:
            self.egraph.pop()
            for key in set(self.translated) - known:  # translated after the push: its declarations are gone
                del self.translated[key]


@functools.cache
def warm_egraph(target: str) -> WarmEGraph:
    """The process's ready e-graph for ``target``'s rules, made on first use (about 1.5 s) and kept."""
    return WarmEGraph(rulesets_for(target))
