"""Options, the library, bad input, files and the tree listing (prune.py, library.py, trees.py display)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, kept, prune, shape_of, status

from onnxsat.api import prune as prune_file
from onnxsat.errors import SettingsError, VerificationFailedError
from onnxsat.pruning.layout import merge_axis, sized_by_target, split_axis
from onnxsat.pruning.library import BUILTIN, load_library
from onnxsat.pruning.prune import PruneOptions, association_trees, parse_rates, prune_model, show_trees
from onnxsat.pruning.trees import format_trees, render_trees


def chain() -> onnx.ModelProto:
    b = Builder()
    r1 = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    r2 = b.node("Relu", [b.conv("c2", r1, 8, 8)], "r2")
    return b.model([b.conv("c3", r2, 8, 2)])


def test_library_holds_the_papers_op_types_and_more() -> None:
    paper = "Conv ConvTranspose Gemm MatMul Mul Relu Sigmoid Softmax Tanh MaxPool AveragePool Flatten GlobalAveragePool"
    paper += " Pad Reshape Transpose ReduceMean ReduceMax Pow Sqrt Erf Unsqueeze Resize Slice Cast Add Concat"
    paper += " BatchNormalization Sub Div Gather"
    assert set(paper.split()) <= set(BUILTIN)
    assert len(BUILTIN) >= 35


def test_an_unknown_op_keeps_its_group_whole_and_the_others_prune() -> None:
    """Never guessed, never fatal: the group an unknown op reads stays whole, with the library entry to
    add as its reason, and the rest of the model prunes as usual."""
    b = Builder()
    s = b.node("Shrink", [b.conv("c1", "x", 3, 8)], "odd")
    c3 = b.conv("c3", b.node("Relu", [b.conv("c2", s, 8, 8)], "r2"), 8, 2)
    pruned, report = prune(b.model([c3]), rate=0.5)
    assert kept(report, "c1") == 8 and "does not know 'Shrink'" in status(report, "c1")
    assert kept(report, "c2") == 4 and shape_of(pruned, "c3_w")[1] == 4


def test_a_pixel_shuffle_keeps_its_group_whole_for_what_it_does() -> None:
    """DepthToSpace moves blocks of channels into space: the unknown-op message advised a library entry that is
    then refused, a dead end."""
    b = Builder()
    shuffled = b.node("DepthToSpace", [b.conv("c1", "x", 3, 8)], "shuffle", blocksize=2)
    r2 = b.node("Relu", [b.conv("c2", shuffled, 2, 8)], "r2")
    _, report = prune(b.model([b.conv("c3", r2, 8, 2)]), rate=0.5)
    assert kept(report, "c1") == 8 and "moves blocks of channels into space" in status(report, "c1")
    assert "--library" not in status(report, "c1")
    assert kept(report, "c2") == 4  # the others prune


@pytest.mark.parametrize(("axis", "keepdims"), [(1, 1), (2, 1), (-1, 0)])
def test_argmax_at_the_end_of_a_classifier_prunes_the_layers_before_it(axis: int, keepdims: int) -> None:
    """A label output (ArgMax over the logits) no longer stops pruning: ArgMax over height or width keeps
    the channels in place (one axis lower without keepdims) up to the graph output; over the channels it
    reads all of them. Either way the last conv stays whole and the one before prunes."""
    b = Builder()
    c2 = b.conv("c2", b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1"), 8, 8)
    b.node("ArgMax", [c2], "pick", axis=axis, keepdims=keepdims)
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 8, 8])
    pick = onnx.helper.make_tensor_value_info("pick", onnx.TensorProto.INT64, None)
    graph = onnx.helper.make_graph(b.nodes, "argmax", [x], [pick], b.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=9)
    pruned, report = prune(model, rate=0.5)
    assert kept(report, "c1") == 4 and shape_of(pruned, "c2_w")[1] == 4
    assert kept(report, "c2") == 8
    reason = "picks an index over the channels" if axis == 1 else "reaches graph output 'pick'"
    assert reason in status(report, "c2")


def test_an_unknown_op_on_a_tree_is_named_and_the_library_can_be_extended(tmp_path: Path) -> None:
    b = Builder()
    s = b.node("Shrink", [b.conv("c1", "x", 3, 8)], "odd")
    model = b.model([b.conv("c2", s, 8, 2)])
    with pytest.raises(SettingsError, match=r"no channel group .* does not know 'Shrink' \(node 'odd'\)"):
        prune_model(model, PruneOptions())
    extra = tmp_path / "library.json"
    extra.write_text(json.dumps({"Shrink": "next-no-process"}))
    pruned, _ = prune(model, rate=0.5, library=str(extra))
    assert shape_of(pruned, "c2_w")[1] == 4


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"Relu": "stop-process"}, "built in as next-no-process"),
        ({"Foo": "next-process"}, "can only be next-no-process or stop-process"),
        ({"Foo": "leaf"}, "unknown category"),
    ],
)
def test_bad_library_entries(tmp_path: Path, entries: dict[str, str], message: str) -> None:
    extra = tmp_path / "library.json"
    extra.write_text(json.dumps(entries))
    with pytest.raises(SettingsError, match=message):
        load_library(extra)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate": 1.0}, r"--rate must be in \[0, 1\)"),
        ({"rate": -0.1}, r"--rate must be in \[0, 1\)"),
        ({"rates": {"c1": 1.5}}, r"--rates c1 must be in"),
        ({"rates": {"nope": 0.5}}, "--rates 'nope' names no root"),
        ({"exclude": ["nope"]}, "--exclude 'nope' names no root"),
        ({"exclude": ["c1", "c2"]}, "--exclude leaves no channel group"),
        ({"criterion": "random"}, "unknown criterion"),
    ],
)
def test_bad_options_are_one_settings_error(options: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        prune_model(chain(), PruneOptions(**options))  # type: ignore[arg-type]


def test_no_prunable_group_is_an_error() -> None:
    b = Builder()
    model = b.model([b.conv("c1", "x", 3, 8)])
    with pytest.raises(SettingsError, match=r"no channel group that can be pruned .*reaches graph output"):
        prune_model(model, PruneOptions())


def test_no_prunable_group_names_what_first_stopped_each_group() -> None:
    """A decomposed LayerNorm (ReduceMean over the channels) and a graph output, in graph order."""
    b = Builder()
    c1 = b.conv("c1", "x", 3, 8)
    centred = b.node("Sub", [c1, b.node("ReduceMean", [c1], "mean", axes=[1])], "centred")
    model = b.model([b.conv("c2", centred, 8, 2)])
    with pytest.raises(SettingsError) as error:
        prune_model(model, PruneOptions())
    assert str(error.value) == (
        "the model has no channel group that can be pruned (ReduceMean 'mean': reduces over the channels; "
        "reaches graph output 'c2'); see --show-trees"
    )


def test_per_root_rates_and_exclusion() -> None:
    pruned, report = prune(chain(), rate=0.5, rates={"c2": 0.25}, exclude=["c1_w"])
    assert kept(report, "c1") == 8 and kept(report, "c2") == 6
    assert shape_of(pruned, "c2_w") == [6, 8, 3, 3]
    assert next(g.status for g in report.groups if "c1" in g.roots) == "excluded"
    assert parse_rates(["c1=0.3", "c2=25%"]) == {"c1": 0.3, "c2": 0.25}
    with pytest.raises(SettingsError, match="NAME=RATE"):
        parse_rates(["c1"])
    # --rate 0 beside --rates: the others keep every channel, and are not counted as pruned
    _, report = prune(chain(), rate=0.0, rates={"c2": 0.25})
    assert next(g.status for g in report.groups if "c1" in g.roots) == "kept whole: its rate removes no channel"
    assert "rate 0: 1 of 3 channel groups pruned" in report.to_table()


def test_prune_writes_a_file_and_a_report_never_over_the_input(tmp_path: Path) -> None:
    source, target, report_path = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save(chain(), str(source))
    report = prune_file(source, target, PruneOptions(rate=0.5), report=report_path)
    assert report.written and report.params["pruned"] < report.params["original"]
    assert "verification PASSED" in report.to_table()
    assert json.loads(report_path.read_text())["groups"][0]["kept"] == 4
    onnx.checker.check_model(onnx.load(str(target)), full_check=True)
    from onnxsat.errors import OutputPathError

    with pytest.raises(OutputPathError):
        prune_file(source, source, PruneOptions())


def test_failed_verification_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxsat.pruning import prune as pruning_module
    from onnxsat.verification import VerificationResult

    source, target = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(chain(), str(source))
    refused = (None, VerificationResult(False, error="broken"))
    monkeypatch.setattr(pruning_module, "check_lossy", lambda *args: refused)
    with pytest.raises(VerificationFailedError):
        prune_file(source, target, PruneOptions())
    assert not target.exists()
    assert prune_file(source, target, PruneOptions(), force=True).written


def test_trees_are_listed_and_drawn(tmp_path: Path) -> None:
    source = tmp_path / "in.onnx"
    onnx.save(chain(), str(source))
    text = show_trees(source, image=tmp_path / "trees.png")
    assert "group 0 [one-to-one] 8 channels, prunable" in text
    assert "      c2 (Conv, leaf)" in text
    assert "unprunable: reaches graph output 'c3'" in text
    assert (tmp_path / "trees.png").stat().st_size > 1000
    _, _, forest = association_trees(chain())
    assert format_trees(forest.groups) == text
    render_trees(forest.groups, tmp_path / "again.svg")


def test_merge_axis_follows_or_refuses_the_channel_axis() -> None:
    assert merge_axis([1, 512, 1, 1], [1, 512], 1) == (1, 1)
    assert merge_axis(["N", 64, 7, 7], ["N", 3136], 1) == (1, 49)
    assert merge_axis(["N", 64, 7, 7], ["N", 64, 49], 1) == (1, 1)
    assert merge_axis([1, 128, 256], [1, 128, 4, 64], 2) is None  # heads: split
    assert merge_axis([4, 8, 2], [32, 2], 1) is None  # merged with a dim before it
    assert merge_axis([None, 8], [8], 1) == (0, 1)  # the element count makes the unknown dim 1
    assert merge_axis([None, 8], [4, 2], 1) is None
    assert merge_axis(["batch", 49, 64], ["batch", 7, 7, 64], 2) == (3, 1)  # the same tail after the channels
    assert merge_axis(["b", 64, 7, 7], ["b", 64, 7, 7], 1) == (1, 1)
    # heads merged back where inference names the batch and sequence apart: the same tail after the channels
    assert merge_axis(["u1", "u2", 4, 32], ["u3", "u4", 128], 2) == (2, 32)


def test_split_axis_and_run_time_targets() -> None:
    """``[B, S, 128] -> [B, S, 4, 32]`` with the batch and sequence inferred under other names: the split is
    read from the tail after the channels; a run-time target's ``-1`` before a constant inner size is the
    head count."""
    assert split_axis(["u1", "u2", 128], ["u1", "u8", 4, 32], 2) == 2
    assert split_axis(["u1", "u2", 128], ["u1", "u8", 4, 16], 2) is None  # 64 is not 128
    assert split_axis(["u1", "u2", 128, 3], ["u1", 4, 32, 3], 2) == 1  # the tail decides where the split is
    assert sized_by_target(["b", "s", 128], ["b", "s", "unk", 32], [None, None, -1, 32], 2) == ["b", "s", 4, 32]
    assert sized_by_target(["b", "s", 128], ["b", "unk", "h", 32], [None, -1, 4, 32], 2) == ["b", "unk", 4, 32]
    assert sized_by_target(["b", "s", 128], ["b", "s", "unk", 48], [None, None, -1, 48], 2)[2] == "unk"


def test_transformer_mlp_hidden_units_are_pruned() -> None:
    """MatMul -> Add bias -> Gelu (as Erf math) -> MatMul: the hidden units of an MLP block."""
    b = Builder()
    h = b.node("Add", [b.node("MatMul", ["x", b.random("w1", 8, 16)], "fc1"), b.random("b1", 16)], "fc1_bias")
    g = b.node("Mul", [h, b.node("Sigmoid", [h], "gate")], "silu")
    model = b.model([b.node("MatMul", [g, b.random("w2", 16, 8)], "fc2")], input_shape=[2, 5, 8])
    from pruning_helpers import feeds, run

    pruned, report = prune_model(model, PruneOptions(rate=0.5))
    assert report.verification is not None and report.verification.ok
    assert shape_of(pruned, "w1") == [8, 8] and shape_of(pruned, "b1") == [8] and shape_of(pruned, "w2") == [8, 8]
    assert run(pruned, feeds(shape=[2, 5, 8]))[0].shape == (2, 5, 8)
    zero, _ = prune_model(model, PruneOptions(rate=0.0))
    np.testing.assert_array_equal(run(zero, feeds(shape=[2, 5, 8]))[0], run(model, feeds(shape=[2, 5, 8]))[0])


def test_an_op_of_another_domain_is_named_with_it_in_the_library(tmp_path: Path) -> None:
    """com.microsoft.Gelu is not the standard Gelu: the message and the library entry name its domain."""
    b = Builder()
    b.nodes.append(onnx.helper.make_node("Gelu", [b.conv("c1", "x", 3, 8)], ["g"], name="g", domain="com.microsoft"))
    b.conv("c2", "g", 8, 2)
    graph = onnx.helper.make_graph(
        b.nodes,
        "contrib",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("c2", onnx.TensorProto.FLOAT, [2, 2, 8, 8])],
        b.initializers,
    )
    opsets = [onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)]
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    _, _, forest = association_trees(model)
    (group,) = [g for g in forest.groups if any(r.node == "c1" for r in g.roots)]
    assert not group.prunable
    assert re.search(r'does not know \'com.microsoft.Gelu\'.*\{"com.microsoft.Gelu": "next-', group.reasons[0])
    extra = tmp_path / "library.json"
    extra.write_text(json.dumps({"com.microsoft.Gelu": "stop-process"}))
    _, _, forest = association_trees(model, extra)
    assert forest.groups[0].prunable and forest.groups[0].leaves == []
