"""``onnxsat quantize``: each mode writes a model ONNX Runtime loads, the budget search leaves the most
damaging nodes in float, per-node timings keep slow nodes in float, and bad input is one line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat import time_budget
from onnxsat.cli import main
from onnxsat.normal_form import with_restated_inputs
from onnxsat.quantization import node_speed
from onnxsat.zoo.digits_cnn import bundled_digits_cnn

DIGITS = ["--data", "digits-test"]


def quantize(model: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, Path]:
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    code = main(["quantize", str(model), "-o", str(out), "--report", str(report), *extra])
    return code, (json.loads(report.read_text()) if report.exists() else {}), out


def ops(path: Path) -> Counter:
    return Counter(node.op_type for node in onnx.load(path).graph.node)


def runs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def mlp(path: Path, features: int = 64, hidden: int = 128, classes: int = 10, opset: int = 17) -> Path:
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["logits"], name="fc2"),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [
            numpy_helper.from_array(rng.normal(size=(features, hidden)).astype(np.float32) * 0.1, "w1"),
            numpy_helper.from_array(rng.normal(size=(hidden, classes)).astype(np.float32) * 0.1, "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_static_quantizes_the_digits_cnn_and_reports_every_node(tmp_path: Path) -> None:
    code, report, out = quantize(bundled_digits_cnn(), tmp_path, "--mode", "static", "--no-node-timing", *DIGITS)
    assert code == 0 and out.exists()
    assert ops(out)["QuantizeLinear"] > 0 and ops(out)["DequantizeLinear"] > 0
    assert report["chosen"] == "static" and report["verification"]["ok"]
    nodes = {n["node"]: n for n in report["nodes"]}
    assert {"conv1", "conv2", "fc1", "fc2"} <= set(nodes) and all(n["quantized"] for n in nodes.values())
    assert report["metric"] == "top1" and report["held_out"]["score"]["samples"] == 79
    assert report["sizes"]["quantized"] < report["sizes"]["original"] / 2
    assert report["latency"]["fp32_ms"] > 0 and report["latency"]["threads"] == 1
    x = np.random.default_rng(0).normal(size=(1, 1, 8, 8)).astype(np.float32)
    assert runs(out, {"input": x})[0].shape == (1, 10)


def test_the_budget_leaves_the_most_damaging_nodes_in_float(tmp_path: Path) -> None:
    args = ["--mode", "static", "--no-node-timing", "--metric", "snr", *DIGITS]
    code, free, _ = quantize(bundled_digits_cnn(), tmp_path, *args)
    assert code == 0
    budget = free["accuracy"]["drop"] / 2  # half what quantizing everything costs
    assert budget > 0
    code, report, out = quantize(bundled_digits_cnn(), tmp_path, *args, "--max-drop", repr(budget))
    assert code == 0 and out.exists()
    assert report["accuracy"]["drop"] <= budget
    kept = [n for n in report["nodes"] if not n["quantized"]]
    assert kept and all("damage" in n["why"] for n in kept)
    assert all(n["sensitivity"] is not None for n in report["nodes"])
    assert report["trials"][0]["evaluations"] > len(report["nodes"])  # each node alone, then the bisection


def test_nodes_slower_quantized_stay_in_float(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-node timings decide; here they are stood in for, so the test does not time anything."""

    def speeds(model: onnx.ModelProto, nodes: list[str], **_: object) -> dict[str, node_speed.NodeSpeed]:
        return {
            name: node_speed.NodeSpeed(name, "Conv", 10.0, 20.0 if name == "conv1" else 5.0, int8_core_us=None)
            for name in nodes
        }

    def latency(original: onnx.ModelProto, candidate: onnx.ModelProto, *_: object) -> dict[str, float]:
        """Here the model also runs faster with conv1 in float (fewer quantize steps, faster)."""
        steps = sum(node.op_type == "QuantizeLinear" for node in candidate.graph.node)
        return {"fp32_ms": 1.0, "quantized_ms": 1.0, "speedup": 10.0 - steps, "threads": 1.0}

    from onnxsat.quantization import quantize as quantize_module

    monkeypatch.setattr(node_speed, "node_speeds", speeds)
    monkeypatch.setattr(quantize_module, "_latency", latency)
    code, report, _ = quantize(bundled_digits_cnn(), tmp_path, "--mode", "static", *DIGITS)
    assert code == 0
    nodes = {n["node"]: n for n in report["nodes"]}
    assert not nodes["conv1"]["quantized"] and nodes["conv1"]["why"] == "slower quantized (0.50x alone)"
    assert nodes["conv1"]["speed"] == 0.5 and nodes["conv2"]["quantized"] and nodes["conv2"]["speed"] == 2.0


def test_dynamic_quantizes_matmuls(tmp_path: Path) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    code, report, out = quantize(model, tmp_path, "--mode", "dynamic", "--no-node-timing")
    assert code == 0 and report["chosen"] == "dynamic"
    assert ops(out)["DynamicQuantizeLinear"] + ops(out)["MatMulInteger"] > 0
    assert any("seeded random inputs" in note for note in report["notes"])
    x = np.random.default_rng(1).normal(size=(3, 64)).astype(np.float32)
    quantized, original = runs(out, {"x": x})[0], runs(model, {"x": x})[0]
    assert np.corrcoef(quantized.ravel(), original.ravel())[0, 1] > 0.99


def test_a_file_listing_its_weights_as_inputs_is_timed_as_given_too(tmp_path: Path) -> None:
    """Old exporters list every weight as a graph input, which ORT neither folds nor prepacks; ONNXSat reads
    them as constants, and says what the result gains against the file the user runs."""
    path = mlp(tmp_path / "mlp.onnx")
    model = onnx.load(path)
    onnx.save(with_restated_inputs(model, ["w1", "w2"]), path)
    code, report, _ = quantize(path, tmp_path, "--mode", "dynamic", "--no-node-timing")
    assert code == 0 and report["latency"]["file_ms"] > 0 and report["latency"]["speedup_vs_file"] > 0
    (line,) = [note for note in report["notes"] if note.startswith("against the file as given")]
    assert "whose 2 weights are graph inputs too" in line
    code, report, _ = quantize(mlp(tmp_path / "plain.onnx"), tmp_path, "--mode", "dynamic", "--no-node-timing")
    assert code == 0 and "file_ms" not in report["latency"]


def test_a_weight_the_user_feeds_is_quantized_as_an_input_and_keeps_its_default(tmp_path: Path) -> None:
    """A weight listed as a graph input and fed with --inputs varies: it is not folded into an int8 constant
    (the quantized model would refuse the fed value), and the result keeps the file's interface."""
    path = mlp(tmp_path / "mlp.onnx")
    model = onnx.load(path)
    onnx.save(with_restated_inputs(model, ["w1", "w2"]), path)
    w1 = numpy_helper.to_array(model.graph.initializer[0])
    fed = tmp_path / "w1.npz"
    np.savez(fed, w1=w1 * 0.5)
    code, report, out = quantize(path, tmp_path, "--mode", "dynamic", "--no-node-timing", "--inputs", str(fed))
    assert code == 0 and any(note.startswith("w1: fed with --inputs") for note in report["notes"])
    assert "whose 1 weight is a graph input too" in " ".join(report["notes"])
    result = onnx.load(out)
    assert "w1" in {v.name for v in result.graph.input} and "w1" in {t.name for t in result.graph.initializer}
    x = np.random.default_rng(1).normal(size=(3, 64)).astype(np.float32)
    for feeds in ({"x": x}, {"x": x, "w1": w1 * 0.5}):  # the default, and a value fed in its place
        quantized, original = runs(out, feeds)[0], runs(path, feeds)[0]
        assert np.corrcoef(quantized.ravel(), original.ravel())[0, 1] > 0.99


def test_weight_only_writes_4_bit_matmuls(tmp_path: Path) -> None:
    model = mlp(tmp_path / "mlp.onnx", features=128, hidden=256)
    code, report, out = quantize(model, tmp_path, "--mode", "weight-only", "--max-drop", "100%")  # random weights
    assert code == 0 and ops(out)["MatMulNBits"] == 2
    assert report["sizes"]["quantized"] < report["sizes"]["original"] / 4


def test_weight_only_takes_gemms_and_logs_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A PyTorch Linear on 2D input is a Gemm (transB), and the normal form fuses a 2D MatMul + Add into one:
    ORT's MatMulNBits quantizer takes MatMuls alone, so weight-only mode splits them back. Importing that
    quantizer configures the root logger at INFO; none of its lines may reach stderr."""
    rng = np.random.default_rng(4)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["m"], name="fc2"),
            helper.make_node("Add", ["m", "b2"], ["logits"], name="bias2"),
        ],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 128])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [
            numpy_helper.from_array(rng.normal(size=(256, 128)).astype(np.float32) * 0.1, "w1"),
            numpy_helper.from_array(np.zeros(256, np.float32), "b1"),
            numpy_helper.from_array(rng.normal(size=(256, 10)).astype(np.float32) * 0.1, "w2"),
            numpy_helper.from_array(np.zeros(10, np.float32), "b2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "linear.onnx")
    code, report, out = quantize(tmp_path / "linear.onnx", tmp_path, "--mode", "weight-only", "--max-drop", "100%")
    assert code == 0 and ops(out)["MatMulNBits"] == 2 and "Gemm" not in ops(out)
    assert report["sizes"]["original"] == (tmp_path / "linear.onnx").stat().st_size  # the file as given
    assert {row["node"] for row in report["nodes"] if row["quantized"]} == {"fc1", "fc2"}
    assert "[INFO]" not in capfd.readouterr().err
    x = rng.normal(size=(4, 128)).astype(np.float32)
    assert np.corrcoef(runs(out, {"x": x})[0].ravel(), runs(tmp_path / "linear.onnx", {"x": x})[0].ravel())[0, 1] > 0.99
    code, _, _ = quantize(
        tmp_path / "linear.onnx", tmp_path, "--mode", "weight-only", "--exclude", "fc1", "--max-drop", "100%"
    )
    assert code == 0 and ops(out)["MatMulNBits"] == 1


def embedding_bag(path: Path) -> Path:
    """A recommender's shape at opset 17: a large embedding table looked up by ids (Gather), summed over the bag
    (ReduceSum with ``axes`` an input at 13+; ReduceMean's ``axes`` still an attribute), then a small head."""
    rng = np.random.default_rng(6)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup"),
            helper.make_node("ReduceMean", ["rows"], ["bag"], name="bag", axes=[1], keepdims=0),
            helper.make_node("MatMul", ["bag", "head"], ["score"], name="head"),
        ],
        "recommender",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 5])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N", 4])],
        [
            numpy_helper.from_array(rng.normal(size=(5000, 64)).astype(np.float32), "table"),
            numpy_helper.from_array(rng.normal(size=(64, 4)).astype(np.float32) * 0.1, "head"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_weight_only_stores_embedding_tables_in_4_bits(tmp_path: Path) -> None:
    """A table is most of a recommender's or a text encoder's file: weight-only looks it up 4-bit
    (GatherBlockQuantized). ORT's quantizer stamps opset 21 on the model for that, whatever its ops; the model
    is brought there by ONNX's converter first (the ReduceMean's ``axes`` attribute became invalid)."""
    path = embedding_bag(tmp_path / "bag.onnx")
    ids = np.random.default_rng(1).integers(0, 5000, size=(64, 5))
    np.savez(tmp_path / "ids.npz", ids=ids)
    args = ["--mode", "weight-only", "--max-drop", "100%", "--inputs", str(tmp_path / "ids.npz")]
    code, report, out = quantize(path, tmp_path, *args)
    assert code == 0, report
    assert ops(out)["GatherBlockQuantized"] == 1 and "lookup" in {r["node"] for r in report["nodes"] if r["quantized"]}
    assert report["sizes"]["quantized"] < report["sizes"]["original"] / 6
    onnx.checker.check_model(onnx.load(out))
    quantized, original = runs(out, {"ids": ids})[0], runs(path, {"ids": ids})[0]
    assert np.corrcoef(quantized.ravel(), original.ravel())[0, 1] > 0.99
    code, report, out = quantize(path, tmp_path, *args, "--exclude", "lookup")
    assert code == 0 and "GatherBlockQuantized" not in ops(out)


def test_dynamic_mode_on_gemms_sharing_a_weight(tmp_path: Path) -> None:
    """RT-DETR's decoder applies one Linear (a Gemm, transB) at each of its six layers. ORT's dynamic quantizer
    splits Gemms into MatMul + Add by transposing the weight in place, once per Gemm: the second reader saw
    it transposed back and ORT refused the model ("Incompatible dimensions for matrix multiplication")."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["h1"], name="layer1", transB=1),
            helper.make_node("Relu", ["h1"], ["r1"], name="relu"),
            helper.make_node("Gemm", ["r1", "w", "b"], ["y"], name="layer2", transB=1),
        ],
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        [
            numpy_helper.from_array(rng.normal(size=(64, 64)).astype(np.float32) * 0.1, "w"),
            numpy_helper.from_array(np.zeros(64, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "shared.onnx")
    code, _, out = quantize(
        tmp_path / "shared.onnx", tmp_path, "--mode", "dynamic", "--no-node-timing", "--max-drop", "100%"
    )
    assert code == 0 and ops(out)["MatMulInteger"] == 2
    x = rng.normal(size=(4, 64)).astype(np.float32)
    assert np.corrcoef(runs(out, {"x": x})[0].ravel(), runs(tmp_path / "shared.onnx", {"x": x})[0].ravel())[0, 1] > 0.99


def test_an_opset_12_model_is_converted_for_per_channel_weights(tmp_path: Path) -> None:
    """ORT's quantizer writes DequantizeLinear with a per-channel axis, which ORT refuses below opset 13."""
    model = mlp(tmp_path / "old.onnx", opset=12)
    code, report, out = quantize(model, tmp_path, "--mode", "static", "--no-node-timing")
    assert code == 0
    assert any("converted from opset 12 to 13" in note for note in report["notes"])
    assert next(o.version for o in onnx.load(out).opset_import if o.domain in ("", "ai.onnx")) >= 13


def test_the_python_api(tmp_path: Path) -> None:
    import onnxsat

    out = tmp_path / "out.onnx"
    report = onnxsat.quantize(mlp(tmp_path / "mlp.onnx"), out, mode="dynamic", node_timing=False)
    assert out.exists() and report.chosen == "dynamic" and report.written


def no_weights(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


def wide_mlp(path: Path) -> Path:
    """An MLP of 100 features: the digits fit neither as images nor flattened (64)."""
    return mlp(path, features=100)


def quantized_by_ort(path: Path) -> Path:
    """The MLP as ORT's dynamic quantizer writes it: MatMulInteger fed by DynamicQuantizeLinear."""
    from onnxruntime.quantization import quantize_dynamic

    quantize_dynamic(mlp(path.with_name("float.onnx")), path)
    return path


@pytest.mark.parametrize(
    ("make", "extra", "code", "message"),
    [
        (no_weights, [], 9, "nothing to quantize"),
        (no_weights, ["--data", "digits"], 9, "nothing to quantize"),  # said before data is read or a run made
        (quantized_by_ort, [], 9, "it is quantized already (2 DynamicQuantizeLinear, 2 MatMulInteger)"),
        (mlp, ["--max-drop", "150%"], 9, "--max-drop must be in [0%, 100%]"),
        (mlp, ["--confidence", "1"], 9, "--confidence must be in [0.5, 1)"),
        (mlp, ["--exclude", "nope"], 9, "--exclude 'nope' names no node"),
        (wide_mlp, ["--data", "digits"], 12, "the model input must be NCHW or NHWC (4 dims), or [N, 64]"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make, extra: list[str], code: int, message: str
) -> None:
    model = make(tmp_path / "model.onnx")
    exit_code, _, out = quantize(model, tmp_path, "--no-node-timing", *extra)
    err = capsys.readouterr().err.strip()
    assert exit_code == code and not out.exists()
    assert message in err and "Traceback" not in err


def test_a_pipeline_quantizes_then_verifies_against_the_quantized_model(tmp_path: Path) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    config = {
        "input_model": str(model),
        "output_model": str(tmp_path / "out.onnx"),
        "passes": [{"type": "quantize", "mode": "dynamic", "node_timing": False}, {"type": "verify"}],
    }
    path = tmp_path / "pipe.json"
    path.write_text(json.dumps(config))
    assert main(["run", str(path)]) == 0
    assert ops(tmp_path / "out.onnx")["DynamicQuantizeLinear"] + ops(tmp_path / "out.onnx")["MatMulInteger"] > 0


def test_many_nodes_are_ranked_from_one_run_and_the_worst_measured_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``EXACT_DAMAGE_NODES`` the ranking comes from the error each node adds in one run of the float
    and the quantized model; the budget still holds."""
    from onnxsat.quantization import damage

    monkeypatch.setattr(damage, "EXACT_DAMAGE_NODES", 2)
    args = ["--mode", "static", "--no-node-timing", "--metric", "snr", *DIGITS]
    code, free, _ = quantize(bundled_digits_cnn(), tmp_path, *args)
    budget = free["accuracy"]["drop"] / 2
    code, report, _ = quantize(bundled_digits_cnn(), tmp_path, *args, "--max-drop", repr(budget))
    assert code == 0 and report["accuracy"]["drop"] <= budget
    measured = [n for n in report["nodes"] if n["sensitivity"] is not None]
    assert len(measured) == len(report["nodes"])  # two measured alone, the others estimated
    assert any(not n["quantized"] for n in report["nodes"])


def test_latency_is_measured_at_the_batch_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-model latency and each node alone are fed --latency-batch samples."""
    seen: list[dict] = []

    def speeds(model: onnx.ModelProto, nodes: list[str], **options: object) -> dict[str, node_speed.NodeSpeed]:
        seen.append(dict(options["shapes"]))  # type: ignore[arg-type]
        return {}

    monkeypatch.setattr(node_speed, "node_speeds", speeds)
    code, report, _ = quantize(mlp(tmp_path / "mlp.onnx"), tmp_path, "--mode", "dynamic", "--latency-batch", "4")
    assert code == 0 and report["latency"]["batch"] == 4
    assert seen and all(shapes["x"] == [4, 64] for shapes in seen)
    code, report, _ = quantize(bundled_digits_cnn(), tmp_path, "--mode", "static", "--latency-batch", "4", *DIGITS)
    assert code == 0 and report["latency"]["batch"] == 4 and seen[-1]["input"][0] == 4


def test_the_budget_search_stops_at_its_time_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Time runs out after the first node measured alone: the others are ranked by the one-run estimate,
    the bisection is not run, and the report says the search stopped; nothing fits, so nothing is written."""
    from onnxsat.metrics.scorer import ModelScorer

    judged = []
    judge = ModelScorer.judge

    def judge_once(self: ModelScorer, candidate: onnx.ModelProto) -> object:
        judged.append(1)
        return judge(self, candidate)

    monkeypatch.setattr(ModelScorer, "judge", judge_once)
    monkeypatch.setattr(time_budget, "_now", lambda: 1e18 if judged else 0.0)
    args = ["--mode", "static", "--no-node-timing", "--metric", "snr", *DIGITS, "--max-drop", "0"]
    code, report, out = quantize(bundled_digits_cnn(), tmp_path, *args)
    assert code != 0 and not out.exists() and len(judged) == 1
    captured = capsys.readouterr()
    err = captured.err
    assert "found before --budget-minutes ran out" in err
    # the refusal still prints and writes what was measured: the mode tried and its most damaging nodes
    assert report["written"] is False and report["chosen"] is None
    (trial,) = report["trials"]
    # cut short, it cannot say none fits (a segmentation net's said so after 19 of its evaluations)
    assert trial["mode"] == "static"
    assert trial["error"].startswith("no subset of nodes inside the budget found before --budget-minutes ran out")
    assert trial["worst"] and all(isinstance(damage, float) for _, damage in trial["worst"])
    assert "most damaging nodes: " + trial["worst"][0][0] in captured.out
    assert "with its sampling error, against 0.00%" in err  # the drop alone (0.00% here, maybe) is not what fits
    code = main(["quantize", str(bundled_digits_cnn()), "-o", str(tmp_path / "o.onnx"), "--budget-minutes", "0"])
    assert code != 0


def test_a_budget_search_cut_short_keeps_what_it_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Time runs out in the bisection, after a count that fits: that model is written, and the note says so."""
    from onnxsat.quantization import quantize as quantize_module

    args = ["--mode", "static", "--no-node-timing", "--metric", "snr", *DIGITS]
    _, free, _ = quantize(bundled_digits_cnn(), tmp_path, *args)
    budget = free["accuracy"]["drop"] / 2
    score = quantize_module.ModelScorer.score
    scored = []

    def score_counting(self: object, candidate: onnx.ModelProto) -> object:
        result = score(self, candidate)
        scored.append(result.drop <= budget)
        return result

    monkeypatch.setattr(quantize_module.ModelScorer, "score", score_counting)
    monkeypatch.setattr(time_budget, "_now", lambda: 1e18 if any(scored[1:]) else 0.0)  # after a fit
    code, report, out = quantize(bundled_digits_cnn(), tmp_path, *args, "--max-drop", repr(budget))
    assert code == 0 and out.exists() and report["accuracy"]["drop"] <= budget
    assert any(note.startswith("the search stopped at --budget-minutes (20 min)") for note in report["notes"])


def test_modes_after_the_first_are_not_tried_once_the_time_is_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auto`` on a 3-D ResNet tried every mode (each quantized whole, its nodes timed, scored) whatever the
    clock said: the first mode is always tried (or nothing could be written), the rest only in time."""
    from onnxsat.quantization import quantize as quantize_module

    score = quantize_module.ModelScorer.score
    scored: list[int] = []

    def score_counting(self: object, candidate: onnx.ModelProto) -> object:
        scored.append(1)
        return score(self, candidate)

    monkeypatch.setattr(quantize_module.ModelScorer, "score", score_counting)
    monkeypatch.setattr(time_budget, "_now", lambda: 1e18 if scored else 0.0)
    _, report, _ = quantize(bundled_digits_cnn(), tmp_path, "--no-node-timing", *DIGITS)
    first, *rest = report["trials"]
    assert first["error"] is None and first["quantized"] > 0
    assert rest and all(trial["error"] == "not tried: the search stopped at --budget-minutes" for trial in rest)
    assert report["chosen"] in (first["mode"], None)  # None: the tiny net ran no faster quantized, on a busy machine


def test_a_channels_last_model_is_calibrated_on_nhwc_images(tmp_path: Path) -> None:
    """A TensorFlow-style export takes [N, H, W, C] and transposes inside: the digits come channels last."""
    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["x"], ["nchw"], perm=[0, 3, 1, 2]),
            helper.make_node("Conv", ["nchw", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["p"]),
            helper.make_node("Flatten", ["p"], ["f"]),
            helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="fc"),
        ],
        "nhwc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 8, 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [
            numpy_helper.from_array(rng.normal(size=(16, 1, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(np.zeros(16, np.float32), "b"),
            numpy_helper.from_array(rng.normal(size=(16, 10)).astype(np.float32), "fc"),
            numpy_helper.from_array(np.zeros(10, np.float32), "fb"),
        ],
    )
    path = tmp_path / "nhwc.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    code, report, out = quantize(path, tmp_path, "--mode", "static", "--no-node-timing", "--max-drop", "100%", *DIGITS)
    assert code == 0 and out.exists() and report["verification"]["ok"]
    assert report["data"].startswith("digits-test") and ops(out)["QuantizeLinear"] > 0


def test_a_row_bias_of_a_fused_gemm_is_quantized_along_its_one_axis(tmp_path: Path) -> None:
    """scikit-learn writes MatMul + Add of a [1, N] row; fused into a Gemm, ORT's quantizer gave that bias a
    per-channel DequantizeLinear along axis 0, which has size 1, and ORT refused to run the result."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "coefficient"], ["product"], name="matmul"),
            helper.make_node("Add", ["product", "intercepts"], ["y"], name="add"),
        ],
        "sklearn_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32])],
        [
            numpy_helper.from_array(rng.normal(size=(64, 32)).astype(np.float32) * 0.1, "coefficient"),
            numpy_helper.from_array(rng.normal(size=(1, 32)).astype(np.float32), "intercepts"),
        ],
    )
    path = tmp_path / "row_bias.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    code, report, out = quantize(path, tmp_path, "--mode", "static", "--no-node-timing", "--max-drop", "100%")
    assert code == 0, report
    assert "1 Gemm bias(es) of shape [1, N] read as [N] (the quantizer needs one axis)" in report["notes"]
    x = rng.normal(size=(4, 64)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # nothing folds the bias away
    quantized = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.corrcoef(quantized.ravel(), runs(path, {"x": x})[0].ravel())[0, 1] > 0.99


def test_a_bias_shared_by_convolutions_gets_a_copy_per_reader_under_a_free_name(tmp_path: Path) -> None:
    """basic-pitch's tf2onnx export shares one bias among 16 Convs, one of which writes the bias's name plus
    "2". ORT's quantizer copies a shared bias as "bias0", "bias1"... checking initializer names only: the copy
    took that Conv's output and ORT refused the result. Each reader now has its own copy, under a free name."""
    rng = np.random.default_rng(3)
    convs = [("first", "x", "bias1"), ("second", "negated", "h"), ("third", "h", "y")]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", [source, f"w_{name}", "bias"], [out], name=name, pads=[1, 1, 1, 1])
            for name, source, out in convs[:1]
        ]
        + [helper.make_node("Neg", ["bias1"], ["negated"], name="negate")]
        + [
            helper.make_node("Conv", [source, f"w_{name}", "bias"], [out], name=name, pads=[1, 1, 1, 1])
            for name, source, out in convs[1:]
        ],
        "shared_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [
            numpy_helper.from_array(rng.normal(size=(4, 4, 3, 3)).astype(np.float32) * 0.3, f"w_{name}")
            for name, _, _ in convs
        ]
        + [numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "bias")],
    )
    path = tmp_path / "shared_bias.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    code, report, out = quantize(path, tmp_path, "--mode", "static", "--no-node-timing", "--max-drop", "100%")
    assert code == 0, report
    assert any(note.startswith("2 bias(es) shared by several convolutions or Gemms copied") for note in report["notes"])
    x = rng.normal(size=(2, 4, 8, 8)).astype(np.float32)
    quantized = runs(out, {"x": x})[0]
    assert np.corrcoef(quantized.ravel(), runs(path, {"x": x})[0].ravel())[0, 1] > 0.99


def test_node_timing_reads_a_reshape_target_and_a_mode_is_timed_whole_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tf2onnx starts with Reshape(x, target) from an initializer: timing shapes lost the target, so each
    Conv was timed on a [1, 1, 1, 1] input. And nodes slower alone can pay in context: the mode with them
    quantized too is timed whole, and the faster form kept."""
    from onnxsat.quantization import node_speed as speed_module
    from onnxsat.quantization import quantize as quantize_module

    rng = np.random.default_rng(7)
    weights = [
        numpy_helper.from_array(np.array([-1, 1, 8, 8], np.int64), "target"),
        numpy_helper.from_array(rng.normal(size=(8, 1, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(size=(8, 8, 3, 3)).astype(np.float32) * 0.3, "w2"),
        numpy_helper.from_array(rng.normal(size=(8, 10)).astype(np.float32), "w3"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["flat", "target"], ["image"], name="to_image"),
            helper.make_node("Conv", ["image", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
            helper.make_node("GlobalAveragePool", ["c2"], ["pooled"], name="pool"),
            helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
            helper.make_node("MatMul", ["features", "w3"], ["logits"], name="fc"),
        ],
        "tf2onnx_like",
        [helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    facts = speed_module._tensor_facts(speed_module._with_shapes(model, {}))
    assert facts["c2"][1] == (1, 8, 8, 8)
    path = tmp_path / "flat.onnx"
    onnx.save(model, path)

    def speeds(model: onnx.ModelProto, nodes: list[str], **_: object) -> dict[str, node_speed.NodeSpeed]:
        return {name: node_speed.NodeSpeed(name, "Conv", 10.0, 20.0, int8_core_us=None) for name in nodes}

    def latency(original: onnx.ModelProto, candidate: onnx.ModelProto, *_: object) -> dict[str, float]:
        quantized = sum(node.op_type == "QuantizeLinear" for node in candidate.graph.node)
        return {"fp32_ms": 1.0, "quantized_ms": 1.0, "speedup": 1.0 + quantized, "threads": 1.0}

    monkeypatch.setattr(node_speed, "node_speeds", speeds)
    monkeypatch.setattr(quantize_module, "_latency", latency)
    code, report, _ = quantize(path, tmp_path, "--mode", "static", "--data", "digits-test", "--max-drop", "100%")
    assert code == 0, report
    speeds_of = {node["node"]: node["speed"] for node in report["nodes"] if node["quantized"]}
    assert speeds_of == {"conv1": 0.5, "conv2": 0.5, "pool": None, "fc": 0.5}  # every node, though slower alone
    (trial,) = report["trials"]
    assert trial["note"] == "3 nodes slower alone quantized anyway: the model ran 7.00x with them, 4.00x without"

    # where full-range products clip, the bits are weighed after that, on the form the timing settled (every node
    # here): weighed before, on NudeNet's YOLOv8 without two convolutions slower alone, 8 and 7 bits tied, and the
    # form with them quantized anyway kept 8, which lost every box (7 bits: 27%)
    monkeypatch.setattr(quantize_module, "int8_pairs_saturate", lambda: True)
    code, report, out = quantize(path, tmp_path, "--mode", "static", "--data", "digits-test", "--max-drop", "100%")
    assert code == 0, report
    (trial,) = report["trials"]
    timing, weighing = trial["note"].split("; ")
    assert timing.startswith("3 nodes slower alone quantized anyway") and "with 7 bits drop" in weighing
    assert {node["node"] for node in report["nodes"] if node["quantized"]} == {"conv1", "conv2", "pool", "fc"}
    assert largest_int8_weight(out) == (64 if report["weight_bits"] == 7 else 127)
    monkeypatch.setattr(quantize_module, "int8_pairs_saturate", lambda: False)

    # a budget search after that: the note says what it made of the mode, not only what the mode was before
    def one_more_in_float(model: onnx.ModelProto, full: quantize_module.Candidate, *_: object) -> object:
        excluded = {**full.excluded, "fc": "in float for the budget"}
        return quantize_module.Candidate(full.mode, full.model, excluded, full.score, {}, full.speeds)

    monkeypatch.setattr(quantize_module, "within_budget", one_more_in_float)
    args = ["--mode", "static", "--data", "digits-test", "--metric", "snr", "--max-drop", "0%", "--holdout", "0"]
    code, report, _ = quantize(path, tmp_path, *args)
    assert code == 0, report
    (trial,) = report["trials"]
    assert trial["note"].endswith("4.00x without; then the budget left 1 more in float: 7.00x")


def test_a_node_barely_faster_alone_is_timed_whole_in_float_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A YOLO-style stem timed 1.14x quantized alone, yet the model ran 3% faster with it in float (its
    activation fused into the float convolution, no int8 round trip over its output): a node barely faster
    alone is timed whole left in float too, and the faster form kept, either way."""
    from onnxsat.quantization import quantize as quantize_module

    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], name="stem", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], name="body", pads=[1, 1, 1, 1]),
            helper.make_node("GlobalAveragePool", ["c2"], ["pooled"], name="pool"),
            helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
            helper.make_node("MatMul", ["features", "w3"], ["logits"], name="fc"),
        ],
        "stem_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [
            numpy_helper.from_array(rng.normal(size=(8, 1, 3, 3)).astype(np.float32), "w1"),
            numpy_helper.from_array(rng.normal(size=(8, 8, 3, 3)).astype(np.float32) * 0.3, "w2"),
            numpy_helper.from_array(rng.normal(size=(8, 10)).astype(np.float32), "w3"),
        ],
    )
    path = tmp_path / "stem.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)

    def speeds(model: onnx.ModelProto, nodes: list[str], **_: object) -> dict[str, node_speed.NodeSpeed]:
        return {name: node_speed.NodeSpeed(name, "Conv", 11.0 if name == "stem" else 30.0, 10.0) for name in nodes}

    def stem_in_float(model: onnx.ModelProto) -> bool:
        floats = {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}
        return any(node.name == "stem" and node.input[1] in floats for node in model.graph.node)

    def latency_favouring(float_stem: bool) -> object:
        def latency(original: onnx.ModelProto, candidate: onnx.ModelProto, *_: object) -> dict[str, float]:
            speedup = 3.0 if stem_in_float(candidate) == float_stem else 2.5
            return {"fp32_ms": 1.0, "quantized_ms": 1.0 / speedup, "speedup": speedup, "threads": 1.0}

        return latency

    monkeypatch.setattr(node_speed, "node_speeds", speeds)
    args = ("--mode", "static", "--data", "digits-test", "--max-drop", "100%")
    monkeypatch.setattr(quantize_module, "_latency", latency_favouring(float_stem=True))
    code, report, out = quantize(path, tmp_path, *args)
    assert code == 0, report
    (trial,) = report["trials"]
    assert (
        trial["note"]
        == "1 node barely faster alone (< 1.25x) kept in float: the model ran 2.50x with them, 3.00x without"
    )
    why = {node["node"]: node["why"] for node in report["nodes"] if not node["quantized"]}
    assert why == {"stem": "faster in float in the whole model (1.10x alone)"}
    assert stem_in_float(onnx.load(out)) and report["latency"]["speedup"] == pytest.approx(3.0)

    monkeypatch.setattr(quantize_module, "_latency", latency_favouring(float_stem=False))
    code, report, out = quantize(path, tmp_path, *args)
    assert code == 0, report
    (trial,) = report["trials"]
    assert (
        trial["note"] == "1 node barely faster alone (< 1.25x) quantized: the model ran 3.00x with them, 2.50x without"
    )
    assert all(node["quantized"] for node in report["nodes"] if node["op_type"] in ("Conv", "MatMul"))
    assert not stem_in_float(onnx.load(out))


def test_histogram_calibrators_get_batches_of_one_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT's entropy and percentile calibrators stack per-batch activations and refused 7 x 64 + 1 x 32 samples
    with "inhomogeneous shape": the smaller last batch is left out for them, kept for MinMax. MinMax's batches
    start at one sample, then two, then what memory allows: DNSMOS calibrated on 26 clips at once peaked at
    9.4 GB (here the run of two adds 900 MiB, so one sample at a time)."""
    from onnxsat import memory
    from onnxsat.data.sources import Dataset
    from onnxsat.quantization.calibration import calibration_reader

    data = Dataset(np.zeros((10, 3), np.float32), None, "ten")

    def sizes(**kwargs: object) -> list[int]:
        reader = calibration_reader("x", data, {}, np.float32, 4, **kwargs)  # type: ignore[arg-type]
        return [len(batch["x"]) for batch in iter(reader.get_next, None)]

    assert sizes() == [1, 2, 4, 3]
    assert sizes(equal_batches=True) == [4, 4]
    assert sizes(fixed_batch=4) == [4, 4, 4]
    assert calibration_reader("x", Dataset(np.zeros((3, 3), np.float32), None, "three"), {}, np.float32, 4,
                              equal_batches=True).get_next()["x"].shape == (3, 3)  # fmt: skip
    resident = iter([100.0, 1000.0])
    monkeypatch.setattr(memory, "resident_mib", lambda: next(resident))
    assert sizes() == [1, 2, 1, 1, 1, 1, 1, 1, 1]


def test_slower_nodes_counts_the_nodes_the_mode_quantizes_not_only_constant_weights() -> None:
    """A TFLite dynamic-range export keeps int8 weights behind DequantizeLinear: quantize searches its MatMuls
    (they read float values), and compress, counting only constant weights, saw one node, slower, and never
    tried the mode that ran 2.4x."""
    from onnxsat.inputs import InputSpec
    from onnxsat.quantization.quantize import slower_nodes

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("DequantizeLinear", ["w2_q", "w2_scale"], ["w2"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"], name="second"),
        ],
        "dr8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        [
            numpy_helper.from_array(rng.normal(size=(64, 64)).astype(np.float32), "w1"),
            numpy_helper.from_array(rng.integers(-100, 100, size=(64, 32)).astype(np.int8), "w2_q"),
            numpy_helper.from_array(np.array(0.01, np.float32), "w2_scale"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert slower_nodes(model, "static", InputSpec()).count == 2


def test_auto_refuses_a_model_that_pays_neither_in_speed_nor_in_size(tmp_path: Path) -> None:
    """A VAE decoder's static form ran 1.00x with a larger file and 0.38% less agreement, and was written.
    ``auto`` now refuses it (exit 15: nothing worth writing, not a bad option); an asked-for mode is written
    with the same words as a note."""
    from types import SimpleNamespace

    from onnxsat.errors import NothingPaysError, SettingsError
    from onnxsat.quantization import quantize as quantize_module
    from onnxsat.quantization.report import QuantizeReport

    model = onnx.load(mlp(tmp_path / "mlp.onnx"))
    size = model.ByteSize()
    candidate = quantize_module.Candidate("static", model, {}, None, latency={"speedup": 1.0})  # type: ignore[arg-type]
    options = SimpleNamespace(mode="auto")
    with pytest.raises(NothingPaysError, match=r"no quantized form pays here: the fastest, static at 1.00x") as caught:
        quantize_module._choose([candidate], options, QuantizeReport("m", None, "auto"), size)  # type: ignore[arg-type]
    assert isinstance(caught.value, SettingsError) and caught.value.exit_code == 15
    assert quantize_module._choose([candidate], options, QuantizeReport("m", None, "auto"), 2 * size) is candidate
    report = QuantizeReport("m", None, "static")
    chosen = quantize_module._choose([candidate], SimpleNamespace(mode="static"), report, size)  # type: ignore[arg-type]
    assert chosen is candidate and report.notes[0].startswith("no quantized form pays here")


def test_auto_on_a_model_whose_only_float_weight_is_a_table_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An int4 decoder from onnxruntime-genai: its MatMuls are MatMulNBits already, its embedding table float.
    auto found no mode and said "no quantized model fits: " with nothing after it."""
    model = onnx.load(embedding_bag(tmp_path / "bag.onnx"))
    head = next(n for n in model.graph.node if n.op_type == "MatMul")
    model.graph.node.remove(head)
    model.graph.output[0].name = "bag"
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    onnx.save(model, tmp_path / "table.onnx")
    np.savez(tmp_path / "ids.npz", ids=np.random.default_rng(1).integers(0, 5000, size=(8, 5)))
    code = main(
        [
            "quantize",
            str(tmp_path / "table.onnx"),
            "-o",
            str(tmp_path / "q.onnx"),
            "--inputs",
            str(tmp_path / "ids.npz"),
        ]
    )
    assert code != 0 and not (tmp_path / "q.onnx").exists()
    err = capsys.readouterr().err
    assert "nothing for auto to quantize: the only float weights are read by Gather; --mode weight-only" in err


def test_a_form_no_faster_and_not_small_enough_names_its_share_of_the_file(tmp_path: Path) -> None:
    """The refusal said "its file is no smaller (242,665 bytes against 251,476)" of a file 3.5% smaller: it is
    not small enough to pay (at most 90%), which is what it says now."""
    from onnxsat.errors import SettingsError
    from onnxsat.quantization import quantize as quantize_module
    from onnxsat.quantization.report import QuantizeReport

    model = onnx.load(mlp(tmp_path / "mlp.onnx"))
    size = quantize_module.stored_bytes(model)
    candidate = quantize_module.Candidate("weight-only", model, {}, None, latency={"speedup": 1.0})
    options = quantize_module.QuantizeOptions()
    with pytest.raises(SettingsError) as refused:
        quantize_module._choose([candidate], options, QuantizeReport("m", None, "auto"), round(size / 0.965))
    assert "its file is 96% of the given one" in str(refused.value) and "at most 90% pays" in str(refused.value)


def test_of_forms_tied_in_speed_auto_writes_the_smallest(tmp_path: Path) -> None:
    """A Chinese tagger whose embedding table is 94% of its file: dynamic (its two GRU-side MatMuls) at 1.01x
    and weight-only (the table in 4 bits) at 1.00x are one speed within timing noise; auto took the faster
    and then refused it for a file 100% of the given one. Of forms tied in speed the smallest file is taken."""
    from onnxsat.quantization import quantize as quantize_module
    from onnxsat.quantization.report import QuantizeReport

    small = onnx.load(mlp(tmp_path / "mlp.onnx"))
    large = onnx.ModelProto()
    large.CopyFrom(small)
    large.graph.initializer.append(numpy_helper.from_array(np.zeros(50_000, np.float32), "padding"))
    given = quantize_module.stored_bytes(large)
    faster = quantize_module.Candidate("dynamic", large, {}, None, latency={"speedup": 1.01})
    smaller = quantize_module.Candidate("weight-only", small, {}, None, latency={"speedup": 1.0})
    report = QuantizeReport("m", None, "auto")
    assert quantize_module._choose([faster, smaller], quantize_module.QuantizeOptions(), report, given) is smaller
    assert report.notes[-1].startswith("weight-only chosen for its size: 1.00x is within timing noise of dynamic's")
    clearly_faster = quantize_module.Candidate("dynamic", large, {}, None, latency={"speedup": 1.2})
    assert quantize_module._choose([clearly_faster, smaller], quantize_module.QuantizeOptions(), report, given) is (
        clearly_faster
    )
    slower = quantize_module.Candidate("weight-only", small, {}, None, latency={"speedup": 0.95})
    assert quantize_module._choose([faster, slower], quantize_module.QuantizeOptions(), report, round(given / 0.5)) is (
        faster
    )


def test_auto_tries_weight_only_on_a_large_embedding_table(tmp_path: Path) -> None:
    """Weight-only mode stores embedding tables in 4 bits; auto tried it only for large MatMuls, so a model that
    is mostly a table (a tagger's, a recommender's) never had the one form that makes it smaller tried."""
    from onnxsat.quantization import quantize as quantize_module

    model = onnx.load(embedding_bag(tmp_path / "bag.onnx"))
    assert "weight-only" not in quantize_module.applicable_modes(model)  # 5,000 x 64: small
    table = next(t for t in model.graph.initializer if t.name == "table")
    table.CopyFrom(numpy_helper.from_array(np.zeros((20_000, 64), np.float32), "table"))
    assert "weight-only" in quantize_module.applicable_modes(model)


def test_static_mode_quantizes_silu_and_leaves_other_sigmoids_and_muls_in_float(tmp_path: Path) -> None:
    """YOLO's convolutions each end in SiLU, x * Sigmoid(x): left in float it put a dequantize, two float passes and
    a quantize around every convolution (a YOLO-style detector: 2.09x over float, 2.33x with SiLU in int8). A
    squeeze-excitation gate, x * Sigmoid(y), stays float, as every Sigmoid and Mul that is no SiLU's."""
    from onnxsat.quantization.modes import not_silu, silu_nodes

    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
            helper.make_node("Sigmoid", ["c1"], ["s1"], name="silu_gate"),
            helper.make_node("Mul", ["c1", "s1"], ["a1"], name="silu"),
            helper.make_node("GlobalAveragePool", ["a1"], ["pooled"], name="pool"),
            helper.make_node("Sigmoid", ["pooled"], ["se"], name="se_gate"),
            helper.make_node("Mul", ["a1", "se"], ["scaled"], name="se_scale"),
            helper.make_node("Conv", ["scaled", "w2"], ["y"], name="conv2"),
        ],
        "silu_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 8, 8])],
        [
            numpy_helper.from_array(rng.normal(size=(16, 4, 3, 3)).astype(np.float32) * 0.3, "w1"),
            numpy_helper.from_array(rng.normal(size=(8, 16, 1, 1)).astype(np.float32) * 0.3, "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert silu_nodes(model.graph) == {"silu_gate", "silu"} and not_silu(model) == {"se_gate", "se_scale"}
    path = tmp_path / "silu.onnx"
    onnx.save(model, path)
    code, report, out = quantize(path, tmp_path, "--mode", "static", "--no-node-timing", "--max-drop", "100%")
    assert code == 0, report
    decided = {node["node"]: node["quantized"] for node in report["nodes"]}
    assert decided["silu_gate"] and decided["silu"] and "se_gate" not in decided and "se_scale" not in decided
    result = onnx.load(out)
    producer = {name: node.op_type for node in result.graph.node for name in node.output}
    readers: dict[str, list[str]] = {}
    for node in result.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.op_type)
    in_int8 = {  # dequantized inputs, a quantized output: QLinearSigmoid and QLinearMul once ORT fuses them
        node.name: all(producer.get(name) == "DequantizeLinear" for name in node.input)
        and set(readers.get(node.output[0], [])) == {"QuantizeLinear"}
        for node in result.graph.node
        if node.op_type in ("Sigmoid", "Mul")
    }
    assert in_int8 == {"silu_gate": True, "silu": True, "se_gate": False, "se_scale": False}
    x = rng.normal(size=(2, 4, 8, 8)).astype(np.float32)
    assert np.corrcoef(runs(out, {"x": x})[0].ravel(), runs(path, {"x": x})[0].ravel())[0, 1] > 0.99


@pytest.mark.parametrize("clips", [True, False])
def test_where_full_range_products_clip_7_bit_weights_are_weighed_against_8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clips: bool
) -> None:
    """On x86 without VNNI, ORT's int8 kernels add products in pairs of 16 bits, which clip at full-range
    weights: there each integer mode is also built with 7-bit weights, and the form that does less damage is
    kept (the trial says both). Elsewhere weights take 8 bits. The written weights are what the report says."""
    from onnxsat.quantization import quantize as quantize_module

    monkeypatch.setattr(quantize_module, "int8_pairs_saturate", lambda: clips)
    for mode in ("static", "dynamic"):
        code, report, out = quantize(mlp(tmp_path / "mlp.onnx"), tmp_path, "--mode", mode, "--no-node-timing", *DIGITS)
        assert code == 0
        bits = report["weight_bits"]
        assert largest_int8_weight(out) == (64 if bits == 7 else 127)
        assert ("with 7 bits drop" in report["trials"][0]["note"]) == clips
        assert (quantize_module.SEVEN_BIT_WEIGHTS in report["notes"]) == (bits == 7)
        if not clips:
            assert bits == 8


def test_weight_bits_can_be_named_and_a_compress_recipe_keeps_them(tmp_path: Path) -> None:
    """``--weight-bits 7`` writes 7-bit weights on any CPU (a model quantized for a CPU without VNNI elsewhere);
    the recipe of a compress run names the bits its search chose, so a replay writes the same."""
    from onnxsat.compression.recipe import Recipe

    code, report, out = quantize(
        mlp(tmp_path / "mlp.onnx"), tmp_path, "--mode", "static", "--no-node-timing", "--weight-bits", "7", *DIGITS
    )
    assert code == 0 and report["weight_bits"] == 7 and largest_int8_weight(out) == 64
    recipe = Recipe().with_quantize("static", None, ("fc2",), 7)
    assert recipe.label == "int8 static (1 in float, 7-bit weights)"
    (entry,) = recipe.passes()
    assert entry["weight_bits"] == 7 and entry["exclude"] == ["fc2"]


def largest_int8_weight(path: Path) -> int:
    """The largest magnitude among a model's int8 weights (zero points left out)."""
    weights = [numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer if t.data_type == TensorProto.INT8]
    return max(int(np.abs(w.astype(np.int32)).max()) for w in weights if w.size > 1)
