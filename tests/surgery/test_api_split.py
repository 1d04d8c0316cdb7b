"""Surgery.split, Surgery.merge and compare: a split model merged back computes the original outputs,
edits made to the parts are checked against the unsplit model, and impossible cuts are refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.errors import SettingsError
from onnxsat.inputs import random_inputs
from onnxsat.surgery.api import Surgery, SurgeryError, format_differences
from onnxsat.verification import run_model

RNG = np.random.default_rng(1)


def residual_block() -> onnx.ModelProto:
    """x -> Conv -> Mul(scale) -> Relu = t1 -> Conv -> Mul(scale) = n -> Add(n, t1) -> Identity -> Reshape -> y.

    ``scale`` is read on both sides of a cut at t1, and the Add reads t1 past a cut at n alone.
    """
    inits = [
        numpy_helper.from_array(RNG.standard_normal((2, 2, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(RNG.standard_normal((2, 2, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([0.5], np.float32), "scale"),
        numpy_helper.from_array(np.array([1, 32], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["a", "scale"], ["m"], name="mul1"),
        helper.make_node("Relu", ["m"], ["t1"], name="relu"),
        helper.make_node("Conv", ["t1", "w2"], ["b"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["b", "scale"], ["n"], name="mul2"),
        helper.make_node("Add", ["n", "t1"], ["s"], name="add"),
        helper.make_node("Identity", ["s"], ["i"], name="identity"),
        helper.make_node("Reshape", ["i", "flat"], ["y"], name="flatten"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])
    graph = helper.make_graph(nodes, "block", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def io_names(surgery: Surgery) -> tuple[list[str], list[str]]:
    graph = surgery.model.graph
    return [item.name for item in graph.input], [item.name for item in graph.output]


def test_head_then_tail_computes_the_original_and_merge_restores_it():
    original = residual_block()
    head, tail = Surgery(original).split(at=["t1"])
    assert io_names(head) == (["x"], ["t1"])
    assert io_names(tail) == (["t1"], ["y"])
    feeds = random_inputs(original)
    (t1,) = run_model(head.model, feeds, "head")
    (y,) = run_model(tail.model, {"t1": t1}, "tail")
    np.testing.assert_array_equal(y, run_model(original, feeds, "original")[0])

    merged = Surgery.merge(head, tail)
    merged.check()
    assert io_names(merged) == (["x"], ["y"])
    assert [t.name for t in merged.model.graph.initializer].count("scale") == 1  # read by both parts, kept once
    (row,) = merged.compare(original)
    assert (row.max_abs_diff, row.note) == (0.0, "")


def test_edits_to_the_parts_are_compared_with_the_unsplit_model():
    """A two-tensor cut (the residual Add reads both), an edit in the tail, and a merge: the merged
    model's original is the unsplit model, so compare() checks the edit against it."""
    head, tail = Surgery(residual_block()).split(at=["n", "t1"])
    assert io_names(head) == (["x"], ["n", "t1"])
    tail.remove_nodes(["identity"])
    merged = Surgery.merge(head, tail)
    assert "identity" not in [node.name for node in merged.model.graph.node]
    assert len(merged.original.graph.node) == len(residual_block().graph.node)
    merged.check()
    (row,) = merged.compare()
    assert row.max_abs_diff == 0.0


@pytest.mark.parametrize(
    ("at", "words"),
    [
        (["nope"], "cannot split at 'nope': the model has no tensor of that name"),
        (["t1", "nope"], "'nope': the model has no tensor"),
        (["scale"], "'scale': it is an initializer"),
        (["x"], "'x': it is a graph input"),
        (["n"], "output 'y' also depends on graph input 'x' by a path that bypasses the cut"),
        ([], "needs a list of one or more tensor names"),
        ("t1", "needs a list of one or more tensor names"),
    ],
)
def test_impossible_cuts_are_refused_in_one_line(at, words):
    with pytest.raises(SurgeryError) as caught:
        Surgery(residual_block()).split(at=at)
    assert isinstance(caught.value, SettingsError) and caught.value.exit_code == 9
    assert "\n" not in str(caught.value)
    assert words in str(caught.value)


def test_merge_refuses_parts_that_do_not_connect_or_disagree():
    head, tail = Surgery(residual_block()).split(at=["t1"])
    with pytest.raises(SurgeryError, match="no output of the head is an input of the tail"):
        Surgery.merge(tail, head)
    tail.add_initializer("scale", np.array([2.0], np.float32), replace=True)
    with pytest.raises(SurgeryError, match="both have an initializer 'scale', with different values"):
        Surgery.merge(head, tail)


def test_compare_reports_reference_minus_edited_per_output():
    surgery = Surgery(residual_block())
    surgery.add_initializer("one", np.array([1.0], np.float32))
    surgery.model.graph.node.append(helper.make_node("Add", ["y_raw", "one"], ["y"], name="plus_one"))
    surgery.model.graph.node[-2].output[0] = "y_raw"  # the Reshape now feeds the extra Add
    inputs = {"x": np.ones((1, 2, 4, 4), np.float32)}
    (row,) = surgery.compare(inputs=inputs)
    assert (row.name, row.shape) == ("y", (1, 32))
    assert row.min_diff == pytest.approx(-1.0) and row.max_diff == pytest.approx(-1.0)
    assert row.max_abs_diff == pytest.approx(1.0)
    table = format_differences([row]).splitlines()
    assert table[0].split()[:2] == ["output", "shape"]
    assert table[1].split()[0] == "y" and "-1" in table[1]


def test_compare_refuses_missing_data_or_outputs():
    surgery = Surgery(residual_block())
    with pytest.raises(SurgeryError, match="no data for input 'x'"):
        surgery.compare(inputs={"other": np.zeros(1, np.float32)})
    surgery.model.graph.output[0].name = "renamed"
    surgery.model.graph.node[-1].output[0] = "renamed"
    with pytest.raises(SurgeryError, match="the edited model has no output 'y'"):
        surgery.compare()
