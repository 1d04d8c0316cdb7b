"""One node quantized alone: every mode honours ``only``; the splice of a one-node quantization computes
what ORT's quantizer makes of the whole model with that node only (static: its output rounded too)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader

from onnxsat.quantization.alone import quantize_alone
from onnxsat.quantization.modes import MODES, Calibration


def attention_like() -> onnx.ModelProto:
    """Two weighted MatMuls, one activation-by-activation MatMul between them (as attention's Q·Kᵀ), a
    Gemm, and a weight read twice: what the splice must leave as it was."""
    rng = np.random.default_rng(5)
    weight = lambda *shape: rng.normal(size=shape).astype(np.float32) * 0.1  # noqa: E731
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "wq"], ["q"], name="query"),
            helper.make_node("MatMul", ["x", "wk"], ["k"], name="key"),
            helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0], name="kt"),
            helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
            helper.make_node("MatMul", ["scores", "x"], ["mixed"], name="mix"),
            helper.make_node("Gemm", ["mixed", "wo", "bo"], ["y"], name="out"),
            helper.make_node("MatMul", ["y", "wq2"], ["z"], name="again"),
        ],
        "attention_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [16, 64])],
        [
            numpy_helper.from_array(weight(64, 64), "wq"),
            numpy_helper.from_array(weight(64, 64), "wk"),
            numpy_helper.from_array(weight(64, 64), "wo"),
            numpy_helper.from_array(weight(64), "bo"),
            numpy_helper.from_array(weight(64, 64), "wq2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def feeding(feeds: dict[str, np.ndarray]) -> CalibrationDataReader:
    """A calibration reader giving ``feeds`` once."""

    class Once(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = iter([feeds])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.left, None)

    return Once()


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def integer_ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node if n.op_type in ("MatMulInteger", "MatMulNBits"))


@pytest.mark.parametrize("mode", ["dynamic", "weight-only"])
def test_only_quantizes_the_one_node(mode: str) -> None:
    model = attention_like()
    for name in ("query", "out") if mode == "dynamic" else ("query",):  # 4-bit weight-only is for MatMuls
        kept = {n.name for n in MODES[mode].apply(model, [], None, [name]).graph.node}
        assert name not in kept
        assert {"key", "scores", "mix", "again"} <= kept  # left in float, those ORT would quantize among them
        assert "out" in kept or "out_MatMul" in kept or name == "out"


@pytest.mark.parametrize("mode", ["dynamic", "weight-only"])
def test_excluded_nodes_stay_float(mode: str) -> None:
    """A Gemm too: ORT's dynamic quantizer splits it into a MatMul and an Add before reading its lists."""
    model = attention_like()
    names = {n.name for n in MODES[mode].apply(model, ["query", "out", "again"], None).graph.node}
    assert {"query", "again"} <= names
    assert "out" in names or "out_MatMul" in names
    assert "key" not in names  # quantized


@pytest.mark.parametrize(("mode", "name"), [("dynamic", "query"), ("dynamic", "out"), ("weight-only", "again")])
def test_the_splice_computes_what_the_whole_model_path_does(mode: str, name: str) -> None:
    model = attention_like()
    before = model.SerializeToString()
    spliced = quantize_alone(model, name, lambda one: MODES[mode].quantize(one, [], None, None))
    assert spliced is not None
    assert model.SerializeToString() == before  # the caller's model is left as it was
    onnx.checker.check_model(spliced, full_check=True)
    whole = MODES[mode].apply(model, [], None, [name])
    assert integer_ops(spliced) == integer_ops(whole) == {integer_ops(whole).most_common(1)[0][0]: 1}
    x = np.random.default_rng(0).normal(size=(16, 64)).astype(np.float32)
    quantized, reference = run(spliced, x), run(whole, x)
    # ORT's dynamic quantizer splits every Gemm into MatMul and Add: equal up to float rounding
    np.testing.assert_allclose(quantized, reference, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(quantized, run(model, x))  # the node was quantized
    read = {i for n in spliced.graph.node for i in n.input}
    assert all(t.name in read for t in spliced.graph.initializer)  # the float weight it replaced is gone
    assert {t.name for t in spliced.graph.initializer} >= {"wk", "wo", "bo"} - ({"wo"} if name == "out" else set())


def test_a_name_the_quantizer_makes_that_is_taken_falls_back() -> None:
    model = attention_like()
    model.graph.node[2].output[0] = "x_quantized"  # ORT's quantizer names the quantized x so
    model.graph.node[3].input[1] = "x_quantized"
    assert quantize_alone(model, "query", lambda one: MODES["dynamic"].quantize(one, [], None, None)) is None


def test_mode_alone_falls_back_to_the_whole_model_path() -> None:
    model = attention_like()
    model.graph.node[2].output[0] = "x_quantized"
    model.graph.node[3].input[1] = "x_quantized"
    names = {n.name for n in MODES["dynamic"].alone(model, "query", None).graph.node}
    assert "query" not in names
    assert {"key", "again"} <= names


def test_static_splices_with_the_cached_ranges_and_rounds_the_output(tmp_path: Path) -> None:
    """Static mode: the one-node model reads the ranges the whole model was calibrated with; the node's
    output is rounded for its readers (its DequantizeLinear makes the name they read)."""
    model = attention_like()
    x = np.random.default_rng(1).normal(size=(16, 64)).astype(np.float32)

    calibration = Calibration(lambda: feeding({"x": x}), "minmax", tmp_path / "ranges.json")
    MODES["static"].apply(model, [], calibration)  # calibrates, and caches the ranges
    spliced = MODES["static"].alone(model, "again", calibration)
    onnx.checker.check_model(spliced, full_check=True)
    made = {o: n.op_type for n in spliced.graph.node for o in n.output}
    assert made["z"] == "DequantizeLinear" and made["y"] == "Gemm"  # only "again" is quantized
    assert not np.array_equal(run(spliced, x), run(model, x))


def test_a_weight_another_node_reads_is_not_spliced(tmp_path: Path) -> None:
    """Static mode remakes a Gemm's bias from int32 under the bias's name: a node also reading that bias
    would read the rounded copy, so the splice is refused (the whole-model path is taken)."""
    model = attention_like()
    model.graph.node.append(helper.make_node("Add", ["z", "bo"], ["shifted"], name="shift"))
    model.graph.output[0].name = "shifted"
    x = np.random.default_rng(1).normal(size=(16, 64)).astype(np.float32)
    calibration = Calibration(lambda: feeding({"x": x}), "minmax", tmp_path / "ranges.json")
    MODES["static"].apply(model, [], calibration)
    static = lambda one: MODES["static"].quantize(one, [], calibration, None)  # noqa: E731
    assert quantize_alone(model, "out", static) is None
    assert quantize_alone(model, "query", static) is not None


def test_the_report_lists_only_the_nodes_a_mode_can_quantize(tmp_path: Path) -> None:
    """Dynamic mode quantizes MatMuls with a constant weight: attention's activation-by-activation MatMuls
    are neither searched nor reported as quantized."""
    import json

    from onnxsat.cli import main

    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(attention_like(), path)
    args = ["--mode", "dynamic", "--max-drop", "100%", "--no-node-timing", "--report", str(report)]
    assert main(["quantize", str(path), "-o", str(tmp_path / "q.onnx"), *args]) == 0
    result = json.loads(report.read_text())
    assert sorted(n["node"] for n in result["nodes"]) == ["again", "key", "out", "query"]
    assert result["trials"][0]["quantized"] == 4 and result["trials"][0]["kept"] == 0
