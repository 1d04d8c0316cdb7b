"""Differential fuzzing inside control flow: a fixed sample of generated If/Loop/Scan models through every target.

The sample (seeds 0..23, about 50 s on one core) is what ``make test`` fuzzes; ``python -m tools.fuzz bodies``
runs hundreds more. Besides passing, the sample must really contain what the campaign claims to exercise: all
three control-flow ops, nested bodies, captures, shadowed names, settleable Ifs and Loops of every trip count,
counted from the models' structure.
"""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

from tools.fuzz.command import build_parser
from tools.fuzz.differential import FAILED, INVALID, Outcome, check_model
from tools.fuzz.graph_campaign import run_graph_campaign
from tools.fuzz.graphs.bodies import control_census, generate_bodies_model

SAMPLE = range(24)

# One xdist worker builds the sample once (like the graph sample in test_differential.py).
pytestmark = pytest.mark.xdist_group("control_flow_sample")


@pytest.fixture(scope="module")
def models() -> dict[int, onnx.ModelProto]:
    return {seed: generate_bodies_model(seed) for seed in SAMPLE}


@pytest.fixture(scope="module")
def outcomes(models: dict[int, onnx.ModelProto]) -> dict[int, Outcome]:
    """Every sample model checked once (all targets, determinism included)."""
    return {seed: check_model(model) for seed, model in models.items()}


@pytest.fixture(scope="module")
def census(models: dict[int, onnx.ModelProto]) -> Counter[str]:
    total: Counter[str] = Counter()
    for model in models.values():
        total.update(control_census(model))
    return total


def test_no_sample_model_fails_any_target(outcomes: dict[int, Outcome]) -> None:
    failed = {seed: o.describe() for seed, o in outcomes.items() if o.status == FAILED}
    assert not failed, failed


def test_invalid_models_stay_rare(outcomes: dict[int, Outcome]) -> None:
    """The generator's own mistakes (or ONNX/ORT refusing valid control flow) stay under 10%."""
    invalid = {seed: o.detail for seed, o in outcomes.items() if o.status == INVALID}
    assert len(invalid) <= len(SAMPLE) // 10, invalid


def test_same_seed_same_bytes() -> None:
    assert generate_bodies_model(7).SerializeToString() == generate_bodies_model(7).SerializeToString()
    assert generate_bodies_model(8).SerializeToString() != generate_bodies_model(7).SerializeToString()


def test_every_control_flow_op_appears_in_and_out_of_bodies(census: Counter[str]) -> None:
    for op in ("If", "Loop", "Scan"):
        assert census[f"{op} at depth 0"] >= 5, (op, census)
        assert census[f"{op} at depth 1"] >= 5, (op, census)
    assert census["nested control flow"] >= 30
    assert census["control flow nested 3 deep"] >= 5  # If in Loop in Scan ...


def test_settleable_conditions_and_every_trip_count_appear(census: Counter[str]) -> None:
    assert census["If with a constant condition"] >= 5
    assert census["If with a condition computed from constants or shapes"] >= 5
    for trips in (0, 1, 2, 3):
        assert census[f"Loop with constant trip count {trips}"] >= 2, trips
    assert census["Loop without a trip count"] >= 2
    assert census["Scan with axes attributes"] >= 5


def test_bodies_capture_shadow_and_keep_dead_nodes(census: Counter[str]) -> None:
    bodies = census["body"]
    assert bodies >= 100
    assert census["body capturing an outer tensor"] >= bodies // 2
    for feature in (
        "body shadowing an outer name",
        "body with initializers",
        "body with a Constant node",
        "body with a dead node",
        "body returning its input unchanged",
        "body returning an outer tensor",
    ):
        assert census[feature] >= 10, (feature, census[feature])
    assert census["catalog ops inside bodies"] >= 3 * bodies


def test_bodies_hold_the_rule_patterns(models: dict[int, onnx.ModelProto]) -> None:
    """Bodies are drawn from the full op catalog: the rewrite rules' patterns appear inside them."""
    seen: set[str] = set()
    for model in models.values():
        stack = [a.g for n in model.graph.node for a in n.attribute if a.HasField("g")]
        while stack:
            graph = stack.pop()
            producers = {o: n.op_type for n in graph.node for o in n.output}
            seen.update(f"{producers.get(n.input[0])}+{n.op_type}" for n in graph.node if n.input)
            stack.extend(a.g for n in graph.node for a in n.attribute if a.HasField("g"))
    assert {"Conv+BatchNormalization", "BatchNormalization+Relu"} <= seen, sorted(seen)


def test_opsets_cover_the_old_and_new_control_flow_forms(models: dict[int, onnx.ModelProto]) -> None:
    """Scan-9 and Loop-1 below 11, Loop-11/Scan-11 at 11..12, the 13+ forms (Loop-13/16, If-13/16/19/21)."""
    opsets = Counter(model.opset_import[0].version for model in models.values())
    assert any(o < 11 for o in opsets) and any(11 <= o < 13 for o in opsets), opsets
    assert sum(n for o, n in opsets.items() if o >= 13) >= len(SAMPLE) // 2, opsets


def test_the_bodies_campaign_counts_and_prints(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_graph_campaign(2, seed=0, progress=False, kind="bodies")
    assert (result.generated, result.failed) == (2, 0)
    assert result.control["If"] + result.control["Loop"] + result.control["Scan"] >= 2
    assert result.summary_line().startswith("control-flow graphs fuzzed: 2 generated")
    args = build_parser().parse_args(["bodies", "--count", "3", "--seed", "5"])
    assert (args.kind, args.count, args.seed) == ("bodies", 3, 5)
