"""Which weights sparsify touches: a fixed kernel of whole numbers stays dense, whatever the sparsity asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.sparsity.targets import sparsity_targets


def box_decoder(path: Path) -> Path:
    """A learned 1x1 Conv (64 -> 64), then YOLOv8/11's DFL decode: a softmax over 16 bins read by a 1x1
    Conv whose weights are the bin positions 0..15 (fixed, not learned)."""
    rng = np.random.default_rng(0)
    learned = numpy_helper.from_array(rng.normal(size=(64, 64, 1, 1)).astype(np.float32) * 0.1, "learned")
    bins = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1), "dfl")
    nodes = [
        helper.make_node("Conv", ["x", "learned"], ["h"], name="head"),
        helper.make_node("Reshape", ["h", "shape"], ["r"]),
        helper.make_node("Softmax", ["r"], ["p"], axis=1),
        helper.make_node("Conv", ["p", "dfl"], ["y"], name="dfl_conv"),
    ]
    shape = numpy_helper.from_array(np.array([1, 16, 4, 8], np.int64), "shape")
    graph = helper.make_graph(
        nodes,
        "decoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 8])],
        [learned, bins, shape],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_a_fixed_kernel_of_whole_numbers_is_no_target_and_keeps_its_values(tmp_path: Path) -> None:
    source, out = box_decoder(tmp_path / "decoder.onnx"), tmp_path / "sparse.onnx"
    assert [t.name for t in sparsity_targets(onnx.load(source))] == ["learned"]
    assert main(["sparsify", str(source), "-o", str(out), "--sparsity", "0.5"]) == 0
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    np.testing.assert_array_equal(weights["dfl"].ravel(), np.arange(16))
    assert np.mean(weights["learned"] == 0) >= 0.45
