"""ONNX Runtime's quantizer matches op types alone: ONNX's own ops named like com.microsoft's (Attention,
opset 23) and custom domains' ops named like ONNX's stay in float instead of becoming int8 ops that ORT
refuses to load. And a model whose weights live in a data file is sized with them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.quantization.modes import namesakes


def attention_23_model() -> onnx.ModelProto:
    """Self-attention as PyTorch exports it at opset 23: projections by MatMul, then ONNX's Attention."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), name)
        for name in ("wq", "wk", "wv", "wo")
    ]
    nodes = [helper.make_node("MatMul", ["x", f"w{p}"], [p], name=f"proj_{p}") for p in "qkv"]
    nodes += [
        helper.make_node("Attention", ["q", "k", "v"], ["a"], name="attention", q_num_heads=4, kv_num_heads=4),
        helper.make_node("MatMul", ["a", "wo"], ["y"], name="proj_o"),
    ]
    graph = helper.make_graph(
        nodes,
        "attention23",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 64])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def test_onnx_attention_and_custom_namesakes_are_named() -> None:
    model = attention_23_model()
    model.graph.node.append(helper.make_node("Conv", ["y"], ["z"], name="custom_conv", domain="my.ops"))
    model.graph.node.append(helper.make_node("Attention", ["y"], ["u"], name="ms_attention", domain="com.microsoft"))
    assert namesakes(model, ["MatMul", "Attention", "Conv"]) == ["attention", "custom_conv"]
    assert namesakes(model, ["MatMul"]) == []


def test_dynamic_quantization_leaves_onnx_attention_in_float(tmp_path: Path) -> None:
    source = tmp_path / "attention.onnx"
    onnx.save(attention_23_model(), source, save_as_external_data=True, size_threshold=0, location="attention.data")
    out, report = tmp_path / "q.onnx", tmp_path / "q.json"
    args = ["quantize", str(source), "-o", str(out), "--mode", "dynamic", "--no-node-timing", "--report", str(report)]
    assert main(args) == 0
    result = onnx.load(out)
    kinds = {(node.domain, node.op_type) for node in result.graph.node}
    assert ("", "Attention") in kinds and ("com.microsoft", "QAttention") not in kinds
    assert ("", "MatMulInteger") in kinds
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    sizes = json.loads(report.read_text())["sizes"]
    weight_bytes = 4 * 64 * 64 * 4
    assert sizes["original"] > weight_bytes  # the data file counts, not only the few hundred bytes of graph
    assert sizes["quantized"] < sizes["original"]
