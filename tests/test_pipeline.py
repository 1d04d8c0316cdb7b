"""The optimize pass as a whole: deep and densely shared graphs, determinism, the report."""

from __future__ import annotations

import json
import sys

import onnx
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model

from onnxsat.zoo.synthetic import conv_bn_relu_chain, demo_cnn, densenet_like


def test_deep_chain_beyond_the_recursion_limit_optimizes_and_verifies() -> None:
    blocks = sys.getrecursionlimit() // 2  # 1,500 nodes: a nested-expression design would overflow here
    model = conv_bn_relu_chain(blocks)
    optimized, report = optimize_model(model)
    assert report.verification is not None and report.verification.ok
    assert report.nodes_after == {"com.microsoft::FusedConv": blocks}
    assert report.fusions == {"Conv+BatchNormalization+Relu -> com.microsoft::FusedConv": blocks}
    onnx.checker.check_model(optimized)


def test_densenet_like_dag_decodes_every_shared_tensor_once() -> None:
    layers = 40
    model = densenet_like(layers)
    optimized, report = optimize_model(model)
    assert report.verification is not None and report.verification.ok
    # Nothing to fuse (BN -> Relu -> Conv order): the DAG comes back node for node, each once.
    assert report.nodes_after == report.nodes_before
    assert len(optimized.graph.node) == len(model.graph.node)
    assert len({o for n in optimized.graph.node for o in n.output}) == len(model.graph.node)


def test_same_input_gives_byte_identical_output() -> None:
    model = demo_cnn()
    first = optimize_model(model)[0].SerializeToString()
    second = optimize_model(model)[0].SerializeToString()
    assert first == second


def test_input_model_is_not_modified() -> None:
    model = demo_cnn()
    before = model.SerializeToString()
    optimize_model(model, OptimizeOptions(target="ort"))
    assert model.SerializeToString() == before


def test_report_table_and_json_carry_the_figures() -> None:
    _, report = optimize_model(demo_cnn())
    table = report.to_table()
    assert "verification PASSED" in table
    assert "Conv+BatchNormalization+Clip -> com.microsoft::FusedConv" in table
    data = json.loads(report.to_json())
    assert data["nodes_before"]["BatchNormalization"] == 4
    assert "BatchNormalization" not in data["nodes_after"]
    assert data["egraph"]["stop_reason"] == "saturated"
    assert {"encode", "saturate", "extract", "decode", "verify"} <= set(data["phases"])
    assert data["rule_matches"]["Gemm+Relu -> FusedGemm"] == 1


def test_search_limits_stop_cleanly_and_say_which() -> None:
    from onnxsat.eqsat.saturate import SaturationLimits

    options = OptimizeOptions(limits=SaturationLimits(max_iterations=1))
    _, report = optimize_model(demo_cnn(), options)
    assert report.egraph["stop_reason"] == "iteration limit (1)"
    assert report.verification is not None and report.verification.ok
