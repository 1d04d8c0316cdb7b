"""``--metric-output`` names the outputs the budget reads; the others are not gathered at all, since one may
hold a different count per sample (NonMaxSuppression's, NonZero's) that no metric could stack."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main


def detector(path: Path) -> Path:
    """Logits per image, and the positions of bright pixels: as many as the image has."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((10, 8)) * 0.3).astype(np.float32), "fc"),
        numpy_helper.from_array(np.array(1.5, np.float32), "bright"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["g"]),
            helper.make_node("Flatten", ["g"], ["f"]),
            helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1),
            helper.make_node("Greater", ["x", "bright"], ["mask"]),
            helper.make_node("NonZero", ["mask"], ["found"]),
        ],
        "detector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
            helper.make_tensor_value_info("found", TensorProto.INT64, [4, "K"]),
        ],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize(
    "command", [["prune", "--rate", "0.25"], ["sparsify", "--sparsity", "0.3", "--max-drop", "50%"]]
)
def test_only_the_named_outputs_are_gathered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    model = detector(tmp_path / "detector.onnx")
    data = tmp_path / "data.npz"
    np.savez(data, inputs=np.random.default_rng(1).standard_normal((40, 3, 8, 8)).astype(np.float32))
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    base = [command[0], str(model), "-o", str(out), *command[1:], "--data", str(data), "--report", str(report)]
    assert main(base) != 0
    error = capsys.readouterr().err.strip()
    assert "output 'found' has shape [4, " in error
    assert error.endswith("; name the outputs to score with --metric-output")
    assert main([*base, "--metric-output", "logits"]) == 0
    written = json.loads(report.read_text())
    assert set(written["metrics"]) == {"logits"}
    assert written["run"]["inputs"] == {"given": [], "random": [], "data": ["x"]}
    assert capsys.readouterr().out.rstrip().endswith("inputs: x from the data")
