"""Run rule sets over an encoded e-graph until nothing changes or a limit is reached.

Each iteration runs the analysis rules to saturation, then every rewrite family once. The limits
(iterations, e-nodes, seconds) end the search cleanly, and the stats say which one stopped it.
"""

from __future__ import annotations

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


@dataclass
class SaturationStats:
    iterations: int = 0
    stop_reason: str = "saturated"
    enodes: int = 0
    rule_matches: Counter[str] = field(default_factory=Counter)


def egraph_size(egraph: EGraph) -> int:
    """Rows in all tables: e-nodes plus relation facts."""
    return sum(size for _, size in egraph.all_function_sizes())


def saturate(egraph: EGraph, rulesets: tuple[Ruleset, ...], limits: SaturationLimits) -> SaturationStats:
    stats = SaturationStats()
    start = time.perf_counter()
    iteration = seq(analysis.saturate(), *rulesets)
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
    return stats
