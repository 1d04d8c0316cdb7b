"""Quantize on models with control flow: bodies read main-graph tensors by name, which ONNX Runtime's
quantizer does not see when it sorts the nodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main


def branch(name: str, op: str, read: str, shape: list, weights: list[onnx.TensorProto] = ()) -> onnx.GraphProto:
    """A body of one node reading the outer tensor ``read`` (``op`` MatMul reads a weight of its own)."""
    inputs = [read, "bw"] if op == "MatMul" else [read]
    return helper.make_graph(
        [helper.make_node(op, inputs, [f"{name}_out"])],
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, shape)],
        list(weights),
    )


def mlp_with_if(path: Path) -> Path:
    """x -> fc1 -> relu -> fc2 -> logits, and an If (on an input) whose branches read fc1's output."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["logits"], name="fc2"),
            helper.make_node(
                "If",
                ["flag"],
                ["side"],
                name="gate",
                then_branch=branch("a", "Relu", "h", ["N", 128]),
                else_branch=branch("b", "Neg", "h", ["N", 128]),
            ),
        ],
        "mlp_if",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
            helper.make_tensor_value_info("side", TensorProto.FLOAT, ["N", 128]),
        ],
        [
            numpy_helper.from_array(rng.normal(size=(64, 128)).astype(np.float32) * 0.1, "w1"),
            numpy_helper.from_array(rng.normal(size=(128, 10)).astype(np.float32) * 0.1, "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def quantize(model: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, Path]:
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    code = main(["quantize", str(model), "-o", str(out), "--report", str(report), "--no-node-timing", *extra])
    return code, (json.loads(report.read_text()) if report.exists() else {}), out


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_a_tensor_a_body_reads_keeps_its_producer_first(tmp_path: Path, mode: str) -> None:
    feeds = tmp_path / "flag.npz"
    np.savez(feeds, flag=np.array(True))
    model = mlp_with_if(tmp_path / "mlp_if.onnx")
    code, report, out = quantize(model, tmp_path, "--mode", mode, "--inputs", str(feeds), "--max-drop", "100%")
    assert code == 0 and report["verification"]["ok"]
    result = onnx.load(out)
    onnx.checker.check_model(result)
    order = [n.op_type for n in result.graph.node]
    producer = next(i for i, n in enumerate(result.graph.node) if "h" in n.output)
    assert order.index("If") > producer
    x = np.random.default_rng(0).normal(size=(2, 64)).astype(np.float32)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for flag in (True, False):
        got = session.run(["side"], {"x": x, "flag": np.array(flag)})[0]
        want = original.run(["side"], {"x": x, "flag": np.array(flag)})[0]
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99  # h itself may now be quantized


def weights_only_in_bodies(path: Path) -> Path:
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "bw")
    graph = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["flag"],
                ["y"],
                then_branch=branch("a", "MatMul", "x", [1, 4], [weight]),
                else_branch=branch("b", "Relu", "x", [1, 4]),
            )
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_weights_only_inside_bodies_are_named_in_static_modes_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = tmp_path / "flag.npz"
    np.savez(feeds, flag=np.array(True))
    model = weights_only_in_bodies(tmp_path / "m.onnx")
    code, _, out = quantize(model, tmp_path, "--inputs", str(feeds), "--mode", "static")
    err = capsys.readouterr().err.strip()
    assert code == 9 and not out.exists() and len(err.splitlines()) == 1
    assert "outside control flow (1 are inside If bodies, which only dynamic/weight-only mode quantizes" in err
    assert "--specialize" in err


def merged_decoder_like(path: Path) -> Path:
    """An If whose two branches both read the main graph's weights, as a merged KV-cache decoder's do (its
    "with past" and "without past" decoders): every MatMul is inside a body."""
    rng = np.random.default_rng(3)
    weights = [
        numpy_helper.from_array((rng.normal(size=(256, 256)) * 0.05).astype(np.float32), name)
        for name in ("w_in", "w_out")
    ]

    def decoder(name: str, activation: str) -> onnx.GraphProto:
        nodes = [
            helper.make_node("MatMul", ["x", "w_in"], [f"{name}_h"], name=f"{name}_in"),
            helper.make_node(activation, [f"{name}_h"], [f"{name}_a"]),
            helper.make_node("MatMul", [f"{name}_a", "w_out"], [f"{name}_y"], name=f"{name}_out"),
        ]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    graph = helper.make_graph(
        [
            helper.make_node(
                "If", ["use_cache"], ["y"], then_branch=decoder("cached", "Relu"), else_branch=decoder("first", "Tanh")
            )
        ],
        "merged",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256]),
            helper.make_tensor_value_info("use_cache", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("branch_taken", [True, False])
def test_dynamic_mode_quantizes_matmuls_inside_bodies_with_the_rest(tmp_path: Path, branch_taken: bool) -> None:
    """Nothing was quantized in a merged decoder before; dynamic mode now quantizes both branches' MatMuls
    (ORT's quantizer, told to enter subgraphs), searched by name like the main graph's nodes."""
    source = merged_decoder_like(tmp_path / "merged.onnx")
    feeds = tmp_path / "flag.npz"
    np.savez(feeds, use_cache=np.array(branch_taken))
    code, report, out = quantize(source, tmp_path, "--mode", "dynamic", "--inputs", str(feeds), "--max-drop", "100%")
    assert code == 0 and report["verification"]["ok"]
    (trial,) = report["trials"]
    assert trial["quantized"] == 4 and trial["note"] == "4 inside control-flow bodies"
    assert {row["node"] for row in report["nodes"]} == {"cached_in", "cached_out", "first_in", "first_out"}
    result = onnx.load(out)
    branches = {a.name: a.g for a in result.graph.node[-1].attribute}
    for body in branches.values():
        assert sum(node.op_type == "MatMulInteger" for node in body.node) == 2
    assert out.stat().st_size < source.stat().st_size / 2  # int8 weights, still shared by both branches
    x = np.random.default_rng(0).normal(size=(4, 256)).astype(np.float32)
    for taken in (True, False):
        run = {"x": x, "use_cache": np.array(taken)}
        want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, run)[0]
        got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, run)[0]
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99
    # a body's node is left in float by name, as a main-graph node is
    args = ["--mode", "dynamic", "--inputs", str(feeds), "--max-drop", "100%", "--exclude", "cached_in"]
    code, report, out = quantize(source, tmp_path, *args)
    assert code == 0 and {row["node"]: row["quantized"] for row in report["nodes"]}["cached_in"] is False
    cached = next(a.g for a in onnx.load(out).graph.node[-1].attribute if a.name == "then_branch")
    assert [node.op_type for node in cached.node].count("MatMul") == 1


def test_a_weight_a_body_reads_stays_after_its_node_is_quantized(tmp_path: Path) -> None:
    """fc1's weight is also read by the If's branches: the float weight must survive fc1 reading its
    quantized form (ORT's quantizer keeps initializers a body reads; this holds it to that)."""
    model_path = mlp_with_if(tmp_path / "mlp_if.onnx")
    model = onnx.load(model_path)
    gate = next(n for n in model.graph.node if n.op_type == "If")
    for attribute in gate.attribute:
        op = "Identity" if attribute.name == "then_branch" else "Neg"
        attribute.g.CopyFrom(branch(attribute.g.name, op, "w1", [64, 128]))
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("side", TensorProto.FLOAT, [64, 128]))
    onnx.save(model, model_path)
    feeds = tmp_path / "flag.npz"
    np.savez(feeds, flag=np.array(True))
    code, report, out = quantize(model_path, tmp_path, "--mode", "static", "--inputs", str(feeds), "--max-drop", "100%")
    assert code == 0 and report["verification"]["ok"]
    weight = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w1"))
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.zeros((1, 64), np.float32)
    np.testing.assert_array_equal(session.run(["side"], {"x": x, "flag": np.array(True)})[0], weight)


def test_weight_only_lists_a_body_gemm_it_can_split() -> None:
    """Weight-only mode splits Gemms into MatMul + Add for ORT's MatMulNBits quantizer; in a body only a plain
    one (no transposes, alpha and beta 1), which needs no copy of its weight. A merged decoder's Linears are
    such Gemms: before, none was quantized there. A transposed one stays float, neither searched nor reported."""
    from onnxsat.quantization.modes import MODES
    from onnxsat.quantization.quantize import _mode_nodes

    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "bw")
    body = helper.make_graph(
        [helper.make_node("Gemm", ["x", "bw"], ["a_out"], name="body_gemm")],
        "a",
        [],
        [helper.make_tensor_value_info("a_out", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=body, else_branch=branch("b", "Relu", "x", [1, 4]))],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.name for n in _mode_nodes(model, MODES["dynamic"])] == ["body_gemm"]  # ORT's dynamic splits it
    assert [n.name for n in _mode_nodes(model, MODES["weight-only"])] == ["body_gemm"]
    gemm = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch").node[0]
    gemm.attribute.append(helper.make_attribute("transB", 1))
    assert _mode_nodes(model, MODES["weight-only"]) == []
