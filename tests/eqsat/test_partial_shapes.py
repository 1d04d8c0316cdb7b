"""Sizes read from a partly static shape fold to constants (eqsat/partial_shapes.py); unknown sizes stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.partial_shapes import fold_partial_shapes

INT64 = TensorProto.INT64


def _model() -> onnx.ModelProto:
    """x [n, 3, 5]: Gather(shape, 1) and shape[1:] are known, Gather(shape, 0) and shape[0:2] are not."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 5])
    constants = {
        "one": np.array(1, dtype=np.int64),
        "minus_one": np.array([-1], dtype=np.int64),
        "zero": np.array(0, dtype=np.int64),
        "starts": np.array([1], dtype=np.int64),
        "ends": np.array([2**63 - 1], dtype=np.int64),
        "starts0": np.array([0], dtype=np.int64),
        "ends2": np.array([2], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["channels"], axis=0),
        helper.make_node("Gather", ["shape", "minus_one"], ["last"], axis=0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Slice", ["shape", "starts", "ends"], ["tail"]),
        helper.make_node("Slice", ["shape", "starts0", "ends2"], ["head"]),
        helper.make_node("Shape", ["x"], ["from_one"], start=1),
        helper.make_node("Gather", ["from_one", "zero"], ["channels_again"], axis=0),
    ]
    outputs = {"channels": [], "last": [1], "batch": [], "tail": [2], "head": [2], "channels_again": []}
    graph = helper.make_graph(
        nodes,
        "g",
        [x],
        [helper.make_tensor_value_info(name, INT64, dims) for name, dims in outputs.items()],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_known_sizes_fold_and_unknown_ones_stay() -> None:
    model = _model()
    folded, count = fold_partial_shapes(model, onnx.shape_inference.infer_shapes(model))
    assert count == 4
    values = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    assert values["channels"] == 3 and values["last"].tolist() == [5] and values["tail"].tolist() == [3, 5]
    assert values["channels_again"] == 3
    remaining = [n.output[0] for n in folded.graph.node if n.op_type in ("Gather", "Slice")]
    assert sorted(remaining) == ["batch", "head"]
    for batch in (1, 4):
        x = np.zeros((batch, 3, 5), np.float32)
        for want, got in zip(_run(model, x), _run(folded, x), strict=True):
            np.testing.assert_array_equal(want, got)


def test_the_optimizer_folds_them_and_verifies() -> None:
    model = _model()
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok
    assert sorted(n.op_type for n in result.graph.node).count("Gather") == 1  # the batch size alone
    x = np.ones((2, 3, 5), np.float32)
    for want, got in zip(_run(model, x), _run(result, x), strict=True):
        np.testing.assert_array_equal(want, got)
