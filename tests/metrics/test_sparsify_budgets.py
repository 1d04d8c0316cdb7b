"""``onnxsat sparsify --max-drop`` on outputs that are not [N, classes]: time-major sequences, a stateful
stream model, a chosen output, a user's metric; and the one-line refusals, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from models import FEATURES, STEPS, regressor, stateful, time_major

from onnxsat.cli import main


def budget_run(model: Path, data: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, Path]:
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    args = ["sparsify", str(model), "--max-drop", "10%", "--data", str(data), "-o", str(out), "--report", str(report)]
    code = main([*args, *extra])
    return code, (json.loads(report.read_text()) if report.exists() else {}), out


def test_a_time_major_recognizer_is_budgeted_by_its_decoded_sequences(tmp_path: Path) -> None:
    model = time_major(tmp_path / "ctc.onnx")
    data = tmp_path / "lines.npz"
    np.savez(data, inputs=np.random.default_rng(2).normal(size=(40, STEPS, FEATURES)).astype(np.float32))
    code, report, out = budget_run(model, data, tmp_path)
    assert code == 0 and out.exists()
    assert report["metrics"]["scores"]["metric"] == "sequence"
    assert "time-major" in report["metrics"]["scores"]["why"]
    assert report["accuracy"]["drop"] <= 0.10
    assert "per-position" in report["accuracy"]["outputs"][0]["details"]
    assert report["held_out"]["score"]["samples"] == 8


def test_a_regression_is_budgeted_by_r2_against_the_datas_targets(tmp_path: Path) -> None:
    """Targets that are not whole numbers make the data a regression's: R² against them, RMSE beside, on the
    search data and held out."""
    model = regressor(tmp_path / "reg.onnx")
    rng = np.random.default_rng(6)
    inputs = rng.normal(size=(200, FEATURES)).astype(np.float32)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    predicted = session.run(None, {"x": inputs})[0][:, 0].astype(np.float64)
    targets = predicted + rng.normal(scale=0.5 * predicted.std(), size=len(predicted))
    data = tmp_path / "targets.npz"
    np.savez(data, inputs=inputs, labels=targets)
    code, report, out = budget_run(model, data, tmp_path)
    assert code == 0 and out.exists()
    assert report["metrics"]["y"]["metric"] == "r2" and "regression targets" in report["metrics"]["y"]["why"]
    assert report["accuracy"]["kind"] == "accuracy" and "rmse" in report["accuracy"]["outputs"][0]["details"]
    assert 0.5 < report["baseline"]["value"] < 1.0  # the noise left out of the model: R² near 0.8, not 1
    assert report["accuracy"]["drop"] <= 0.10
    assert report["held_out"]["score"]["metric"] == "r2"


def streams(path: Path, count: int = 6, steps: int = 12) -> Path:
    np.savez(path, inputs=np.random.default_rng(3).normal(size=(count, steps, FEATURES)).astype(np.float32))
    return path


def test_a_stateful_model_is_scored_over_its_streams(tmp_path: Path) -> None:
    model = stateful(tmp_path / "cell.onnx")
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, sr=np.array(16000, dtype=np.int64))
    data = streams(tmp_path / "streams.npz")
    code, report, _ = budget_run(model, data, tmp_path, "--stateful", "state=stateN", "--inputs", str(feeds))
    assert code == 0
    assert set(report["metrics"]) == {"prob", "sr_seen"}  # the fed-back state is not scored
    assert report["metrics"]["prob"]["metric"] == "binary"
    assert report["baseline"]["samples"] == 5 * 12  # five streams searched, every step one sample
    assert report["held_out"]["score"]["samples"] == 12
    code, report, _ = budget_run(
        model, data, tmp_path, "--stateful", "state=stateN", "--inputs", str(feeds), "--metric-output", "prob"
    )
    assert code == 0 and set(report["metrics"]) == {"prob"}


def test_a_stream_steps_size_sets_the_dynamic_step_of_a_stateful_model(tmp_path: Path) -> None:
    """A cell declaring its step ``[N, "F"]`` ran its first check at ``[1, 1]`` beside streams of 8-feature
    steps, and was refused for an input it never gets (Silero VAD, given 512-sample steps)."""
    model = stateful(tmp_path / "cell.onnx", features="F")
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, sr=np.array(16000, dtype=np.int64))
    code, report, _ = budget_run(model, streams(tmp_path / "s.npz"), tmp_path, "--stateful", "state=stateN",
                                 "--inputs", str(feeds))  # fmt: skip
    assert code == 0 and report["baseline"]["samples"] == 5 * 12


def test_a_users_metric_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "line_metrics.py").write_text(
        "import numpy as np\n"
        "def argmax_steps(reference, candidate, labels):\n"
        "    return float(np.mean(reference.argmax(-1) == candidate.argmax(-1)))\n"
    )
    monkeypatch.chdir(tmp_path)
    model = time_major(tmp_path / "ctc.onnx")
    data = tmp_path / "lines.npz"
    np.savez(data, inputs=np.random.default_rng(2).normal(size=(20, STEPS, FEATURES)).astype(np.float32))
    code, report, _ = budget_run(model, data, tmp_path, "--metric", "line_metrics:argmax_steps")
    assert code == 0 and report["metric"] == "line_metrics:argmax_steps"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--metric", "top1"], "--metric top1 does not fit output 'prob'"),
        (["--metric", "no_such_module_q:f"], "cannot import no_such_module_q"),
        (["--metric-output", "boxes"], "--metric-output 'boxes': the model has no such output"),
        (["--stateful", "h=stateN"], "the model has no input 'h'"),
    ],
)
def test_bad_metric_settings_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    model = stateful(tmp_path / "cell.onnx")
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, sr=np.array(16000, dtype=np.int64))
    data = streams(tmp_path / "streams.npz", count=2, steps=3)
    stateful_flag = [] if "--stateful" in extra else ["--stateful", "state=stateN"]
    code, _, out = budget_run(model, data, tmp_path, *stateful_flag, "--inputs", str(feeds), *extra)
    err = capsys.readouterr().err.strip()
    assert code == 9 and not out.exists()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_python_api_takes_a_metric_function(tmp_path: Path) -> None:
    import onnxsat

    model = time_major(tmp_path / "ctc.onnx")
    data = tmp_path / "lines.npz"
    np.savez(data, inputs=np.random.default_rng(2).normal(size=(20, STEPS, FEATURES)).astype(np.float32))
    calls: list[tuple[int, ...]] = []

    def same_best_steps(reference: np.ndarray, candidate: np.ndarray, labels: object) -> float:
        calls.append(reference.shape)
        return float(np.mean(reference.argmax(-1) == candidate.argmax(-1)))

    out = tmp_path / "out.onnx"
    report = onnxsat.sparsify(model, out, sparsity=None, max_drop=0.1, data=str(data), metric=same_best_steps)
    assert out.exists() and report.accuracy is not None and report.accuracy.drop <= 0.1
    # samples first: the search part (16) in every evaluation, the held-out part (4) for the final score only
    assert set(calls) == {(16, STEPS, 5), (4, STEPS, 5)} and calls.count((4, STEPS, 5)) == 2
