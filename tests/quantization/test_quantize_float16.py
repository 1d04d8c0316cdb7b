"""Narrow float types: a float16 model is quantized from its float32 form, and what stays in float is stored in
float16 again, so the file is not larger than the float16 model's for weights the quantizer did not take; a
float8 weight ORT cannot run quantized fails the mode in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main


def half_weights(suffix: str = "") -> list[onnx.TensorProto]:
    """The float16 weights of the MLPs below, ``w1`` (64x64) and ``w2`` (64x32), their names ending in ``suffix``."""
    rng = np.random.default_rng(3)
    return [
        numpy_helper.from_array((rng.normal(size=(64, 64)) * 0.1).astype(np.float16), f"w1{suffix}"),
        numpy_helper.from_array((rng.normal(size=(64, 32)) * 0.1).astype(np.float16), f"w2{suffix}"),
    ]


def mlp_nodes() -> list[onnx.NodeProto]:
    """x -> MatMul by w1 ("first") -> Relu -> MatMul by w2 ("second") -> y."""
    return [
        helper.make_node("MatMul", ["x", "w1"], ["h"], "first"),
        helper.make_node("Relu", ["h"], ["r"], "relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], "second"),
    ]


def half_mlp(path: Path) -> Path:
    """x [N, 64] float16 -> MatMul (64x64) -> Relu -> MatMul (64x32): weights in float16, as a GPU export."""
    weights = half_weights()
    graph = helper.make_graph(
        mlp_nodes(),
        "half_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N", 32])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_weights_left_in_float_keep_their_float16_size(tmp_path: Path) -> None:
    model, out, report = half_mlp(tmp_path / "half.onnx"), tmp_path / "q.onnx", tmp_path / "r.json"
    argv = ["quantize", str(model), "-o", str(out), "--mode", "dynamic", "--exclude", "second", "--force"]
    assert main([*argv, "--no-node-timing", "--report", str(report)]) == 0
    written = onnx.load(out)
    stored = {t.name: t.data_type for t in written.graph.initializer}
    assert stored.get("w2_float16") == TensorProto.FLOAT16 and "w2" not in stored  # behind a Cast, not float32
    cast = next(n for n in written.graph.node if n.input == ["w2_float16"])
    assert cast.op_type == "Cast" and list(cast.output) == ["w2"]
    assert any(n.op_type == "DynamicQuantizeLinear" for n in written.graph.node)  # the first MatMul is int8
    sizes = json.loads(report.read_text())["sizes"]
    assert sizes["quantized"] < sizes["original"]  # float32 copies of w2 would make it 4 kB larger
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float16)
    (expected,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got.dtype == np.float16 and np.abs(got.astype(np.float32) - expected).max() < 0.05


def test_float16_weights_behind_casts_stay_float16_where_left_in_float(tmp_path: Path) -> None:
    """A model computing in float32 from float16 weights it casts (a distilled copy-detection net: 93 Casts):
    optimization folds each Cast into a float32 weight, and the int8 form kept those left in float as float32,
    151% of the file. They are stored in float16 again, behind a Cast."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["w1_16"], ["w1"], "cast1", to=TensorProto.FLOAT),
            helper.make_node("Cast", ["w2_16"], ["w2"], "cast2", to=TensorProto.FLOAT),
            *mlp_nodes(),
        ],
        "cast_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32])],
        half_weights("_16"),
    )
    model, out = tmp_path / "casts.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    argv = ["quantize", str(model), "-o", str(out), "--mode", "dynamic", "--exclude", "second", "--force"]
    assert main([*argv, "--no-node-timing"]) == 0
    stored = {t.name: t.data_type for t in onnx.load(out).graph.initializer}
    assert stored.get("w2_float16") == TensorProto.FLOAT16 and "w2" not in stored, stored


def test_a_node_reading_a_float8_weight_stays_in_float_and_the_others_quantize(tmp_path: Path) -> None:
    """A Conv reading a float8 weight through DequantizeLinear is quantized already, in a type ORT's int8
    kernels do not take: static mode's QDQ around it was fused by ORT's optimizations into a QLinearConv with a
    float8 weight, which ORT then refuses to load, and the whole mode failed. It stays in float; the other
    Conv is quantized and the model loads with every optimization."""
    rng = np.random.default_rng(0)
    f8 = helper.make_tensor("w8", TensorProto.FLOAT8E4M3FN, [8, 8, 3, 3], rng.normal(size=8 * 8 * 9).tolist())
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("DequantizeLinear", ["w8", "scale"], ["wd"]),
            helper.make_node("Conv", ["r", "wd"], ["y"], pads=[1, 1, 1, 1]),
        ],
        "float8_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [
            numpy_helper.from_array((rng.normal(size=(8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
            numpy_helper.from_array(np.zeros(8, np.float32), "b"),
            f8,
            numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
        ],
    )
    model = tmp_path / "f8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), model)
    out = tmp_path / "q.onnx"
    arguments = ["quantize", str(model), "-o", str(out), "--mode", "static", "--no-node-timing", "--max-drop", "50%"]
    assert main(arguments) == 0
    quantized = onnx.load(out)
    convs = [n for n in quantized.graph.node if n.op_type == "Conv"]
    assert [c.input[1] for c in convs] == ["w_DequantizeLinear_Output", "wd"]  # the float8 one as it was
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])  # all optimizations on
