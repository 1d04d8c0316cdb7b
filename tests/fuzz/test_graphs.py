"""The graph generator: valid models, wide op coverage, the rule patterns and their near-misses, determinism.

The differential tests trust the generator to produce fair test cases; these tests check that trust on
the same fixed sample ``make test`` fuzzes (seeds 0..99).
"""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

from tools.fuzz.differential import original_problem
from tools.fuzz.graphs import generate_model, op_types, pattern_census

SAMPLE = range(100)

# What the rewrite rules match, and the near-misses they must refuse (see eqsat/rules/*.py).
PATTERNS = {
    "Conv+BatchNormalization",
    "ConvTranspose+BatchNormalization",
    "Conv+BatchNormalization+Relu",
    "Conv+BatchNormalization+Clip",
    "Conv+Relu",
    "Gemm+Relu",
    "grouped convolution",
    "depthwise convolution",
    "Clip (input form)",
    "Clip with a bound omitted",
}
NEAR_MISSES = {
    "near-miss: convolution output read twice or a graph output",
    "near-miss: BatchNormalization parameter not constant",
    "near-miss: convolution weight not constant",
    "near-miss: Clip bound not constant",
    "near-miss: activation input read twice or a graph output",
    "near-miss: Gemm weight not constant",
    "near-miss: Gemm in float64",
    "Gemm+Clip",
    "float16 Conv+BatchNormalization",
}
GRAPH_FEATURES = {
    "Constant node",
    "initializer",
    "shared tensor",
    "multi-output node",
    "intermediate graph output",
    "dead node",
    "symbolic dimension",
    "If reading outer-scope tensors",
    "model-local function call",
}


@pytest.fixture(scope="module")
def sample() -> dict[int, onnx.ModelProto]:
    return {seed: generate_model(seed) for seed in SAMPLE}


def test_same_seed_gives_the_same_bytes_and_seeds_differ() -> None:
    first, again = generate_model(1234), generate_model(1234)
    assert first.SerializeToString() == again.SerializeToString()
    assert generate_model(1235).SerializeToString() != first.SerializeToString()


def test_every_sampled_model_passes_the_full_onnx_check(sample: dict[int, onnx.ModelProto]) -> None:
    for seed, model in sample.items():
        assert model.ir_version == 9, seed
        onnx.checker.check_model(model, full_check=True)


def test_onnx_runtime_runs_the_sampled_models(sample: dict[int, onnx.ModelProto]) -> None:
    """The generator's shape bookkeeping agrees with ONNX Runtime: nothing in the sample is rejected."""
    problems = {seed: problem for seed, model in sample.items() if (problem := original_problem(model)[0])}
    assert not problems


def test_the_sample_covers_at_least_60_op_types(sample: dict[int, onnx.ModelProto]) -> None:
    covered = set().union(*(op_types(model) for model in sample.values()))
    assert len(covered) >= 60, sorted(covered)
    assert {"Conv", "ConvTranspose", "BatchNormalization", "Gemm", "Clip", "Relu", "Split", "TopK", "If"} <= covered


def test_opsets_range_over_old_and_new(sample: dict[int, onnx.ModelProto]) -> None:
    opsets = Counter(model.opset_import[0].version for model in sample.values())
    assert min(opsets) <= 10, "Clip's attribute form needs opset < 11"
    assert max(opsets) >= 20
    assert sum(count for opset, count in opsets.items() if 13 <= opset <= 21) >= 70  # mostly 13..21


@pytest.mark.parametrize("expected", [PATTERNS, NEAR_MISSES, GRAPH_FEATURES], ids=["patterns", "near-misses", "graph"])
def test_patterns_and_near_misses_appear(sample: dict[int, onnx.ModelProto], expected: set[str]) -> None:
    """Read from the graphs' structure (pattern_census), not from what the generator meant to build."""
    seen = Counter()
    for model in sample.values():
        seen.update(set(pattern_census(model)))
    assert not expected - set(seen), sorted(expected - set(seen))


def test_clip_attribute_form_appears_at_old_opsets() -> None:
    """Old opsets are a small share of seeds, so look a little further than the sample."""
    found = [seed for seed in range(400) if "Clip (attribute form)" in pattern_census(generate_model(seed))]
    assert found
    assert all(generate_model(seed).opset_import[0].version < 11 for seed in found)


def test_census_reads_structure() -> None:
    """A hand-built Conv -> BN -> Relu whose BN mean is a graph input: one pattern, one near-miss."""
    helper = onnx.helper
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"]),
        helper.make_node("Relu", ["y"], ["r"]),
    ]
    weights = [
        helper.make_tensor("w", onnx.TensorProto.FLOAT, [1, 1, 1, 1], [1.0]),
        *(helper.make_tensor(n, onnx.TensorProto.FLOAT, [1], [1.0]) for n in "gbv"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 2, 2]),
        helper.make_tensor_value_info("m", onnx.TensorProto.FLOAT, [1]),
    ]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [1, 1, 2, 2])], weights
    )
    census = pattern_census(helper.make_model(graph, ir_version=9))
    assert census["Conv+BatchNormalization"] == 1
    assert census["Conv+BatchNormalization+Relu"] == 1
    assert census["near-miss: BatchNormalization parameter not constant"] == 1
    assert "near-miss: convolution output read twice or a graph output" not in census
