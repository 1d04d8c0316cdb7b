"""Accuracy budgets on trained models from PyPI wheels, on real inputs: the metric each output gets by
itself (a CTC recognizer's decoded strings, a text detector's map, a classifier's labels), a search
that stays inside the budget, the score on held-out inputs, and a written model that scores exactly
what the report says. The models are fetched by ``make real-models``; without them these tests skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from onnxsat.cli import main
from onnxsat.data.outputs import OutputRunner
from onnxsat.data.sources import Dataset
from onnxsat.metrics import METRICS, Budget
from tools.real_models import cache, detection, file_types, ocr, speech
from tools.real_models.agreement import stream_outputs
from tools.real_models.catalogue import MODELS, STREAM_MODELS

BUDGET = 0.02
REAL_DATA = {
    "ppocr_rec": ("sequence", lambda path: ocr.recognizer_lines(path, count=20, seed=7).batch),
    "ppocr_det": ("map", lambda path: ocr.detector_pages(path, count=5, seed=9).batch),
    "ppocr_cls": ("top1", lambda path: ocr.orientation_lines(path, count=20, seed=8).batch),
    "magika": ("top1", lambda path: file_types.file_samples(path).batch),
    "doclaynet_yolo": ("detection", lambda path: detection.layout_pages(path, count=3, seed=3).batch),
}
"""Model -> the metric auto must choose for its output, and its real inputs (more than the suite's
own checks use, so a fifth can be held out)."""


def model_path(name: str) -> Path:
    model = MODELS.get(name) or STREAM_MODELS[name]
    if not cache.is_cached(model):
        pytest.skip(f"{name} not fetched into {cache.cache_dir()}: run `python -m tools.real_models fetch`")
    return cache.model_path(model)


def outputs(path: Path, inputs: np.ndarray, name: str) -> np.ndarray:
    """The first output, sample by sample when the model's batch is fixed to 1."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model_input = sess.get_inputs()[0]
    if model_input.shape[0] == 1:
        return np.concatenate([sess.run(None, {model_input.name: inputs[i : i + 1]})[0] for i in range(len(inputs))])
    return sess.run(None, {model_input.name: inputs})[0]


@pytest.mark.parametrize("name", list(REAL_DATA))
def test_budget_search_on_real_inputs_with_the_metric_auto_chooses(name: str, tmp_path: Path) -> None:
    path = model_path(name)
    expected, make = REAL_DATA[name]
    inputs = make(path)
    data, out, report_path = tmp_path / "data.npz", tmp_path / "out.onnx", tmp_path / "report.json"
    np.savez(data, inputs=inputs)
    args = ["sparsify", str(path), "--max-drop", f"{BUDGET:.0%}", "--data", str(data), "--uniform-only"]
    shape = MODELS[name].shape_option  # verification's inputs: the catalogue's real batch shape
    # a few held-out samples may put the result over the budget: --force writes it (exit 8) to check it all
    code = main([*args, "--input-shape", shape, "-o", str(out), "--report", str(report_path), "--force"])
    report = json.loads(report_path.read_text())
    output = next(iter(report["metrics"]))
    assert report["metrics"][output]["metric"] == expected, report["metrics"]
    assert report["accuracy"]["drop"] <= BUDGET
    held = report["held_out"]
    assert held is not None and held["score"]["samples"] >= 1
    assert code == (8 if held["refuted"] else 0)
    # the written model scores on the search part exactly what the report says, by the registry's metric
    held_out = np.zeros(len(inputs), dtype=bool)
    held_out[np.random.default_rng(0).permutation(len(inputs))[: held["score"]["samples"]]] = True
    search = inputs[~held_out]
    original, result = outputs(path, search, name), outputs(out, search, name)
    value = METRICS[expected].measure(original, result, None).value
    assert value == pytest.approx(report["accuracy"]["value"])


def test_a_metric_that_does_not_fit_a_real_model_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = model_path("ppocr_det")
    data, out = tmp_path / "data.npz", tmp_path / "out.onnx"
    np.savez(data, inputs=ocr.detector_pages(path, count=2).batch)
    code = main(
        ["sparsify", str(path), "--max-drop", "1%", "--data", str(data), "--metric", "sequence", "-o", str(out)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 9 and not out.exists()
    assert "--metric sequence does not fit output" in err and len(err.splitlines()) == 1


def speech_streams(path: Path) -> speech.Streams:
    try:
        return speech.speech_streams(path)
    except speech.SynthesizerMissing as missing:
        pytest.skip(str(missing))


def test_a_voice_activity_detector_is_scored_over_its_speech_streams(tmp_path: Path) -> None:
    """Silero VAD on spoken sentences between noise, one stream at a time with the state fed back: the
    same probabilities as all streams run as one batch, every step's speech decision scored (``binary``),
    the fed-back state left out."""
    path = model_path("silero_vad")
    streams = speech_streams(path)
    dataset = Dataset(streams.steps, None, "speech", streams=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    runner = OutputRunner(sess, "input", dataset, given={"sr": np.array(16000)}, state={"state": "stateN"})
    gathered = runner.run()
    batched = stream_outputs(STREAM_MODELS["silero_vad"], path, streams)  # [streams, steps, 1]
    np.testing.assert_allclose(gathered["output"], batched.reshape(-1, 1), rtol=1e-4, atol=1e-5)
    budget = Budget(gathered, runner.batch_axes or {}, exclude={"stateN"})
    assert budget.describe()["output"]["metric"] == "binary" and "stateN" not in budget.metrics
    assert budget.baseline.value == 1.0 and budget.baseline.samples == streams.steps.shape[0] * streams.steps.shape[1]
    truth = np.concatenate([np.asarray(t) for t in streams.truth])
    assert METRICS["binary"].measure(gathered["output"], gathered["output"], truth.astype(np.int64)).value >= 0.95


def test_a_voice_activity_detector_is_sparsified_inside_a_budget_on_speech_streams(tmp_path: Path) -> None:
    """Silero's layers live in the branches of an If on the sample rate: the branch 16 kHz speech takes is
    pruned inside the budget, the 8 kHz branch (never reached by the data) left dense, one stream held out."""
    path = model_path("silero_vad")
    streams = speech_streams(path)
    data, feeds = tmp_path / "streams.npz", tmp_path / "sr.npz"
    out, report_path = tmp_path / "out.onnx", tmp_path / "report.json"
    np.savez(data, inputs=streams.steps)
    np.savez(feeds, sr=np.array(16000, dtype=np.int64))
    args = ["sparsify", str(path), "--max-drop", "2%", "--data", str(data), "--stateful", "state=stateN"]
    shape = ["--input-shape", f"input:1,{streams.steps.shape[2]}"]  # verification's random step
    code = main([*args, "--inputs", str(feeds), *shape, "-o", str(out), "--report", str(report_path)])
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["metrics"]["output"]["metric"] == "binary" and "stateN" not in report["metrics"]
    steps = streams.steps.shape[1]
    assert report["baseline"]["samples"] == 3 * steps and report["held_out"]["score"]["samples"] == steps
    assert report["accuracy"]["drop"] <= 0.02 and report["overall"] > 0.3
    assert all("then_branch" in layer["name"] for layer in report["layers"])  # sr == 16000 takes "then"
    assert any("left dense: the data never reaches them" in note for note in report["notes"])
    # the written model hears the held-out and search streams as the report says, run as Silero is run
    batched = stream_outputs(STREAM_MODELS["silero_vad"], out, streams)
    original = stream_outputs(STREAM_MODELS["silero_vad"], path, streams)
    agreement = np.mean((batched > 0.5) == (original > 0.5))
    assert agreement >= 1 - 0.02 - report["held_out"]["drop"]


@pytest.mark.parametrize("name", ["ppocr_cls", "magika"])
def test_compress_on_real_inputs_writes_a_verified_model_or_says_nothing_pays(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compressing a trained model on real inputs ends one of two ways, both honest: a model inside the
    budget on the search inputs that its recipe rebuilds exactly, or one line saying nothing was faster."""
    path = model_path(name)
    _, make = REAL_DATA[name]
    inputs = make(path)
    data, out, report_path = tmp_path / "data.npz", tmp_path / "out.onnx", tmp_path / "report.json"
    np.savez(data, inputs=inputs)
    args = ["compress", str(path), "-o", str(out), "--report", str(report_path), "--data", str(data)]
    shape = MODELS[name].shape_option
    args += [*(["--input-shape", shape] if shape else []), "--max-drop", f"{BUDGET:.0%}", "--budget-minutes", "2"]
    code = main(args)
    err = capsys.readouterr().err
    if code != 0:  # nothing faster inside the budget, or the held-out part says the best is over it
        assert ("nothing written" in err or "nothing was written" in err) and "Traceback" not in err
        assert not out.exists()
        return
    report = json.loads(report_path.read_text())
    assert report["verification"]["ok"] and report["accuracy"]["drop"] <= BUDGET
    assert report["held_out"]["score"]["samples"] > 0
    replay = tmp_path / "replay.onnx"
    assert main(["run", str(out.with_name("out.recipe.yaml")), "-o", str(replay)]) == 0
    assert replay.read_bytes() == out.read_bytes()
