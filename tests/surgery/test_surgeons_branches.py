"""``ParallelConvsToConv``: RepVGG and MobileOne blocks as trained (parallel Conv branches of one input, with
BatchNormalizations and an identity branch, summed by Adds) become one Conv with the same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from catalogue_checks import applied, assert_same_values, make_model, node, op_types
from onnx import helper

from onnxsat.surgery.surgeons.branches import ParallelConvsToConv

RNG = np.random.default_rng(0)


def _bn(name: str, source: str, channels: int, weights: dict[str, np.ndarray]) -> onnx.NodeProto:
    stats = {
        f"{name}_g": RNG.uniform(0.5, 1.5, channels),
        f"{name}_b": RNG.normal(size=channels),
        f"{name}_m": RNG.normal(size=channels),
        f"{name}_v": RNG.uniform(0.5, 2.0, channels),
    }
    weights.update({key: value.astype(np.float32) for key, value in stats.items()})
    return helper.make_node("BatchNormalization", [source, *stats], [name], epsilon=1e-3)


def _conv(
    name: str, source: str, shape: tuple[int, ...], weights: dict[str, np.ndarray], bias: bool = False, **attrs: object
) -> onnx.NodeProto:
    weights[f"{name}_w"] = RNG.normal(size=shape).astype(np.float32) * 0.3
    inputs = [source, f"{name}_w"]
    if bias:
        weights[f"{name}_bias"] = RNG.normal(size=shape[0]).astype(np.float32)
        inputs.append(f"{name}_bias")
    return helper.make_node("Conv", inputs, [name], **attrs)


def repvgg_block(channels: int = 4, stride: int = 1, identity: str = "bn", group: int = 1) -> onnx.ModelProto:
    """Conv3x3+BN, Conv1x1+BN and (stride 1) an identity BatchNormalization of x (or x itself), summed, then Relu."""
    weights: dict[str, np.ndarray] = {}
    per_group = channels // group
    nodes = [
        _conv("k3", "x", (channels, per_group, 3, 3), weights, pads=[1, 1, 1, 1], strides=[stride] * 2, group=group),
        _bn("k3_bn", "k3", channels, weights),
        _conv("k1", "x", (channels, per_group, 1, 1), weights, bias=True, strides=[stride] * 2, group=group),
        _bn("k1_bn", "k1", channels, weights),
        helper.make_node("Add", ["k3_bn", "k1_bn"], ["sum2"]),
    ]
    last = "sum2"
    if identity == "bn":
        nodes += [_bn("id_bn", "x", channels, weights), helper.make_node("Add", ["sum2", "id_bn"], ["sum3"])]
        last = "sum3"
    elif identity == "x":
        nodes.append(helper.make_node("Add", ["sum2", "x"], ["sum3"]))
        last = "sum3"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    return make_model(nodes, {"x": [2, channels, 9, 9]}, {"y": None}, weights)


@pytest.mark.parametrize(
    ("stride", "identity", "group"),
    [(1, "bn", 1), (1, "x", 1), (2, "none", 1), (1, "bn", 4), (1, "none", 2)],
)
def test_a_repvgg_block_becomes_one_conv(stride: int, identity: str, group: int) -> None:
    model = repvgg_block(stride=stride, identity=identity, group=group)
    outcome = applied(ParallelConvsToConv(), model)
    assert op_types(outcome.model) == ["Conv", "Relu"]
    conv = node(outcome.model, "Conv")
    assert [a.ints for a in conv.attribute if a.name == "kernel_shape"] == [[3, 3]]
    assert "summed 1 group(s)" in outcome.notice
    assert_same_values(model, outcome.model, atol=1e-4)


def test_branches_of_different_inputs_or_off_centre_pads_are_left_alone() -> None:
    weights: dict[str, np.ndarray] = {}
    nodes = [
        _conv("a", "x", (4, 4, 3, 3), weights, pads=[1, 1, 1, 1]),
        _conv("b", "z", (4, 4, 1, 1), weights),  # another input
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    other_input = make_model(nodes, {"x": [1, 4, 6, 6], "z": [1, 4, 6, 6]}, {"y": None}, weights)
    assert not ParallelConvsToConv().apply(other_input).changed
    weights = {}
    nodes = [
        _conv("a", "x", (4, 4, 3, 3), weights, pads=[1, 1, 1, 1]),
        _conv("b", "x", (4, 4, 1, 1), weights, pads=[1, 1, 1, 1], strides=[1, 1]),  # its output grid is larger
        helper.make_node("Slice", ["b", "s", "e", "ax"], ["b_cut"]),
        helper.make_node("Add", ["a", "b_cut"], ["y"]),
    ]
    weights |= {"s": np.array([1, 1]), "e": np.array([7, 7]), "ax": np.array([2, 3])}
    sliced = make_model(nodes, {"x": [1, 4, 6, 6]}, {"y": [1, 4, 6, 6]}, weights)
    assert not ParallelConvsToConv().apply(sliced).changed
    weights = {}
    nodes = [
        _conv("a", "x", (4, 4, 3, 3), weights, pads=[2, 2, 0, 0]),
        _conv("b", "x", (4, 4, 1, 1), weights),  # the same grid, but the 3x3 is shifted: not at its centre
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    off_centre = make_model(nodes, {"x": [1, 4, 6, 6]}, {"y": None}, weights)
    assert not ParallelConvsToConv().apply(off_centre).changed


def test_a_branch_read_elsewhere_is_left_alone() -> None:
    weights: dict[str, np.ndarray] = {}
    nodes = [
        _conv("a", "x", (4, 4, 3, 3), weights, pads=[1, 1, 1, 1]),
        _conv("b", "x", (4, 4, 1, 1), weights),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    model = make_model(nodes, {"x": [1, 4, 6, 6]}, {"y": None, "b": None}, weights)
    assert not ParallelConvsToConv().apply(model).changed


def test_optimize_sums_the_branches_and_says_so() -> None:
    from onnxsat.eqsat.optimizer import optimize_model

    model = repvgg_block()
    optimized, report = optimize_model(model)
    assert report.verification is not None and report.verification.ok
    assert report.fusions["parallel Conv branches -> Conv"] == 1
    assert [n.op_type for n in optimized.graph.node if n.op_type in ("Add", "BatchNormalization")] == []
    assert 0 < report.sizes["optimized"] < report.sizes["original"]  # one 3x3 kernel for three branches' weights
    assert "file size: " in report.to_table()
