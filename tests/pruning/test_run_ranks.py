"""Ranks ONNX's shape inference loses (every shape after a scikit-learn ``Scaler``, an ``ai.onnx.ml``
op) are read from one run in ONNX Runtime, so a MatMul there still starts a channel group."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pruning_helpers import kept, prune, run

from onnxsat.errors import SettingsError
from onnxsat.pruning.graph import GraphIndex, run_ranks
from onnxsat.pruning.prune import PruneOptions, prune_model


def scaled_mlp() -> onnx.ModelProto:
    """Scaler -> MatMul -> Add -> Relu -> MatMul, as skl2onnx writes an MLPClassifier behind a StandardScaler."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(size=(6, 16)).astype(np.float32),
        "b1": rng.normal(size=(1, 16)).astype(np.float32),
        "w2": rng.normal(size=(16, 3)).astype(np.float32),
    }
    graph = helper.make_graph(
        [
            helper.make_node(
                "Scaler", ["x"], ["scaled"], "scaler", domain="ai.onnx.ml", offset=[0.0] * 6, scale=[2.0] * 6
            ),
            helper.make_node("MatMul", ["scaled", "w1"], ["h"], "fc1"),
            helper.make_node("Add", ["h", "b1"], ["hb"], "bias1"),
            helper.make_node("Relu", ["hb"], ["r"], "relu"),
            helper.make_node("MatMul", ["r", "w2"], ["y"], "fc2"),
        ],
        "scaled_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def test_a_rank_inference_lost_is_read_from_a_run() -> None:
    model = scaled_mlp()
    index = GraphIndex(model)
    assert index.shape("scaled") is None and index.rank("scaled") == 2 and index.rank("h") == 2
    pruned, report = prune(model, rate=0.5)
    assert kept(report, "fc1") == 8
    assert run(pruned, {"x": np.ones((2, 6), np.float32)})[0].shape == (2, 3)


def test_a_run_that_fails_says_nothing_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """PLCMOS's frames are dynamic, 1 in the random run, and its first Conv (kernel 3 along them) fails there:
    no ranks are read, and ORT's coloured error line no longer reaches stderr beside ONNXSat's own output."""

    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], "conv"),
            helper.make_node("Scaler", ["c"], ["y"], "scaler", domain="ai.onnx.ml", offset=[0.0], scale=[2.0]),
        ],
        "frames",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "frames", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    assert run_ranks(model, {}) == {}
    assert "onnxruntime" not in capfd.readouterr().err


def test_a_squeeze_a_run_at_batch_one_misranks_leaves_its_group_unprunable() -> None:
    """AECMOS ends in Add(bias, MatMul) -> Squeeze -> Sigmoid -> Mul(4.0): inference loses the Squeeze's shape
    (no axes, dynamic batch), the run at batch 1 gives it rank 1 while the channels sit on axis 1, and the scalar
    operand's shape [] was indexed there: "internal error: IndexError". The group is now refused, saying why."""
    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], "fc"),
            helper.make_node("Add", ["bias", "h"], ["hb"], "bias_add"),
            helper.make_node("Squeeze", ["hb"], ["squeezed"], "squeeze"),
            helper.make_node("Sigmoid", ["squeezed"], ["s"], "sigmoid"),
            helper.make_node(
                "Constant", [], ["four"], "four", value=numpy_helper.from_array(np.array(4.0, np.float32))
            ),
            helper.make_node("Mul", ["s", "four"], ["y"], "scale"),
        ],
        "squeezed_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(rng.normal(size=(6, 2)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.normal(size=2).astype(np.float32), "bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6)
    index = GraphIndex(model)
    assert index.shape("four") == [] and index.rank("squeezed") == 1  # the run at batch 1: [2], not [N, 2]
    with pytest.raises(SettingsError, match="has shape \\[\\], of another rank"):
        prune_model(model, PruneOptions(rate=0.5, normalize=False))
