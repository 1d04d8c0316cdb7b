"""A model that would run for ever (a Loop with a trip count of 2**62) is stopped, not waited on."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxsat.cli import main


def endless_loop() -> onnx.ModelProto:
    """Adds 1 to ``x`` 2**62 times: valid ONNX, and ONNX Runtime would run it for centuries."""
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "one"], ["v_out"]), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "keep_going", "x"], ["y"], body=body)],
        "endless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [
            helper.make_tensor("trips", TensorProto.INT64, [], [2**62]),
            helper.make_tensor("keep_going", TensorProto.BOOL, [], [True]),
        ],
    )
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def test_endless_model_is_stopped_at_the_run_timeout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "endless.onnx", tmp_path / "out.onnx"
    onnx.save(endless_loop(), str(source))
    started = time.monotonic()
    code = main(["optimize", str(source), "-o", str(target), "--run-timeout", "0.5"])
    err = capfd.readouterr().err
    assert code == 6
    assert (
        err == "onnxsat: error: ONNX Runtime did not finish running the input model within 0.5 s (see --run-timeout)\n"
    )
    assert time.monotonic() - started < 10
    assert not target.exists()


@pytest.mark.parametrize("value", ["0", "-3"])
def test_run_timeout_must_be_positive(value: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "endless.onnx"
    onnx.save(endless_loop(), str(source))
    assert main(["optimize", str(source), "-o", str(tmp_path / "o.onnx"), "--run-timeout", value]) == 9
    assert capfd.readouterr().err.count("\n") == 1


def test_onnx_runtime_out_of_memory_is_exit_11_not_the_models_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT says std::bad_alloc where Python would raise MemoryError: "cannot run the input model" (exit 6) blamed
    the model for the machine's memory."""
    from onnxsat.errors import OutOfMemoryError
    from onnxsat.verification import run_model

    def exhausted(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Non-zero status code returned while running Conv node. Status Message: std::bad_alloc")

    monkeypatch.setattr(ort.InferenceSession, "run", exhausted)
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    with pytest.raises(OutOfMemoryError, match="ONNX Runtime ran out of memory running the input model"):
        run_model(model, {"x": np.ones((1, 4), np.float32)}, "input model")
    assert OutOfMemoryError.exit_code == 11
