"""The Python API: ``onnxsat.optimize(in, out, ...)`` verifies before writing, writes atomically, never
touches the input, and raises the same typed errors the command line turns into exit codes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxsat
from onnxsat import model_io
from onnxsat.errors import (
    DataError,
    InputNotFoundError,
    InvalidModelError,
    NotOnnxError,
    OnnxSatError,
    OutputPathError,
    RuntimeUnsupportedError,
    SettingsError,
    VerificationFailedError,
)
from onnxsat.report import OptimizeReport
from onnxsat.zoo.synthetic import demo_cnn

PHASES = {"load", "encode", "saturate", "extract", "decode", "verify", "save"}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def temp_leftovers(folder: Path) -> list[Path]:
    return list(folder.glob(".*.tmp"))


def runs_in_ort(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (value,) = session.get_inputs()
    shape = [d if isinstance(d, int) else 1 for d in value.shape]
    (logits,) = session.run(None, {value.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)})
    return logits


def test_optimize_default(cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    output = tmp_path / "out.onnx"
    report = onnxsat.optimize(cnn_file, output)
    assert isinstance(report, OptimizeReport)
    assert report.written is True and report.output == str(output)
    assert report.verification is not None and report.verification.ok
    assert report.fusions and report.phases.keys() >= PHASES
    assert any(op.startswith("com.microsoft::") for op in report.nodes_after)  # default target is "ort"
    assert runs_in_ort(output).shape == (1, 10)
    assert sha256(cnn_file) == before
    assert temp_leftovers(tmp_path) == []


def test_optimize_accepts_str_paths(cnn_file: Path, tmp_path: Path) -> None:
    report = onnxsat.optimize(str(cnn_file), str(tmp_path / "out.onnx"))
    assert report.written and (tmp_path / "out.onnx").is_file()


def test_optimize_portable_with_report(cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    output, report_path = tmp_path / "out.onnx", tmp_path / "report.json"
    report = onnxsat.optimize(cnn_file, output, target="portable", report=report_path)
    assert report.target == "portable"
    data = json.loads(report_path.read_text())
    assert data.keys() >= {"nodes_before", "nodes_after", "fusions", "phases", "egraph", "verification"}
    assert data["phases"].keys() >= PHASES
    assert data["verification"]["ok"] is True and data["written"] is True
    assert data["nodes_after"] == report.nodes_after
    model = onnx.load(str(output))
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    assert not any("com.microsoft" in op for op in data["nodes_after"])
    runs_in_ort(output)
    assert sha256(cnn_file) == before


def test_optimize_with_input_shapes(cnn_dynamic_file: Path, tmp_path: Path) -> None:
    (value,) = onnx.load(str(cnn_dynamic_file)).graph.input
    shape = [3, *(d.dim_value for d in value.type.tensor_type.shape.dim[1:])]
    report = onnxsat.optimize(cnn_dynamic_file, tmp_path / "out.onnx", input_shapes={value.name: shape})
    assert report.verification is not None and report.verification.ok
    with pytest.raises(SettingsError):
        onnxsat.optimize(cnn_dynamic_file, tmp_path / "other.onnx", input_shapes={"nope": shape})
    assert not (tmp_path / "other.onnx").exists()


def test_verification_failure_raises_with_report(cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    output, report_path = tmp_path / "out.onnx", tmp_path / "report.json"
    with pytest.raises(VerificationFailedError) as info:
        onnxsat.optimize(cnn_file, output, rtol=0, atol=0, ort_rounding=0, report=report_path)
    error = info.value
    assert isinstance(error, OnnxSatError) and error.exit_code == 8
    report = error.report  # type: ignore[attr-defined]
    assert isinstance(report, OptimizeReport)
    assert report.written is False and report.output is None
    assert report.verification is not None and not report.verification.ok
    assert max(o.max_abs_diff for o in report.verification.outputs) > 0  # a real rounding difference
    assert "verification FAILED" in report.to_table()
    assert json.loads(report_path.read_text())["verification"]["ok"] is False
    assert not output.exists()
    assert temp_leftovers(tmp_path) == []
    assert sha256(cnn_file) == before


def test_verification_failure_with_force_writes(cnn_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.onnx"
    report = onnxsat.optimize(cnn_file, output, rtol=0, atol=0, ort_rounding=0, force=True)
    assert report.written is True
    assert report.verification is not None and not report.verification.ok
    assert runs_in_ort(output).shape == (1, 10)


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _bad_checker_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"])], "g", [x], [x])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return path


def _opset6_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3), str(path))
    return path


@pytest.mark.parametrize(
    ("kind", "error_type"),
    [
        ("missing", InputNotFoundError),
        ("directory", InputNotFoundError),
        ("text", NotOnnxError),
        ("truncated", NotOnnxError),
        ("checker", InvalidModelError),
        ("opset6", RuntimeUnsupportedError),
    ],
)
def test_typed_errors(kind: str, error_type: type[OnnxSatError], tmp_path: Path) -> None:
    source = tmp_path / "in.onnx"
    if kind == "directory":
        source.mkdir()
    elif kind == "text":
        _write_bytes(source, b"not a model\n")
    elif kind == "truncated":
        data = demo_cnn().SerializeToString()
        _write_bytes(source, data[: len(data) // 2])
    elif kind == "checker":
        _bad_checker_model(source)
    elif kind == "opset6":
        _opset6_model(source)
    before = sha256(source) if source.is_file() else None
    output = tmp_path / "out.onnx"
    with pytest.raises(error_type):
        onnxsat.optimize(source, output)
    assert not output.exists()
    assert temp_leftovers(tmp_path) == []
    if before is not None:
        assert sha256(source) == before


@pytest.mark.parametrize("where", ["same", "missing-folder", "directory"])
def test_output_path_errors(where: str, cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    output = {"same": cnn_file, "missing-folder": tmp_path / "nope" / "out.onnx", "directory": tmp_path}[where]
    with pytest.raises(OutputPathError):
        onnxsat.optimize(cnn_file, output)
    assert sha256(cnn_file) == before
    assert temp_leftovers(tmp_path) == []
    assert not (tmp_path / "nope").exists()


def test_python_c_one_liner(cnn_file: Path, tmp_path: Path) -> None:
    cnn_file.rename(tmp_path / "in.onnx")
    before = sha256(tmp_path / "in.onnx")
    result = subprocess.run(
        [sys.executable, "-c", "import onnxsat; onnxsat.optimize('in.onnx', 'out.onnx')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert runs_in_ort(tmp_path / "out.onnx").shape == (1, 10)
    assert sha256(tmp_path / "in.onnx") == before


# ------------------------------------------------------------------------------------------ atomic writes


def _refuse_replace(*args: object, **kwargs: object) -> None:
    raise OSError(28, "No space left on device")


def test_save_model_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("onnxsat.model_io.os.replace", _refuse_replace)
    target = tmp_path / "out.onnx"
    with pytest.raises(OutputPathError):
        model_io.save_model(demo_cnn(), target)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_save_model_keeps_previous_file_when_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("onnxsat.model_io.os.replace", _refuse_replace)
    target = tmp_path / "out.onnx"
    target.write_bytes(b"previous")
    with pytest.raises(OutputPathError):
        model_io.save_model(demo_cnn(), target)
    assert target.read_bytes() == b"previous"
    assert temp_leftovers(tmp_path) == []


def test_optimize_rename_failure_leaves_nothing(
    cnn_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = sha256(cnn_file)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    monkeypatch.setattr("onnxsat.model_io.os.replace", _refuse_replace)
    with pytest.raises(OutputPathError):
        onnxsat.optimize(cnn_file, out_dir / "out.onnx")
    assert list(out_dir.iterdir()) == []
    assert sha256(cnn_file) == before


def test_save_model_relative_path_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model_io.save_model(demo_cnn(), "plain.onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "plain.onnx")))
    assert temp_leftovers(tmp_path) == []


# ------------------------------------------------------------------------------ regressions


def test_report_equal_to_input_does_not_overwrite_input(cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    with pytest.raises(OutputPathError):
        onnxsat.optimize(cnn_file, tmp_path / "out.onnx", report=cnn_file)
    assert sha256(cnn_file) == before


def test_unwritable_report_is_an_output_path_error_and_writes_nothing(cnn_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.onnx"
    with pytest.raises(OutputPathError):
        onnxsat.optimize(cnn_file, output, report=tmp_path / "missing" / "report.json")
    assert not output.exists()


def test_no_module_of_the_package_hides_a_public_name() -> None:
    """Importing a submodule binds it as an attribute of ``onnxsat``: when ``onnxsat/compress/`` held the
    compress command's code, ``onnxsat.compress`` was that package, not the function, as soon as any API call
    had imported it (the README's example failed: 'module' object is not callable)."""
    import onnxsat.api  # what any first call imports

    modules = {path.stem for path in Path(onnxsat.__file__).parent.iterdir() if path.is_dir() or path.suffix == ".py"}
    public = set(onnxsat.__all__) | set(onnxsat._LAZY)
    assert not public & modules
    for name in ("optimize", "sparsify", "prune", "quantize", "compress", "run_pipeline", "verify"):
        assert callable(getattr(onnxsat, name)), name


def test_an_in_memory_model_is_taken_as_a_file_is(cnn_file: Path, tmp_path: Path) -> None:
    """What an exporter or ``onnx.load`` returns goes in as it is, through the same checks as a file."""
    output = tmp_path / "out.onnx"
    report = onnxsat.optimize(onnx.load(cnn_file), output)
    assert report.written and report.verification is not None and report.verification.ok
    np.testing.assert_allclose(runs_in_ort(output), runs_in_ort(cnn_file), rtol=1e-4, atol=1e-5)
    assert not Path(report.input).exists()  # the temporary copy is gone


def test_an_in_memory_model_naming_external_data_is_refused(cnn_file: Path, tmp_path: Path) -> None:
    model = onnx.load(cnn_file)
    onnx.save(
        model,
        tmp_path / "split.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="split.data",
        size_threshold=0,
    )
    without_weights = onnx.load(tmp_path / "split.onnx", load_external_data=False)
    with pytest.raises(InvalidModelError, match=r"onnx\.load"):
        onnxsat.optimize(without_weights, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


def test_compress_keeps_an_in_memory_input_for_its_recipe(tmp_path: Path) -> None:
    """The recipe replays from the original: an in-memory one is kept beside it, and only when a model is
    written."""
    from onnxsat.cli import main
    from onnxsat.zoo.digits_cnn import bundled_digits_cnn

    model, out = onnx.load(bundled_digits_cnn()), tmp_path / "small.onnx"
    settings = {"data": "digits-train", "limit": 200, "techniques": ["prune"], "max_drop": 0.02, "workers": 1}
    report = onnxsat.compress(model, out, **settings)
    kept = tmp_path / "small.recipe.input.onnx"
    assert report.written and kept.exists()
    assert onnx.load(kept).graph == model.graph
    assert main(["run", str(tmp_path / "small.recipe.yaml"), "-o", str(tmp_path / "replay.onnx")]) == 0
    with pytest.raises(DataError):
        onnxsat.compress(model, tmp_path / "none.onnx", **{**settings, "data": str(tmp_path / "missing.npz")})
    assert not (tmp_path / "none.recipe.input.onnx").exists()
