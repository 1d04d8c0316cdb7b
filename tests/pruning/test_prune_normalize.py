"""Prune starts from the model's portable form (constants folded, when that verifies), so channels are
followed through per-channel constants an export computes at run time; ``normalize=False``
(``--no-normalize``) prunes the model exactly as given."""

from __future__ import annotations

import numpy as np
import pytest
from pruning_helpers import Builder, kept, prune, run

from onnxsat.errors import SettingsError
from onnxsat.pruning.prune import show_trees


def computed_scale_model() -> Builder:
    """c1 -> Relu -> Mul by a per-channel scale computed from two constants (an Add) -> c2."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    scale = b.node("Add", [b.random("sa", 1, 8, 1, 1), b.random("sb", 1, 8, 1, 1)], "scale")
    b.conv("c2", b.node("Mul", [r, scale], "m"), 8, 2)
    return b


def test_a_scale_computed_from_constants_is_folded_so_its_group_prunes() -> None:
    model = computed_scale_model().model(["c2"])
    with pytest.raises(SettingsError, match=r"no channel group that can be pruned .*which no root produces"):
        prune(model, rate=0.5)
    pruned, report = prune(model, rate=0.5, normalize=True)
    assert kept(report, "c1") == 4
    assert any(note.startswith("normalised first: 1 nodes folded away") for note in report.notes)
    assert run(pruned)[0].shape == run(model)[0].shape


def test_a_name_the_options_give_that_folding_would_lose_keeps_the_model_as_given() -> None:
    """c_dead's output is read by nothing, so folding removes it; excluding it by name must still mean
    that node, so the model is pruned as given."""
    b = computed_scale_model()
    b.conv("c_dead", "x", 3, 8)
    model = b.model(["c2"])
    with pytest.raises(SettingsError, match="--exclude leaves no channel group to prune"):
        prune(model, rate=0.5, normalize=True, exclude=["c_dead"])  # c1's group, as given, is unprunable
    b.conv("c3", b.node("Relu", [b.conv("c0", "x", 3, 8)], "r0"), 8, 2)
    model = b.model(["c2", "c3"])
    _, report = prune(model, rate=0.5, normalize=True, exclude=["c_dead"])
    assert any("would lose 'c_dead'" in note for note in report.notes)
    assert kept(report, "c0") == 4 and kept(report, "c1") == 8


def test_show_trees_shows_the_trees_prune_uses(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    import onnx

    onnx.save(computed_scale_model().model(["c2"]), path)
    assert "which no root produces" in show_trees(path, normalize=False)
    assert "which no root produces" not in show_trees(path)
    empty = tmp_path / "none.onnx"
    b = Builder()
    onnx.save(b.model([b.node("Relu", ["x"], "r")]), empty)
    assert show_trees(empty).startswith("no channel group")
    assert np.isfinite(run(onnx.load(path))[0]).all()


def test_a_reshape_that_keeps_an_open_batch_dim_is_removed_so_its_group_prunes() -> None:
    """tf2onnx turns layout Transposes on 1x1 maps into ``Reshape(x, [-1, C, 1, 1])`` between a Conv and its
    BatchNormalization; shape inference names the two batch dims apart, so the channels could not be
    followed. The portable form shows the Reshape returns its input, removes it and folds the BatchNormalization.
    As built, the channels are now followed through it too: the dims after them hold the same elements."""
    b = Builder()
    c1 = b.conv("c1", "x", 3, 16, k=1)
    wrapped = b.node("Reshape", [c1, b.const("target", np.array([-1, 16, 1, 1], np.int64))], "wrap")
    stats = [b.random(f"bn_{k}", 16) for k in "sbm"] + [b.const("bn_v", np.full(16, 0.7, np.float32))]
    r = b.node("Relu", [b.node("BatchNormalization", [wrapped, *stats], "bn")], "r1")
    b.conv("c2", r, 16, 4, k=1)
    model = b.model(["c2"], input_shape=["n", 3, 1, 1])
    as_built, built_report = prune(model, rate=0.5, normalize=False)  # followed too: the Reshape keeps the tail
    assert kept(built_report, "c1") == 8 and "Reshape" in {node.op_type for node in as_built.graph.node}
    pruned, report = prune(model, rate=0.5, normalize=True)
    assert kept(report, "c1") == 8
    assert {node.op_type for node in pruned.graph.node} == {"Conv", "Relu"}
    one_by_one = {"x": np.random.default_rng(0).normal(size=(2, 3, 1, 1)).astype(np.float32)}
    assert run(pruned, one_by_one)[0].shape == run(model, one_by_one)[0].shape == (2, 4, 1, 1)
