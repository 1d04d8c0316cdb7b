"""Importance criteria (importance.py): member scores, tree-level vs single-node, HRank, channel counts."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, prune, run

from onnxsat.errors import SettingsError
from onnxsat.pruning.importance import (
    CRITERIA,
    Criterion,
    channels_to_prune,
    fpgm_scores,
    get_criterion,
    group_scores,
    member_matrix,
    ranked_maps,
    register_criterion,
    select_kept,
)
from onnxsat.pruning.prune import PruneOptions, association_trees
from onnxsat.pruning.trees import ChannelSlice


def ranked_model() -> onnx.ModelProto:
    """c1's filters have L1 norms in ratio 1:2:3:4; c2 reads channel 2 with tiny weights, channel 0 strongly."""
    b = Builder()
    w1 = np.ones((4, 3, 1, 1), dtype=np.float32) * np.array([1, 2, 3, 4], dtype=np.float32)[:, None, None, None]
    w2 = np.ones((2, 4, 1, 1), dtype=np.float32) * np.array([4, 3, 0.01, 1], dtype=np.float32)[None, :, None, None]
    r = b.node("Relu", [b.conv("c1", "x", 3, 4, k=1, bias=False, weight=w1)], "r1")
    return b.model([b.conv("c2", r, 4, 2, k=1, bias=False, weight=w2)])


def test_tree_level_and_single_node_rank_channels_differently() -> None:
    model = ranked_model()
    _, index, forest = association_trees(model)
    group = next(g for g in forest.groups if g.prunable)
    single = group_scores(group, index.value, "l1", single_node=True)
    tree = group_scores(group, index.value, "l1")
    assert np.argmin(single) == 0  # smallest filter
    assert np.argmin(tree) == 2  # the next layer barely reads it
    _, single_report = prune(model, rate=0.25, single_node=True)
    pruned_single, _ = prune(model, rate=0.25, single_node=True)
    pruned_tree, _ = prune(model, rate=0.25)
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in pruned_tree.graph.initializer}
    assert weights["c1_w"][:, 0, 0, 0].tolist() == [1, 2, 4]
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in pruned_single.graph.initializer}
    assert weights["c1_w"][:, 0, 0, 0].tolist() == [2, 3, 4]
    assert single_report.groups[0].kept == 3


def test_hrank_ranks_the_maps_the_next_layer_reads() -> None:
    """After the activation (and the residual Add with its Relu), not the raw Conv output."""
    b = Builder()
    r1 = b.node("Relu", [b.conv("c1", "x", 3, 4)], "r1")
    normalized = b.node("BatchNormalization", [b.conv("c2", r1, 4, 3), *bn_params(b, "bn", 3)], "bn")
    r2 = b.node("Relu", [b.node("Add", [normalized, b.conv("c4", r1, 4, 3)], "add")], "r2")
    model = b.model([b.node("MaxPool", [r2], "pool", kernel_shape=[2, 2], strides=[2, 2]), b.conv("c3", r2, 3, 2)])
    work, _, forest = association_trees(model)
    first_outputs = {node.name: node.output[0] for node in work.graph.node}
    maps = {root: tensor for g in forest.groups for root, tensor in ranked_maps(g, first_outputs).items()}
    assert maps["c1"] == "r1"
    assert maps["c2"] == maps["c4"] == "r2"  # through BN, the residual Add and its Relu; pool and c3 read r2
    assert maps["c3"] == "c3"  # a graph output: nothing after it


def bn_params(b: Builder, name: str, channels: int) -> list[str]:
    """Identity BatchNormalization parameters: scale 1, shift 0, mean 0, variance 1."""
    ones, zeros = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    values = {"scale": ones, "shift": zeros, "mean": zeros, "var": ones}
    return [b.const(f"{name}_{part}", value) for part, value in values.items()]


def test_hrank_prunes_a_channel_its_activation_silences() -> None:
    """Channel 3 has the largest filter but a bias that keeps it below zero, so its Relu maps are all
    zero (rank 0): HRank prunes it first, where the raw Conv maps (full rank for every channel) tied."""
    b = Builder()
    weight = (np.random.default_rng(1).normal(size=(4, 3, 3, 3)) * [[[[1]]], [[[1]]], [[[1]]], [[[3]]]]).astype(
        np.float32
    )
    conv = b.node(
        "Conv",
        ["x", b.const("c1_w", weight), b.const("c1_b", np.array([0, 0, 0, -1e3], np.float32))],
        "c1",
        pads=[1] * 4,
    )
    model = b.model([b.conv("c2", b.node("Relu", [conv], "r1"), 4, 2)])
    pruned, _ = prune(model, rate=0.25, criterion="hrank", single_node=True)
    kept_bias = {t.name: onnx.numpy_helper.to_array(t) for t in pruned.graph.initializer}["c1_b"]
    assert kept_bias.tolist() == [0, 0, 0]


def test_member_matrix_takes_blocks_at_an_offset() -> None:
    value = np.arange(2 * 10).reshape(2, 10)
    piece = ChannelSlice("n", 0, 1, "w", axis=1, offset=4, block=2, role="leaf")
    matrix = member_matrix(value, piece, channels=3)
    assert matrix.tolist() == [[4, 14, 5, 15], [6, 16, 7, 17], [8, 18, 9, 19]]


def test_fpgm_scores_the_channel_nearest_the_others_lowest() -> None:
    rows = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, 0.1], [5.0, 5.0]])
    assert np.argmin(fpgm_scores(rows)) == 2
    assert np.argmax(fpgm_scores(rows)) == 3


@pytest.mark.parametrize("criterion", ["l1", "l2", "fpgm", "hrank"])
@pytest.mark.parametrize("single_node", [False, True])
def test_every_criterion_prunes_a_valid_model(criterion: str, single_node: bool) -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    p = b.node("MaxPool", [b.node("Relu", [b.conv("c2", r, 8, 6)], "r2")], "pool", kernel_shape=[2, 2], strides=[2, 2])
    f = b.node("Flatten", [p], "flat")
    model = b.model([b.node("Gemm", [f, b.random("fc_w", 96, 4)], "fc")])
    pruned, report = prune(model, rate=0.5, criterion=criterion, single_node=single_node)
    assert [g.kept for g in report.groups] == [4, 3, 4]
    assert run(pruned)[0].shape == (2, 4)
    if criterion == "hrank":
        assert any("random" in note for note in report.notes)


def test_rate_counts_are_floored_and_keep_one_channel() -> None:
    assert channels_to_prune(16, 0.3) == 4
    assert channels_to_prune(100, 0.29) == 29
    assert channels_to_prune(10, 0.7) == 7
    assert channels_to_prune(1, 0.5) == 0
    assert channels_to_prune(3, 0.99) == 2
    assert select_kept(np.array([3.0, 1.0, 1.0, 2.0]), 0.5).tolist() == [0, 3]


def test_kept_channel_counts_round_up_to_the_multiple_on_wide_groups() -> None:
    """ONNX Runtime's blocked conv layouts want multiples of 8: 64 channels at 0.3 keep 48, not 45;
    narrow groups (16) and counts that were never multiples (30) keep the exact rate."""
    from onnxsat.pruning.importance import channels_to_prune

    assert channels_to_prune(64, 0.3, 8) == 16 and channels_to_prune(64, 0.3) == 19
    assert channels_to_prune(64, 0.5, 8) == 32
    assert channels_to_prune(16, 0.3, 8) == 4 and channels_to_prune(30, 0.3, 8) == 9
    assert channels_to_prune(64, 0.0, 8) == 0


@pytest.fixture
def temporary_criterion() -> Iterator[Criterion]:
    """A criterion registered the way the README says (one object), removed again after the test."""
    # the largest absolute weight of each channel (L-infinity)
    criterion = register_criterion(Criterion("linf", lambda matrix: np.max(np.abs(matrix), axis=1)))
    yield criterion
    del CRITERIA[criterion.name]


def test_a_registered_criterion_prunes_through_the_pass(temporary_criterion: Criterion) -> None:
    model = ranked_model()
    _, index, forest = association_trees(model)
    group = next(g for g in forest.groups if g.prunable)
    assert np.argmin(group_scores(group, index.value, "linf", single_node=True)) == 0
    pruned, report = prune(model, rate=0.25, criterion="linf", single_node=True)
    assert report.criterion == "linf" and report.verification is not None and report.verification.ok
    assert "linf" in PruneOptions.__dataclass_fields__["criterion"].metadata["cli"]["choices"]()
    assert next(t.dims[0] for t in pruned.graph.initializer if t.name.startswith("c1")) == 3


def test_criteria_say_what_they_need_and_names_are_unique() -> None:
    assert [name for name, c in CRITERIA.items() if c.ranks_roots] == ["hrank"]
    with pytest.raises(TypeError, match="pruning criterion 'l1' is registered twice"):
        register_criterion(Criterion("l1", np.sum))
    with pytest.raises(SettingsError, match="unknown criterion 'l3'; choose from l1, l2, fpgm, hrank"):
        get_criterion("l3")
