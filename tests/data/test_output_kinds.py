"""Outputs that are not tensors: scikit-learn exports (skl2onnx) return class probabilities as a
sequence of maps (ZipMap). They are read as ``[N, classes]`` so budgets score them, instead of
stopping sparsify, quantize and compress with an internal error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.data.outputs import OutputRunner
from onnxsat.data.sources import Dataset
from onnxsat.errors import DataError
from onnxsat.output_values import as_array


def zipmap_classifier(path: Path) -> Path:
    """X [N, 16] -> MatMul -> Softmax -> ZipMap (probabilities by class) and ArgMax (the label)."""
    rng = np.random.default_rng(0)
    probabilities = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "w"], ["scores"], "fc"),
            helper.make_node("Softmax", ["scores"], ["p"], "softmax", axis=1),
            helper.make_node("ArgMax", ["p"], ["label"], "argmax", axis=1, keepdims=0),
            helper.make_node(
                "ZipMap", ["p"], ["output_probability"], "zipmap", domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]
            ),
        ],
        "zipmap",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 16])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_value_info("output_probability", probabilities),
        ],
        [numpy_helper.from_array(rng.normal(size=(16, 3)).astype(np.float32), "w")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def test_a_sequence_of_maps_is_read_as_samples_by_classes(tmp_path: Path) -> None:
    path = zipmap_classifier(tmp_path / "zipmap.onnx")
    x = np.random.default_rng(1).normal(size=(5, 16)).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = OutputRunner(session, "X", Dataset(x, None, "x"), batch_size=2).run()
    probabilities = outputs["output_probability"]
    assert probabilities.shape == (5, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert (probabilities.argmax(axis=1) == outputs["label"]).all()


def test_outputs_of_other_kinds() -> None:
    stacked = as_array([np.zeros(2), np.ones(2)], "seq")
    assert stacked.shape == (2, 2)
    with pytest.raises(DataError, match="output 'odd' is a list ONNXSat cannot read as samples"):
        as_array([np.zeros(2), np.ones(3)], "odd")


def test_sparsify_keeps_a_zipmap_classifier_inside_its_budget(tmp_path: Path) -> None:
    path = zipmap_classifier(tmp_path / "zipmap.onnx")
    data = tmp_path / "data.npz"
    np.savez(data, inputs=np.random.default_rng(2).normal(size=(64, 16)).astype(np.float32))
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    argv = ["sparsify", str(path), "-o", str(out), "--data", str(data), "--max-drop", "2%", "--report", str(report)]
    assert main(argv) == 0 and out.exists()
    scored = {o["output"]: o["metric"] for o in json.loads(report.read_text())["baseline"]["outputs"]}
    assert scored == {"label": "label", "output_probability": "top1"}
