"""The quantization benchmark's table code on tiny synthetic models: no torch, no downloads, a few seconds.

The real run (``python -m tools.quantize_bench``) needs the real-model cache, a trained ResNet and minutes;
these check that every quantizer's outcome (a valid file, a file ORT refuses, no file, a tool not
installed) becomes a row, that timing and scoring use the held-out samples, and the geometric means.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tools.quantize_bench import quantizers
from tools.quantize_bench.bench import bench_case, document
from tools.quantize_bench.cases import Case, run_batched
from tools.quantize_bench.latency import load_error
from tools.quantize_bench.quantizers import Quantized, neural_compressor, onnxsat_note, ort_dynamic, ort_static
from tools.quantize_bench.table import FP32, Row, effective_speedup, geomeans, markdown


def tiny_convnet(path: Path, seed: int = 0) -> Path:
    """Conv-Relu-Conv-Relu-GlobalAveragePool-Flatten-Gemm on [N, 3, 8, 8], batch dynamic, opset 17."""
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="head", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [
            weight("w1", 8, 3, 3, 3),
            weight("b1", 8),
            weight("w2", 8, 8, 3, 3),
            weight("b2", 8),
            weight("w3", 4, 8),
            weight("b3", 4),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture
def case(tmp_path: Path) -> Case:
    path = tiny_convnet(tmp_path / "tiny.onnx")
    rng = np.random.default_rng(1)
    calibration = rng.random((16, 3, 8, 8), dtype=np.float32)
    evaluation = rng.random((8, 3, 8, 8), dtype=np.float32)
    reference = run_batched(path, "x", evaluation, 4).argmax(axis=1)

    def score(candidate: Path) -> float:
        return float(np.mean(run_batched(candidate, "x", evaluation, 4).argmax(axis=1) == reference))

    return Case("tiny", path, "x", calibration, evaluation, score, "same label vs fp32")


def test_ort_quantizers_write_files_ort_loads(case: Case, tmp_path: Path) -> None:
    for quantize in (ort_static, ort_dynamic):
        result = quantize(case, tmp_path)
        assert result.path is not None and result.path.exists(), result.note
        assert result.seconds is not None and result.seconds >= 0
        assert load_error(result.path, case.timing_feeds) is None


def test_every_outcome_is_a_row(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refused = tmp_path / "refused.onnx"
    refused.write_bytes(b"not a model")

    def writes_garbage(case: Case, out_dir: Path) -> Quantized:
        return Quantized("garbage", refused, 0.1)

    def writes_nothing(case: Case, out_dir: Path) -> Quantized:
        return Quantized("nothing", None, 0.2, "failed: boom")

    monkeypatch.setitem(quantizers.QUANTIZERS, "garbage", writes_garbage)
    monkeypatch.setitem(quantizers.QUANTIZERS, "nothing", writes_nothing)
    monkeypatch.setitem(
        quantizers.QUANTIZERS, "inc", lambda case, out: neural_compressor(case, out, tmp_path / "no" / "python")
    )
    rows = bench_case(case, tmp_path, ["ort-static", "garbage", "nothing", "inc"], rounds=4, warmup=1)
    by = {row.quantizer: row for row in rows}
    assert [row.quantizer for row in rows] == [FP32, "ORT static", "garbage", "nothing", "neural-compressor"]
    assert by[FP32].latency.endswith(" ms") and by[FP32].score_value == 1.0
    assert by["ORT static"].valid == "yes" and by["ORT static"].speedup is not None
    assert by["ORT static"].score.endswith("same label vs fp32")
    assert by["garbage"].valid.startswith("no: ") and by["garbage"].speedup is None
    assert by["nothing"].valid == "-" and by["nothing"].note == "failed: boom"
    assert by["neural-compressor"].note.startswith("not run: no venv")
    text = document(rows, ["--models", "tiny"], 4, 1, ["ort-static", "inc"])
    assert "python -m tools.quantize_bench --models tiny" in text and "| tiny | ORT static | yes |" in text


def test_labelled_scores_say_points(case: Case, tmp_path: Path) -> None:
    case.labelled = True
    rows = bench_case(case, tmp_path, ["ort-dynamic"], rounds=2, warmup=1)
    assert rows[0].score == "100.00% top-1 (+0.00 pt)"
    assert "pt)" in rows[1].score


def test_geomeans_count_missing_and_disagreeing_as_one() -> None:
    rows = [
        Row("a", "q", "yes", "", "", None, None, speedup=4.0, score_value=1.0),
        Row("b", "q", "yes", "", "", None, None, speedup=2.0, score_value=0.5),
        Row("c", "q", "no: refused", "", "", None, None),
    ]
    assert effective_speedup(rows[1]) == 2.0 and effective_speedup(rows[1], 0.99) == 1.0
    assert effective_speedup(None) == 1.0
    (line,) = geomeans(rows, ["a", "b", "c", "absent"], ["q", "unknown"])
    assert "geometric mean 2.00x over 3 models" in line and "1.59x counting results under 99%" in line
    assert "|" in markdown(rows) and markdown(rows).count("\n") == 4


def test_onnxsat_note_reads_the_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(
        '{"chosen": "static", "nodes": [{"quantized": true}, {"quantized": false}],'
        ' "held_out": {"drop": 0.004}, "latency": {"speedup": 2.5}}'
    )
    assert onnxsat_note(report) == "mode static, 1/2 nodes int8, its held-out drop 0.40%, its own timing 2.50x"
    assert onnxsat_note(tmp_path / "missing.json") == ""


def test_onnxsat_runs_as_a_subprocess(case: Case, tmp_path: Path) -> None:
    """On a model this small int8 rarely pays, so onnxsat may write nothing: either outcome is a row."""
    case.extra_args = ("--no-node-timing",)
    result = quantizers.onnxsat(case, tmp_path)
    assert result.seconds is not None and result.seconds > 0
    assert (tmp_path / "tiny.calibration.npz").exists()
    if result.path is None:
        assert result.note.startswith("exit "), result.note
    else:
        assert load_error(result.path, case.timing_feeds) is None and result.note.startswith("mode ")
