"""E-graph growth is bounded: every limit ends the search cleanly and says which one stopped it.

An explosive rule set (test-only: every node gets two twins each iteration, so the e-graph doubles)
shows the limits hold against real growth; the real rules under tiny limits show that a stopped
search still gives a correct, verified model.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.cli import main
from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.language import Args, Attrs, Node, Tensor, out
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import RuleSchedule
from onnxsat.eqsat.saturate import SaturationLimits, egraph_size, saturate
from onnxsat.memory import resident_mib
from onnxsat.zoo.synthetic import conv_bn_relu_chain

explosive: Ruleset = ruleset(name="explosive_twins")


@explosive.register
def _twins(y: Tensor, op: String, domain: String, attrs: Attrs, inputs: Args, captures: Args, node_id: String, n: i64):
    """Two new twins per node per iteration: each e-class doubles, as an unbounded rewrite system would."""
    node = Node(op, domain, attrs, inputs, captures, node_id, n)
    yield rule(eq(y).to(out(node, 0))).then(
        union(y).with_(out(Node(op, domain, attrs, inputs, captures, node_id + "a", n), 0)),
        union(y).with_(out(Node(op, domain, attrs, inputs, captures, node_id + "b", n), 0)),
    )


def explosive_egraph():
    return encode(conv_bn_relu_chain(20)).egraph


def test_enode_limit_stops_explosive_growth() -> None:
    egraph = explosive_egraph()
    stats = saturate(egraph, RuleSchedule(grow=(explosive,)), SaturationLimits(max_iterations=1000, max_enodes=20_000))
    assert stats.stop_reason == "e-node limit (20000)"
    # One iteration at most triples the graph, so the overshoot is bounded by one step.
    assert 20_000 < egraph_size(egraph) <= 3 * 20_000 + 1_000


def test_time_limit_stops_explosive_growth() -> None:
    egraph = explosive_egraph()
    start = time.perf_counter()
    stats = saturate(
        egraph,
        RuleSchedule(grow=(explosive,)),
        SaturationLimits(max_iterations=1000, max_enodes=10**9, max_seconds=0.5),
    )
    assert stats.stop_reason == "time limit (0.5 s)"
    assert time.perf_counter() - start < 10.0


def test_memory_limit_stops_explosive_growth() -> None:
    egraph = explosive_egraph()
    budget = resident_mib() + 64
    stats = saturate(
        egraph,
        RuleSchedule(grow=(explosive,)),
        SaturationLimits(max_iterations=1000, max_enodes=10**9, max_seconds=600, max_memory_mib=budget),
    )
    assert stats.stop_reason == f"memory limit ({budget:g} MiB)"
    # The check runs between iterations and predicts the next one's growth from the last one's; memory
    # the allocator reuses can hide growth for an iteration, so allow one step of overshoot, not runaway.
    assert resident_mib() < 2 * budget


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (SaturationLimits(max_iterations=0), "iteration limit (0)"),
        (SaturationLimits(max_enodes=1), "e-node limit (1)"),
        (SaturationLimits(max_seconds=0.0), "time limit (0 s)"),
        (SaturationLimits(max_memory_mib=1.0), "memory limit (1 MiB)"),
    ],
)
def test_stopped_search_still_gives_a_verified_model(limits: SaturationLimits, reason: str) -> None:
    """Stopping early is sound: whatever the e-graph holds is equivalent to the input."""
    model = conv_bn_relu_chain(6)
    result, report = optimize_model(model, OptimizeOptions(**asdict(limits)))
    assert report.egraph["stop_reason"] == reason
    assert report.verification is not None and report.verification.ok
    assert len(result.graph.node) <= len(model.graph.node)


def test_memory_limit_from_the_command_line(cnn_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    code = main(
        ["optimize", str(cnn_file), "-o", str(tmp_path / "o.onnx"), "--max-memory-mib", "1", "--report", str(report)]
    )
    assert code == 0, capfd.readouterr().err
    assert json.loads(report.read_text())["egraph"]["stop_reason"] == "memory limit (1 MiB)"
