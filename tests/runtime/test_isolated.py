"""A model ONNX Runtime crashes on is a failed candidate said in one line, not an aborted process."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsat.errors import RuntimeUnsupportedError
from onnxsat.runtime.isolated import crash_in_child, has_control_flow


def _abort(path: str, data: str, level: int) -> None:
    """What ORT's failed C++ assertion does to its process."""
    os.abort()


def _branchy() -> onnx.ModelProto:
    """y = x + 1 or x - 1, by an If on a flag."""

    def branch(op: str) -> onnx.GraphProto:
        node = helper.make_node(op, ["x", "one"], ["out"])
        return helper.make_graph([node], op, [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])

    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=branch("Add"), else_branch=branch("Sub"))],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [onnx.numpy_helper.from_array(np.ones(2, np.float32), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


FEEDS = {"x": np.zeros(2, np.float32), "flag": np.array(True)}


def test_a_model_that_runs_is_no_crash_and_a_killed_child_is_said() -> None:
    model = _branchy()
    assert has_control_flow(model)
    assert crash_in_child(model, FEEDS) is None
    assert crash_in_child(model, FEEDS, work=_abort) == (
        "ONNX Runtime crashed on it (SIGABRT) when loading or running it with its optimizations on"
    )


def test_a_quantized_candidate_that_crashes_ort_fails_its_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """quantize checks a candidate with control flow in a child before scoring it in its own process."""
    from onnxsat.quantization import quantize as quantize_module

    monkeypatch.setattr(quantize_module, "crash_in_child", lambda model, feeds: "ONNX Runtime crashed on it (SIGABRT)")
    with pytest.raises(RuntimeUnsupportedError, match=r"the static model: ONNX Runtime crashed on it \(SIGABRT\)"):
        quantize_module._check_loads(_branchy(), "static", FEEDS)
