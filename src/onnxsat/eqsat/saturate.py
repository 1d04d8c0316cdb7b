"""Run rule sets over an encoded e-graph until nothing changes or a limit is reached.

Each iteration runs the cheap simplifying families (with the analysis rules) once, then each
growing family once under back-off: a family that matches more than its budget is banned for a while,
so one explosive family cannot starve the others or flood the e-graph. The limits
(iterations, e-nodes, seconds, resident memory) end the search cleanly between iterations, and the
stats say which one stopped it. Stopping early is always sound: every form in the e-graph is
equivalent to the input, so extraction simply has fewer alternatives to choose from.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from egglog import EGraph, RunReport, Schedule

from onnxsat.eqsat.rules import RuleSchedule, analysis
from onnxsat.eqsat.rules.families import ruleset_name
from onnxsat.eqsat.rules.patterns import report_name
from onnxsat.memory import resident_mib

GROW_MATCH_LIMIT = 1000
"""Matches a growing rule family may make in one iteration before the back-off scheduler bans it."""
GROW_BAN_LENGTH = 5


ANALYSIS_SCHEDULE = analysis.saturate()
"""The analysis run to a fixpoint: one object, so a translated command is found again by its ``id``."""


@dataclass(frozen=True)
class SaturationLimits:
    max_iterations: int = 30
    max_enodes: int = 5_000_000
    max_seconds: float = 120.0
    max_memory_mib: float = 8192.0
    """Resident memory of the whole process, checked after each iteration against the next one's predicted growth."""


@dataclass
class SaturationStats:
    iterations: int = 0
    stop_reason: str = "saturated"
    enodes: int = 0
    rule_matches: Counter[str] = field(default_factory=Counter)
    banned: int = 0
    """How many times the back-off scheduler banned a growing rule family for exceeding its budget."""
    family_seconds: Counter[str] = field(default_factory=Counter)
    """Wall time of each rule family's runs (the analysis rules under ``analysis``): egglog's own per-rule
    times leave out join planning and enumeration, which is where a badly joining rule spends minutes."""
    searched_seconds: Counter[str] = field(default_factory=Counter)
    """Per family, the part of its time egglog's run reports give to its rules' search and apply."""
    rule_seconds: Counter[str] = field(default_factory=Counter)
    """egglog's search-and-apply time per rule, summed over the iterations."""

    def record(self, family: str, seconds: float, report: RunReport) -> None:
        """Add one run's wall time, matches and per-rule times."""
        self.family_seconds[family] += seconds
        for rule_decl, count in report.num_matches_per_rule.items():
            self.rule_matches[_rule_name(rule_decl)] += count
        for rule_decl, spent in report.search_and_apply_time_per_rule.items():
            self.rule_seconds[_rule_name(rule_decl)] += spent.total_seconds()
            self.searched_seconds[family] += spent.total_seconds()


def _rule_name(rule_decl: object) -> str:
    return report_name(getattr(rule_decl, "name", None) or str(rule_decl))


def egraph_size(egraph: EGraph) -> int:
    """Rows in all tables: e-nodes plus relation facts."""
    return sum(size for _, size in egraph.all_function_sizes())


@dataclass
class _BackOff:
    """Back-off for one growing rule set (egg's scheduler, per family and across iterations): a family
    whose matches in one iteration exceed its budget is banned for a number of iterations, and each ban
    doubles both its next budget and its next ban, so explosive rules get their turn ever more rarely."""

    bans: int = 0
    banned_until: int = -1

    def allowed(self, iteration: int) -> bool:
        return iteration > self.banned_until

    def record(self, iteration: int, matches: int) -> None:
        if matches > GROW_MATCH_LIMIT << self.bans:
            self.banned_until = iteration + (GROW_BAN_LENGTH << self.bans)
            self.bans += 1


def saturate(
    egraph: EGraph, schedule: RuleSchedule, limits: SaturationLimits, translated: dict | None = None
) -> SaturationStats:
    """Run ``schedule`` on ``egraph`` until nothing changes or a limit is reached.

    ``translated``: the commands already translated for this e-graph's rules (``WarmEGraph``), shared
    across searches; by default each search translates its own.
    """
    stats = SaturationStats()
    if schedule.empty:
        return stats
    start = time.perf_counter()
    # One pass of the simplifying families per iteration, not a nested saturation: an e-graph can hold
    # a class that contains itself (x * 1 = x), and a fold matching through it makes a new constant on
    # every pass. The iteration, e-node and time limits bound that; a nested saturate would not end.
    back_offs = [_BackOff() for _ in schedule.grow]
    runs, analysed = Runs(egraph, stats, translated), ANALYSIS_SCHEDULE
    memory, enodes = resident_mib(), egraph_size(egraph)
    while True:
        if stats.iterations >= limits.max_iterations:
            stats.stop_reason = f"iteration limit ({limits.max_iterations})"
            break
        reports = [runs.timed("analysis", analysed)]
        reports += [runs.timed(ruleset_name(ruleset), ruleset) for ruleset in schedule.simplify]
        skipped = False  # a banned family may still have work: the search is not saturated yet
        for ruleset, back_off in zip(schedule.grow, back_offs, strict=True):
            skipped |= not back_off.allowed(stats.iterations)
            if back_off.allowed(stats.iterations):
                grown_report = runs.timed(ruleset_name(ruleset), ruleset)
                back_off.record(stats.iterations, sum(grown_report.num_matches_per_rule.values()))
                reports += [grown_report, runs.timed("analysis", analysed)]
        stats.iterations += 1
        stats.enodes = egraph_size(egraph)
        stats.banned = sum(b.bans for b in back_offs)
        if not any(report.updated for report in reports) and not skipped:
            break
        if stats.enodes > limits.max_enodes:
            stats.stop_reason = f"e-node limit ({limits.max_enodes})"
            break
        if time.perf_counter() - start > limits.max_seconds:
            stats.stop_reason = f"time limit ({limits.max_seconds:g} s)"
            break
        now = resident_mib()
        grown, memory = now - memory, now
        growth_rate, enodes = stats.enodes / max(enodes, 1), stats.enodes
        if memory + max(grown, 0.0) * growth_rate > limits.max_memory_mib:
            # Stop if the next iteration, growing at the last one's rate, would cross the limit:
            # e-graphs grow geometrically, and checking only afterwards could overshoot by gigabytes.
            stats.stop_reason = f"memory limit ({limits.max_memory_mib:g} MiB)"
            break
    return stats


class Runs:
    """Runs schedules on one e-graph, each translated to egglog's command once, and times them per family.

    ``egraph.run`` merges a schedule's declarations into the e-graph's on every call, 50-100 ms for these
    rule sets; running each family on its own (to time it) made that most of the saturation time. The
    rules never change during a search, so each translated command is kept (with its schedule, so that
    the ``id`` key stays unique) and run again.
    """

    def __init__(self, egraph: EGraph, stats: SaturationStats, commands: dict | None = None) -> None:
        self.egraph, self.stats = egraph, stats
        self.commands: dict[int, tuple[Schedule, object]] = {} if commands is None else commands

    def timed(self, family: str, schedule: Schedule) -> RunReport:
        """Run ``schedule`` and charge its wall time, matches and per-rule times to ``family``."""
        start = time.perf_counter()
        cached = self.commands.get(id(schedule))
        if cached is None:
            self.egraph._add_decls(schedule)
            cached = self.commands[id(schedule)] = (schedule, self.egraph._state.run_schedule_to_egg(schedule.schedule))
        (output,) = self.egraph._run_program(cached[1])
        report = RunReport._from_bindings(output.report, self.egraph._state)
        self.stats.record(family, time.perf_counter() - start, report)
        return report
