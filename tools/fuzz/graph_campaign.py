"""A differential fuzzing campaign: many generated graphs through every target, failures shrunk and kept.

Graph ``i`` of a campaign is ``generate_model(seed + i)`` (or, for the control-flow campaign,
``generate_bodies_model(seed + i)``), so any failure is reproduced by its seed and campaign alone. Each
failure is shrunk (the shrunk model must fail the same way: same target, same kind) and saved, ready to
become a regression test.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from tools.fuzz.differential import FAILED, INVALID, Outcome, check_model
from tools.fuzz.graphs import generate_model, op_types, pattern_census
from tools.fuzz.graphs.bodies import control_census, generate_bodies_model
from tools.fuzz.shrink import shrink

GENERATORS: dict[str, Callable[[int], onnx.ModelProto]] = {"graph": generate_model, "bodies": generate_bodies_model}
"""Campaign kinds: what model a seed means in each (a failure's file name starts with the kind)."""


@dataclass
class GraphFailure:
    """One failing graph: how to regenerate it, what went wrong, and where its shrunk model is."""

    seed: int
    target: str | None
    kind: str
    detail: str
    nodes: int  # in the generated graph
    shrunk_nodes: int
    path: Path | None = None


@dataclass
class GraphCampaignResult:
    seed: int
    generated: int = 0
    ran: int = 0
    passed: int = 0
    invalid: int = 0
    failed: int = 0
    failures: list[GraphFailure] = field(default_factory=list)
    invalid_reasons: Counter[str] = field(default_factory=Counter)
    op_types: set[str] = field(default_factory=set)
    patterns: Counter[str] = field(default_factory=Counter)  # graphs containing each pattern
    control: Counter[str] = field(default_factory=Counter)  # control-flow census, summed over graphs
    elapsed: float = 0.0
    kind: str = "graph"

    def summary_line(self) -> str:
        what = "graphs" if self.kind == "graph" else "control-flow graphs"
        return (
            f"{what} fuzzed: {self.generated} generated, {self.ran} ran, {self.passed} passed, "
            f"{self.invalid} rejected as invalid, {self.failed} failed "
            f"({len(self.op_types)} op types, {self.elapsed:.0f} s)"
        )

    def failure_groups(self) -> dict[tuple[str | None, str], list[GraphFailure]]:
        """Failures by (target, kind): usually one bug each."""
        groups: dict[tuple[str | None, str], list[GraphFailure]] = {}
        for failure in self.failures:
            groups.setdefault((failure.target, failure.kind), []).append(failure)
        return groups


def _reproduces(outcome: Outcome) -> Callable[[onnx.ModelProto], bool]:
    """The shrinker's predicate: a candidate fails on the same target in the same way."""
    targets = [outcome.target] if outcome.target else None
    determinism = outcome.kind == "nondeterministic"

    def same_failure(candidate: onnx.ModelProto) -> bool:
        try:
            return check_model(candidate, targets, determinism).signature == outcome.signature
        except Exception:  # the harness choking on a candidate says nothing about the original failure
            return False

    return same_failure


def _file_name(seed: int, outcome: Outcome, campaign: str = "graph") -> str:
    kind = re.sub(r"[^a-z0-9]+", "-", outcome.kind.lower()).strip("-")
    return f"{campaign}_seed{seed}_{outcome.target}_{kind}.onnx"


def _record_failure(
    seed: int, model: onnx.ModelProto, outcome: Outcome, failures_dir: Path | None, campaign: str = "graph"
) -> GraphFailure:
    shrunk = shrink(model, _reproduces(outcome))
    path = None
    if failures_dir is not None:
        failures_dir.mkdir(parents=True, exist_ok=True)
        path = failures_dir / _file_name(seed, outcome, campaign)
        onnx.save(shrunk, str(path))
    nodes, shrunk_nodes = len(model.graph.node), len(shrunk.graph.node)
    return GraphFailure(seed, outcome.target, outcome.kind, outcome.detail, nodes, shrunk_nodes, path)


def run_graph_campaign(
    count: int, seed: int, failures_dir: Path | None = None, progress: bool = True, kind: str = "graph"
) -> GraphCampaignResult:
    """Generate ``count`` graphs (seeds ``seed`` .. ``seed + count - 1``) of ``kind`` and check each one."""
    generate = GENERATORS[kind]
    result = GraphCampaignResult(seed=seed, kind=kind)
    start = time.perf_counter()
    for index in range(count):
        graph_seed = seed + index
        try:
            model = generate(graph_seed)
        except Exception as error:  # a generator bug: count it, keep the campaign going
            result.invalid += 1
            result.invalid_reasons[f"generator: {type(error).__name__}: {error}"[:160]] += 1
            continue
        result.generated += 1
        result.op_types |= op_types(model)
        result.patterns.update(set(pattern_census(model)))
        if kind != "graph":
            result.control.update(control_census(model))
        try:
            outcome = check_model(model)
        except Exception as error:  # a bug in the harness itself: a failure to look at, not a crash
            outcome = Outcome(FAILED, None, f"harness {type(error).__name__}", str(error)[:300])
        if outcome.status == INVALID:
            result.invalid += 1
            result.invalid_reasons[outcome.detail[:160]] += 1
        else:
            result.ran += 1
            if outcome.status == FAILED:
                result.failed += 1
                result.failures.append(_record_failure(graph_seed, model, outcome, failures_dir, kind))
            else:
                result.passed += 1
        result.elapsed = time.perf_counter() - start
        if progress:
            print(f"\r{index + 1}/{count} graphs: {result.summary_line()}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    result.elapsed = time.perf_counter() - start
    return result
