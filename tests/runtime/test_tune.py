"""Session tuning: the grid, the settings file, the ranking, and ``onnxsat tune`` end to end.

Timings are never asserted (they are this machine's); the ranking's structure, the written JSON and
its reuse by the Python API and ``onnxsat bench compare`` are.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from runtime_models import conv_bn_relu

from onnxsat.bench import peers
from onnxsat.cli import main
from onnxsat.errors import SettingsError
from onnxsat.inputs import random_inputs
from onnxsat.latency import compare_latency
from onnxsat.runtime.tune import DEFAULT_LABEL, NOISE_LABEL, SessionSettings, candidate_grid, tune
from onnxsat.verification import session

FAST = ["--rounds", "3", "--warmup", "1"]


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "cbr.onnx"
    onnx.save(conv_bn_relu(), str(path))
    return path


def run_cli(argv: list[object]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue()


# ------------------------------------------------------------------------------------------------ the grid


def test_default_grid_is_small_and_full_grid_covers_every_count() -> None:
    small = candidate_grid(cores=2)
    assert len(small) == 12  # 3 levels x intra {1, 2} x (sequential, parallel with 2 inter-op threads)
    assert {s.graph_optimization_level for s in small} == {"basic", "extended", "all"}
    assert {(s.execution_mode, s.inter_op_num_threads) for s in small} == {("sequential", 1), ("parallel", 2)}
    assert {s.intra_op_num_threads for s in candidate_grid(cores=8)} == {1, 2, 4, 8}
    assert {s.intra_op_num_threads for s in candidate_grid(cores=6)} == {1, 2, 4, 6}
    assert {s.execution_mode for s in candidate_grid(cores=1)} == {"sequential"}
    full = candidate_grid(full=True, cores=3)
    assert len(full) == 4 * 3 * 3  # levels incl. disabled x intra 1..3 x (sequential, parallel with 2 or 3)
    assert len(set(full)) == len(full)
    assert all(s.providers[-1] == "CPUExecutionProvider" for s in full)
    assert not any("AzureExecutionProvider" in s.providers for s in full)


# ------------------------------------------------------------------------------------------- settings file


def test_settings_round_trip_through_json(tmp_path: Path) -> None:
    settings = SessionSettings(2, 1, "parallel", "extended", ("CPUExecutionProvider",))
    path = tmp_path / "s.json"
    path.write_text(settings.to_json())
    assert json.loads(path.read_text())["providers"] == ["CPUExecutionProvider"]
    assert SessionSettings.load(path) == settings
    options = settings.to_session_options()
    assert options.intra_op_num_threads == 2 and options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"intra_op_num_threads": 1, "threads": 2}', "unknown session setting threads"),
        ('{"intra_op_num_threads": -1}', "intra_op_num_threads must be an integer >= 0"),
        ('{"inter_op_num_threads": true}', "inter_op_num_threads must be an integer >= 0"),
        ('{"execution_mode": "async"}', "execution_mode must be one of sequential, parallel"),
        ('{"graph_optimization_level": 99}', "graph_optimization_level must be one of disabled, basic"),
        ('{"providers": "CPUExecutionProvider"}', "providers must be a non-empty list"),
        ('{"providers": ["NoSuchExecutionProvider"]}', "providers this ONNX Runtime does not have"),
        ("[1, 2]", "must hold a JSON object, not list"),
        ("{not json", "are not valid JSON"),
    ],
)
def test_bad_settings_files_are_refused(content: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(SettingsError, match=message):
        SessionSettings.load(path)


def test_a_missing_settings_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read session settings"):
        SessionSettings.load(tmp_path / "none.json")


# ------------------------------------------------------------------------------------------------ tuning


def test_tune_ranks_every_candidate_by_speedup(model_file: Path) -> None:
    grid = candidate_grid(cores=2)
    result = tune(model_file, {"x": [1, 3, 8, 8]}, rounds=3, warmup=0, grid=grid)
    assert {c.settings for c in result.ranking} == set(grid)
    assert all(c.status == "ok" and len(c.times) == 3 for c in result.ranking)
    speedups = [c.speedup for c in result.ranking]
    assert speedups == sorted(speedups, reverse=True)
    assert all(math.isfinite(s) and s > 0 for s in speedups)
    assert result.default.ratios == [1.0, 1.0, 1.0] and len(result.noise.ratios) == 3
    faster = result.verdict(result.ranking[0]) == "faster"
    assert result.best == (result.ranking[0].settings if faster else result.default.settings)
    assert result.inputs == "x [1,3,8,8] float32"
    assert all(c.max_abs_diff is not None and c.max_abs_diff < 1e-3 for c in result.ranking)


@pytest.mark.parametrize(("shift", "tuned"), [(5e-5, True), (0.1, False)])
def test_a_default_session_that_rounds_apart_from_ort_off_is_the_truth(
    model_file: Path, monkeypatch: pytest.MonkeyPatch, shift: float, tuned: bool
) -> None:
    """ORT's own fusions rounded a speech CNN's outputs 4e-05 away from ORT off: tune refused the model ("ORT's
    default session cannot run the model"). A difference of rounding makes the default the truth, said in the
    table; a larger one is still refused."""
    from onnxsat.errors import RuntimeUnsupportedError
    from onnxsat.runtime import tune as tune_module

    real = tune_module.sized_reference_run

    def shifted(*args: object, **kwargs: object) -> object:
        inputs, run = real(*args, **kwargs)
        run.outputs = [value + np.float32(shift) for value in run.outputs]
        return inputs, run

    monkeypatch.setattr(tune_module, "sized_reference_run", shifted)
    grid = candidate_grid(cores=1)[:1]
    if not tuned:
        with pytest.raises(RuntimeUnsupportedError, match="ORT's default session cannot run the model"):
            tune(model_file, {"x": [1, 3, 8, 8]}, rounds=2, warmup=0, grid=grid)
        return
    result = tune(model_file, {"x": [1, 3, 8, 8]}, rounds=2, warmup=0, grid=grid)
    assert result.reference.startswith("ORT's default (its own fusions differ from ORT off by up to")
    assert "outputs compared with ORT's default" in result.table()


def test_tune_command_prints_the_ranking_and_writes_settings_that_load_back(model_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "best.json"
    rc, text = run_cli(["tune", model_file, *FAST, "--input-shape", "x:2,3,8,8", "-o", output])
    assert rc == 0, text
    lines = text.splitlines()
    ranked = [line for line in lines if re.match(r"\s*\d+  level ", line)]
    assert len(ranked) == len(candidate_grid())
    assert [int(line.split()[0]) for line in ranked] == list(range(1, len(ranked) + 1))
    assert any(line.strip().startswith(f"-  {DEFAULT_LABEL} ") for line in lines)
    assert any(NOISE_LABEL in line for line in lines)
    assert "x [2,3,8,8] float32" in lines[0] and "3 timed rounds after 1 warm-up rounds" in text
    best = SessionSettings.load(output)
    assert lines[-2].startswith(f"best: {best.describe()}")
    assert best.describe() in ranked[0] or lines[-2].endswith(f"({DEFAULT_LABEL}: no candidate is faster beyond noise)")
    # the Python API and the latency helper reuse the file
    feeds = random_inputs(conv_bn_relu(), {"x": [1, 3, 8, 8]})
    sess = session(model_file, best.optimization_level, settings=best)
    assert sess.get_providers() == list(best.providers)
    assert sess.run(None, feeds)[0].shape == (1, 8, 8, 8)
    latency = compare_latency(model_file, model_file, {"x": [1, 3, 8, 8]}, pairs=2, warmup=0, settings=best)
    assert latency.speedup > 0


def test_bench_compare_uses_the_settings_file(
    model_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "PEERS", {})
    settings = tmp_path / "s.json"
    settings.write_text(SessionSettings(1, 2, "parallel", "basic").to_json())
    argv = ["bench", "compare", model_file, "--pairs", "2", "--warmup", "0", "--session-settings", settings]
    rc, text = run_cli(argv)
    assert rc == 0, text
    assert "tuned sessions (level basic, intra 1, inter 2, parallel, CPU; each row at its own level" in text


# --------------------------------------------------------------------------------------------- bad input


def _one_error_line(capfd: pytest.CaptureFixture[str], argv: list[object]) -> tuple[int, str]:
    capfd.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    assert err.count("\n") == 1 and err.startswith("onnxsat: error: "), err
    assert "Traceback" not in out + err
    return rc, err


def test_bad_input_is_one_line_with_its_exit_code(
    model_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    not_onnx = tmp_path / "notes.onnx"
    not_onnx.write_text("not a model")
    assert _one_error_line(capfd, ["tune", tmp_path / "missing.onnx", *FAST])[0] == 3
    assert _one_error_line(capfd, ["tune", not_onnx, *FAST])[0] == 4
    assert _one_error_line(capfd, ["tune", model_file, "--rounds", "0"])[0] == 9
    assert _one_error_line(capfd, ["tune", model_file, "--input-shape", "y:1,3,8,8", *FAST])[0] == 9
    assert _one_error_line(capfd, ["tune", model_file, "--input-shape", "x:1,a", *FAST])[0] == 9
    rc, err = _one_error_line(capfd, ["tune", model_file, *FAST, "-o", tmp_path / "no" / "s.json"])
    assert rc == 7 and "output folder does not exist" in err
    rc, err = _one_error_line(capfd, ["tune", model_file, *FAST, "-o", model_file])
    assert rc == 7 and "is the input model itself" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read session settings"), ('{"threads": 1}', "unknown session setting threads")],
)
def test_bench_compare_refuses_a_bad_settings_file(
    content: str | None, message: str, model_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "s.json"
    if content is not None:
        settings.write_text(content)
    rc, err = _one_error_line(capfd, ["bench", "compare", model_file, "--session-settings", settings])
    assert rc == 9 and message in err


def test_a_quantized_model_is_tuned_against_ort_s_default(tmp_path: Path) -> None:
    """A QDQ model runs as integer kernels from ORT's extended level on, which round differently from ORT off
    by design. Every candidate was compared with ORT off, the default session too: tune refused every QDQ
    model, saying ORT's default "cannot run" it. They are compared with the default session now."""
    from tests.ort_quantized import statically_quantized_digits_cnn

    path = statically_quantized_digits_cnn(tmp_path / "qdq.onnx")
    grid = [SessionSettings(graph_optimization_level=level, intra_op_num_threads=1) for level in ("basic", "all")]
    result = tune(path, {"input": [1, 1, 8, 8]}, rounds=2, warmup=0, grid=grid)
    assert result.default.status == "ok"
    by_level = {c.settings.graph_optimization_level: c for c in result.ranking}
    assert by_level["all"].status == "ok" and by_level["all"].max_abs_diff == 0.0
    if by_level["basic"].status != "ok":  # QDQ emulated in float there: not what the default computes
        assert "differ from ORT's default (the model runs in integer kernels there)" in by_level["basic"].reason


def test_the_best_settings_are_the_default_unless_a_candidate_beats_it_beyond_noise() -> None:
    """A "best" inside the noise probe's band ran 0.89x the default on a second look: the default is kept."""
    from onnxsat.runtime.tune import Candidate, SessionSettings, TuneResult

    noise = Candidate(SessionSettings(), "ORT default (again)", ratios=[0.97, 1.0, 1.03, 0.99, 1.01] * 4)
    default = Candidate(SessionSettings(), "ORT default", ratios=[1.0] * 20)
    tuned = SessionSettings(intra_op_num_threads=1)

    def result(ratios: list[float]) -> TuneResult:
        return TuneResult("m", "x", 20, 0, [Candidate(tuned, ratios=ratios)], default, noise)

    assert result([1.01, 1.02, 0.99, 1.0, 1.03] * 4).best == SessionSettings()
    assert result([1.30, 1.32, 1.28, 1.31, 1.29] * 4).best == tuned
