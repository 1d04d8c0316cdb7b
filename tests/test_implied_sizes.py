"""The sizes of dynamic input dims that a model's weights imply, and the runs that use them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.implied_sizes import implied_sizes


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], weights: dict[str, np.ndarray]
) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name) for name, shape in weights.items()
    ]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _frames_by_features(recurrent: bool) -> onnx.ModelProto:
    """``[frames, features]`` in, both dynamic, as madmom's nets declare them: 6 features for the weights."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["frames", "features"])
    if not recurrent:
        return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], {"w": (6, 4)})
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("Constant", [], ["axes"], value=axes),
        helper.make_node("Unsqueeze", ["x", "axes"], ["batched"]),
        helper.make_node("LSTM", ["batched", "w", "r"], ["y"], hidden_size=3),
    ]
    return _model(nodes, [x], {"w": (1, 12, 6), "r": (1, 12, 3)})


@pytest.mark.parametrize("recurrent", [False, True], ids=["matmul", "lstm"])
def test_a_contracted_or_recurrent_input_axis_takes_the_weights_size(recurrent: bool) -> None:
    model = _frames_by_features(recurrent)
    assert implied_sizes(model, {"x": [0, 1]}) == {("x", 1): 6}


def test_channels_broadcasts_and_shared_names_imply_sizes_and_a_contradiction_implies_none() -> None:
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", "c", "h", "w"])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["n", "m", "h2", "w2"])
    shift = helper.make_tensor_value_info("shift", TensorProto.FLOAT, ["c"])  # read by nothing, named like channels
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [-1, -1])
    nodes = [
        helper.make_node("Conv", ["image", "k"], ["conv"], group=2),  # 2 groups of 3 channels: 6 in
        helper.make_node("Mul", ["mask", "conv"], ["masked"]),
        helper.make_node("Gemm", ["scale", "g"], ["scaled"], transB=1),  # [?, 5] x [4, 5]^T
        helper.make_node("Add", ["scaled", "bias"], ["y"]),
    ]
    model = _model(nodes, [image, mask, shift, scale], {"k": (8, 3, 3, 3), "g": (4, 5), "bias": (7, 4)})
    unsized = {"image": [0, 1, 2, 3], "mask": [0, 1, 2, 3], "shift": [0], "scale": [0, 1]}
    sizes = implied_sizes(model, unsized)
    assert sizes[("image", 1)] == sizes[("shift", 0)] == 6  # one name, one size
    assert sizes[("mask", 1)] == 8  # broadcast against the convolution's 8 output channels
    assert sizes[("scale", 1)] == 5 and sizes[("scale", 0)] == 7  # the bias broadcasts over 7 rows
    assert ("image", 2) not in sizes and ("image", 0) not in sizes

    contradicted = _model(
        [helper.make_node("MatMul", ["x", "a"], ["p"]), helper.make_node("MatMul", ["x", "b"], ["q"]),
         helper.make_node("Add", ["p", "q"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "f"])],
        {"a": (6, 2), "b": (5, 2)},
    )  # fmt: skip
    assert implied_sizes(contradicted, {"x": [0, 1]}) == {}


def test_a_model_whose_weights_fix_an_unsized_dim_runs_at_that_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, output, report = tmp_path / "lstm.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(_frames_by_features(recurrent=True), source)
    assert main(["optimize", str(source), "-o", str(output), "--report", str(report)]) == 0
    said = (
        "ONNX Runtime cannot run the model with its unsized dynamic dims at 1; with the sizes its weights imply "
        "(x axis 1 at 6): x as [1, 6]"
    )
    assert f"sizes: {said}" in capsys.readouterr().out
    assert json.loads(report.read_text())["run"]["sizes"] == said


def test_a_model_without_a_batch_whose_first_axis_must_exceed_one_runs_with_it_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3 x 3 convolution over ``[frames, features]`` made an image: one frame is too few for its kernel."""
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    nodes = [
        helper.make_node("Constant", [], ["axes"], value=axes),
        helper.make_node("Unsqueeze", ["x", "axes"], ["image"]),
        helper.make_node("Conv", ["image", "k"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["frames", "features"])
    source, output = tmp_path / "tcn.onnx", tmp_path / "out.onnx"
    onnx.save(_model(nodes, [x], {"k": (2, 1, 3, 3)}), source)
    assert main(["optimize", str(source), "-o", str(output)]) == 0
    out = capsys.readouterr().out
    assert "at 64 with the first axes too: x as [64, 64]" in out and output.exists()
