"""Which nodes quantize counts and searches: ONNX Runtime's quantizer matches op types alone, so ONNX's own
ops named like com.microsoft's (Attention, opset 23) and custom domains' ops named like ONNX's stay in
float instead of becoming int8 ops that ORT refuses to load; and it quantizes float tensors alone, so an
integer Concat of shape values is no node to count. A model whose weights live in a data file is sized
with them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.quantization import quantize as quantize_module
from onnxsat.quantization.modes import MODES, namesakes
from onnxsat.quantization.quantize import _mode_nodes
from tests.quantization.test_quantize_alone import feeding


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


def test_only_nodes_reading_float_values_are_quantizable() -> None:
    """An LSTM export builds its initial state's shape with an int64 Concat: ORT leaves it as it is, so it
    is neither searched nor reported as quantized."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([7], np.int64), "extra"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Shape", ["c"], ["s"], name="shape"),
            helper.make_node("Concat", ["s", "extra"], ["size"], name="int_concat", axis=0),
            helper.make_node("Concat", ["c", "c"], ["y"], name="float_concat", axis=1),
        ],
        "shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8]),
            helper.make_tensor_value_info("size", TensorProto.INT64, [5]),
        ],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert [node.name for node in _mode_nodes(model, MODES["static"])] == ["conv", "float_concat"]


def test_a_result_the_quantizer_left_all_float_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever the reason ORT's quantizer quantizes nothing, the float model is not written as a result."""

    def unchanged(model: onnx.ModelProto, *_: object) -> onnx.ModelProto:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy

    monkeypatch.setitem(MODES, "dynamic", dataclasses.replace(MODES["dynamic"], quantize=unchanged))
    monkeypatch.setattr(quantize_module, "int8_pairs_saturate", lambda: False)  # no 7-bit form to weigh first
    source, out = tmp_path / "attention.onnx", tmp_path / "q.onnx"
    onnx.save(attention_23_model(), source)
    assert main(["quantize", str(source), "-o", str(out), "--mode", "dynamic", "--no-node-timing"]) != 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "onnxsat: error: nothing was quantized: ONNX Runtime's quantizer left every node in float (dynamic)"
    ]
    assert not out.exists()


def lstm_classifier() -> onnx.ModelProto:
    """An LSTM over 8 steps of 16 features (ONNX's default layout), its last hidden state classified."""
    rng = np.random.default_rng(0)
    hidden = 32

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    graph = helper.make_graph(
        [
            helper.make_node("LSTM", ["x", "w", "r", "b"], ["", "h"], name="lstm", hidden_size=hidden),
            helper.make_node("Flatten", ["h"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc", transB=1),
        ],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 1, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        [
            weight("w", 1, 4 * hidden, 16),
            weight("r", 1, 4 * hidden, hidden),
            weight("b", 1, 8 * hidden),
            weight("fc", 10, hidden),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_an_lstm_is_quantized_dynamically(tmp_path: Path) -> None:
    """ORT's dynamic quantizer turns an LSTM into DynamicQuantizeLSTM (int8 weights): searched, counted,
    and written like any MatMul."""
    source, out, report = tmp_path / "lstm.onnx", tmp_path / "q.onnx", tmp_path / "q.json"
    onnx.save(lstm_classifier(), source)
    args = ["quantize", str(source), "-o", str(out), "--mode", "dynamic", "--no-node-timing", "--max-drop", "50%"]
    assert main([*args, "--report", str(report)]) == 0
    assert "DynamicQuantizeLSTM" in {node.op_type for node in onnx.load(out).graph.node}
    decisions = {node["node"]: node["quantized"] for node in json.loads(report.read_text())["nodes"]}
    assert decisions["lstm"] is True


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_a_model_over_2gb_goes_through_ort_quantizer_with_a_data_file(
    mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ORT's quantizer writes a model over 2 GiB only when told to use a data file; what it writes comes back
    whole, with no reference to its temporary folder."""
    from onnxsat.quantization import modes

    model = attention_23_model()
    model.graph.node[3].op_type, model.graph.node[3].domain = "Sum", ""  # the MatMuls alone: q + k + v -> o
    del model.graph.node[3].attribute[:]
    told: list[bool] = []
    monkeypatch.setattr(modes, "over_protobuf_limit", lambda _: told.append(True) or True)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16, 64)).astype(np.float32)}
    calibration = modes.Calibration(lambda: feeding(feeds), "minmax", tmp_path / "ranges.json")
    result = MODES[mode].quantize(model, [], calibration if mode == "static" else None, None)
    assert told
    assert not any(t.data_location == TensorProto.EXTERNAL for t in result.graph.initializer)
    assert {"DynamicQuantizeLinear", "QuantizeLinear"} & {node.op_type for node in result.graph.node}
    ort.InferenceSession(result.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def contrib_mlp_model() -> onnx.ModelProto:
    """MatMul -> com.microsoft BiasGelu -> MatMul, as ORT's transformers optimizer writes an MLP: ONNX shape
    inference cannot type BiasGelu's output, so ORT's quantizer had stopped at the second MatMul."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((64, 256)) * 0.1).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(256) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((256, 64)) * 0.1).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
        helper.make_node("BiasGelu", ["h", "b1"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="down"),
    ]
    graph = helper.make_graph(
        nodes,
        "contrib_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 64])],
        weights,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def test_a_node_reading_a_contrib_ops_untyped_output_is_searched_and_quantized(tmp_path: Path) -> None:
    source, target, report = tmp_path / "mlp.onnx", tmp_path / "q.onnx", tmp_path / "r.json"
    onnx.save(contrib_mlp_model(), source)
    code = main(["quantize", str(source), "-o", str(target), "--mode", "dynamic", "--no-node-timing",
                 "--report", str(report)])  # fmt: skip
    assert code == 0
    decisions = {row["node"]: row["quantized"] for row in json.loads(report.read_text())["nodes"]}
    assert decisions == {"up": True, "down": True}
    quantized = onnx.load(target)
    assert sum(node.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for node in quantized.graph.node) == 2


def contrib_gemm_model() -> onnx.ModelProto:
    """Gemm -> com.microsoft BiasGelu -> Gemm with a bias, as ORT's transformers optimizer writes BERT's pooler
    and classifier: static mode needs a scale for the BiasGelu output to quantize the second Gemm's bias."""
    rng = np.random.default_rng(1)
    weights = [
        numpy_helper.from_array((rng.standard_normal((64, 128)) * 0.1).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(128) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((128, 10)) * 0.1).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="dense"),
        helper.make_node("BiasGelu", ["h", "b1"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Gemm", ["g", "w2", "b2"], ["y"], name="classifier"),
    ]
    graph = helper.make_graph(
        nodes,
        "contrib_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        weights,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def test_static_mode_quantizes_a_gemm_with_a_bias_after_a_contrib_op(tmp_path: Path) -> None:
    """ORT's quantizer alone fails here ("Unable to get valid quantization scale for input 'g' when quantizing
    bias 'b2'"): ONNX's shape inference leaves ``g`` untyped, so calibration measured no range for it."""
    source, target, report = tmp_path / "mlp.onnx", tmp_path / "q.onnx", tmp_path / "r.json"
    onnx.save(contrib_gemm_model(), source)
    code = main(["quantize", str(source), "-o", str(target), "--mode", "static", "--no-node-timing", "--force",
                 "--max-drop", "100%", "--report", str(report)])  # fmt: skip
    assert code == 0
    written = json.loads(report.read_text())
    assert {row["node"]: row["quantized"] for row in written["nodes"]} == {"dense": True, "classifier": True}
    assert any("1 tensor(s) typed as ONNX Runtime types them" in note for note in written["notes"])
    quantized = onnx.load(target)
    assert "g" in {node.input[0] for node in quantized.graph.node if node.op_type == "QuantizeLinear"}
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    (expected,) = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()


def test_typing_from_the_runtime_never_is_what_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph ONNX's shape inference refuses leaves its tensors untyped here; the quantizer says what fails."""
    from onnxsat.quantization import tensor_types

    def refuse(model: onnx.ModelProto) -> onnx.ModelProto:
        raise onnx.shape_inference.InferenceError("refused")

    monkeypatch.setattr(tensor_types.onnx.shape_inference, "infer_shapes", refuse)
    model = contrib_gemm_model()
    assert tensor_types.type_from_runtime(model) == 0 and not model.graph.value_info
