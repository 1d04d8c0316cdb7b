"""Run rule sets over an encoded e-graph until nothing changes or a limit is reached.

Each iteration runs the analysis rules to saturation, then every rewrite family once. The limits
(iterations, e-nodes, seconds, resident memory) end the search cleanly between iterations, and the
stats say which one stopped it. Stopping early is always sound: every form in the e-graph is
equivalent to the input, so extraction simply has fewer alternatives to choose from.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from egglog import EGraph, Ruleset, seq

from onnxsat.eqsat.rules import analysis


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


def egraph_size(egraph: EGraph) -> int:
    """Rows in all tables: e-nodes plus relation facts."""
    return sum(size for _, size in egraph.all_function_sizes())


def resident_mib() -> float:
    """The process's current resident memory (Linux ``/proc``; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def saturate(egraph: EGraph, rulesets: tuple[Ruleset, ...], limits: SaturationLimits) -> SaturationStats:
    stats = SaturationStats()
    start = time.perf_counter()
    iteration = seq(analysis.saturate(), *rulesets)
    memory, enodes = resident_mib(), egraph_size(egraph)
    while True:
        if stats.iterations >= limits.max_iterations:
            stats.stop_reason = f"iteration limit ({limits.max_iterations})"
            break
        report = egraph.run(iteration)
        stats.iterations += 1
        for rule_decl, count in report.num_matches_per_rule.items():
            stats.rule_matches[getattr(rule_decl, "name", None) or str(rule_decl)] += count
        stats.enodes = egraph_size(egraph)
        if not report.updated:
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
