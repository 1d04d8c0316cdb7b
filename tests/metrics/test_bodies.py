"""Weights inside If bodies: lifted to the main graph with the same outputs, pruned when the data reaches
them, left dense (and said) when it never does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from models import FEATURES, branches
from onnx import numpy_helper

from onnxsat.cli import main
from onnxsat.sparsity.bodies import lift_body_weights
from onnxsat.sparsity.targets import sparsity_targets


def branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def run(model: onnx.ModelProto, x: np.ndarray, switch: bool) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "switch": np.array(switch)})[0]


def test_lifting_keeps_outputs_and_names_each_branchs_weight_apart(tmp_path: Path) -> None:
    model = onnx.load(branches(tmp_path / "b.onnx"))
    lifted, names = lift_body_weights(model)
    assert len(names) == 3 and len(set(names)) == 3  # then, and the nested If's two branches: all called "w"
    onnx.checker.check_model(lifted)
    assert not any(n.op_type == "Constant" for n in branch(lifted.graph.node[0], "then_branch").node)
    x = np.random.default_rng(0).normal(size=(5, FEATURES)).astype(np.float32)
    for switch in (True, False):
        np.testing.assert_array_equal(run(lifted, x, switch), run(model, x, switch))
    targets = sparsity_targets(lifted)
    assert {t.name for t in targets} == set(names) and all(t.in_body for t in targets)
    assert len(model.graph.initializer) == 0  # the input model is left as it was


def test_sparsify_prunes_the_branch_the_data_takes_and_leaves_the_other_dense(tmp_path: Path) -> None:
    path = branches(tmp_path / "b.onnx")
    feeds, data = tmp_path / "switch.npz", tmp_path / "data.npz"
    np.savez(feeds, switch=np.array(True))
    np.savez(data, inputs=np.random.default_rng(1).normal(size=(60, FEATURES)).astype(np.float32))
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    args = ["sparsify", str(path), "--max-drop", "10%", "--data", str(data), "--inputs", str(feeds)]
    assert main([*args, "-o", str(out), "--report", str(report)]) == 0
    found = json.loads(report.read_text())
    assert len(found["layers"]) == 1 and found["overall"] > 0
    assert any("left dense: the data never reaches them" in note for note in found["notes"])
    written = onnx.load(out)
    pruned = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    chosen = found["layers"][0]["name"]
    else_body = branch(onnx.load(path).graph.node[0], "else_branch")
    original_else = branch(else_body.node[0], "then_branch").node[0].attribute[0].t
    for name in set(pruned) - {chosen}:  # the else branch's weights, never reached: untouched
        np.testing.assert_array_equal(pruned[name], numpy_helper.to_array(original_else))
    assert len(pruned) == 3 and np.count_nonzero(pruned[chosen] == 0) > 0


def test_a_budget_scored_on_one_branch_says_the_other_was_not_measured(tmp_path: Path) -> None:
    """A merged decoder's ``use_cache_branch`` set alike in every sample: quantization changes both branches,
    and the data scores one."""
    path = branches(tmp_path / "b.onnx")
    feeds, data = tmp_path / "switch.npz", tmp_path / "data.npz"
    np.savez(feeds, switch=np.array(True))
    np.savez(data, inputs=np.random.default_rng(1).normal(size=(60, FEATURES)).astype(np.float32))
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    args = [
        "quantize",
        str(path),
        "--mode",
        "dynamic",
        "--max-drop",
        "50%",
        "--data",
        str(data),
        "--inputs",
        str(feeds),
    ]
    assert main([*args, "-o", str(out), "--report", str(report), "--no-node-timing"]) == 0
    notes = json.loads(report.read_text())["notes"]
    assert any("sets switch alike, so only its then_branch was scored" in note for note in notes), notes


def test_data_taking_both_branches_raises_no_such_note(tmp_path: Path) -> None:
    from onnxsat.data.sources import Dataset
    from onnxsat.metrics.scorer import untaken_branches

    model = onnx.load(branches(tmp_path / "b.onnx"))
    x = np.zeros((4, FEATURES), np.float32)
    both = Dataset(x, None, "rows", companions={"switch": np.array([True, False, True, True])})
    assert untaken_branches(model, {}, both) == []
    one = Dataset(x, None, "rows", companions={"switch": np.array([False] * 4)})
    (note,) = untaken_branches(model, {}, one)
    assert "only its else_branch was scored; its then_branch was changed too" in note
