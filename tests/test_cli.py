"""The ``onnxsat`` command line: exit codes, one-line errors, nothing written on failure, input untouched.

Most cases call ``onnxsat.cli.main`` in-process (``capfd`` so that anything a native library writes to
the stderr file descriptor is seen too); a few run real subprocesses through ``python -m onnxsat``
and the installed ``onnxsat`` console script.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.errors import InputNotFoundError
from onnxsat.zoo.synthetic import demo_cnn

PHASES = {"load", "encode", "saturate", "extract", "decode", "verify", "save"}
REPORT_KEYS = {"nodes_before", "nodes_after", "fusions", "phases", "egraph", "verification"}


# ----------------------------------------------------------------------------------------------- helpers


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _console_script() -> str:
    beside = Path(sys.executable).parent / "onnxsat"
    if beside.exists():
        return str(beside)
    found = shutil.which("onnxsat")
    assert found, "the onnxsat console script is not installed"
    return found


def run_cli(argv: Sequence[object], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capfd.readouterr()  # drop anything captured before
    rc = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return rc, out, err


def run_subprocess(argv: Sequence[object], cwd: Path, via: str = "module") -> subprocess.CompletedProcess[str]:
    head = [sys.executable, "-m", "onnxsat"] if via == "module" else [_console_script()]
    return subprocess.run(
        [*head, *(str(a) for a in argv)], cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )


def temp_leftovers(*folders: Path) -> list[Path]:
    return [p for folder in folders if folder.is_dir() for p in folder.glob(".*.tmp")]


def assert_clean_failure(
    rc: int,
    err: str,
    code: int,
    *,
    output: Path | None = None,
    input_path: Path | None = None,
    input_hash: str | None = None,
    folders: Sequence[Path] = (),
    out: str | None = "",
) -> None:
    """The contract for every user error: exit code, one ``onnxsat: error:`` line, nothing written."""
    assert rc == code, f"exit code {rc}, expected {code}; stderr: {err!r}"
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected exactly one stderr line, got {lines!r}"
    assert lines[0].startswith("onnxsat: error:"), lines[0]
    if out is not None:
        assert out == "", f"unexpected stdout: {out!r}"
    if output is not None:
        assert not output.exists() and not output.is_symlink(), f"{output} was written"
    assert temp_leftovers(*folders) == []
    if input_path is not None and input_hash is not None:
        assert sha256(input_path) == input_hash, "the input file was modified"


def tiny_model(nodes: list[onnx.NodeProto], opset: int = 17, ir_version: int = 9) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(nodes, "tiny", [x], [y])
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version, producer_name="test"
    )


def run_in_ort(path: Path, feeds: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    if feeds is None:
        feeds = {}
        for value in session.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in value.shape]
            feeds[value.name] = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return session.run(None, feeds)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


# --------------------------------------------------------------------------------------- bad input files


def _missing(tmp: Path) -> Path:
    return tmp / "missing.onnx"


def _directory(tmp: Path) -> Path:
    folder = tmp / "folder.onnx"
    folder.mkdir()
    return folder


def _write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def _text(tmp: Path) -> Path:
    return _write(tmp, "text.onnx", b"Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n" * 20)


def _random_bytes(tmp: Path) -> Path:
    return _write(tmp, "random.onnx", np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())


def _png(tmp: Path) -> Path:
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00\x00\x00\x10" * 2 + b"\x08\x02\x00\x00\x00"
    return _write(tmp, "image.onnx", header + b"\x00" * 64)


def _empty(tmp: Path) -> Path:
    return _write(tmp, "empty.onnx", b"")


def _tensor_not_model(tmp: Path) -> Path:
    tensor = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    return _write(tmp, "tensor.onnx", tensor.SerializeToString())


def _truncated_half(tmp: Path) -> Path:
    data = demo_cnn().SerializeToString()
    return _write(tmp, "half.onnx", data[: len(data) // 2])


def _save(tmp: Path, name: str, model: onnx.ModelProto) -> Path:
    path = tmp / name
    onnx.save(model, str(path))
    return path


def _undefined_tensor(tmp: Path) -> Path:
    return _save(tmp, "undefined.onnx", tiny_model([helper.make_node("Add", ["x", "ghost"], ["y"])]))


def _invalid_attribute(tmp: Path) -> Path:
    return _save(tmp, "badattr.onnx", tiny_model([helper.make_node("Relu", ["x"], ["y"], bogus=3)]))


def _opset6(tmp: Path) -> Path:
    # ONNX Runtime 1.31 has no kernel for Add-6.
    return _save(tmp, "opset6.onnx", tiny_model([helper.make_node("Add", ["x", "x"], ["y"])], opset=6, ir_version=3))


BAD_INPUTS: dict[str, tuple[Callable[[Path], Path], int]] = {
    "missing": (_missing, 3),
    "directory": (_directory, 3),
    "text": (_text, 4),
    "random-bytes": (_random_bytes, 4),
    "png-header": (_png, 4),
    "empty": (_empty, 4),
    "tensor-not-model": (_tensor_not_model, 4),
    "truncated-half": (_truncated_half, 4),
    "undefined-tensor": (_undefined_tensor, 5),
    "invalid-attribute": (_invalid_attribute, 5),
    "opset6-no-ort-kernel": (_opset6, 6),
}


@pytest.mark.parametrize("kind", list(BAD_INPUTS))
def test_bad_input(kind: str, tmp_path: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    build, code = BAD_INPUTS[kind]
    source = build(tmp_path)
    before = sha256(source) if source.is_file() else None
    output = out_dir / "result.onnx"
    rc, out, err = run_cli(["optimize", source, "-o", output], capfd)
    assert_clean_failure(
        rc, err, code, output=output, input_path=source, input_hash=before, folders=[out_dir, tmp_path], out=out
    )
    if kind == "directory":
        assert source.is_dir() and list(source.iterdir()) == []
    if kind == "missing":
        assert not source.exists()


@pytest.mark.parametrize("fraction", [0.0001, 0.25, 0.5, 0.75, 0.999])
def test_truncated_cnn_cut_points(
    fraction: float, tmp_path: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    data = demo_cnn().SerializeToString()
    cut = max(1, int(len(data) * fraction))
    source = _write(tmp_path, "cut.onnx", data[:cut])
    output = out_dir / "result.onnx"
    rc, out, err = run_cli(["optimize", source, "-o", output], capfd)
    assert_clean_failure(
        rc, err, 4, output=output, input_path=source, input_hash=sha256(source), folders=[out_dir], out=out
    )
    assert cut < len(data)


def test_truncated_every_cut_point_of_a_small_model(
    tmp_path: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every proper prefix fails cleanly. A prefix that ends exactly on a field boundary is valid protobuf
    (e.g. the model minus its opset_import), which only the checker can reject: 5 is fine there."""
    data = tiny_model([helper.make_node("Relu", ["x"], ["y"])]).SerializeToString()
    source, output = tmp_path / "cut.onnx", out_dir / "result.onnx"
    codes = {}
    for cut in range(len(data)):
        source.write_bytes(data[:cut])
        rc, out, err = run_cli(["optimize", source, "-o", output], capfd)
        assert rc in (4, 5), f"cut at {cut}: exit {rc}, stderr {err!r}"
        assert_clean_failure(rc, err, rc, output=output, folders=[out_dir], out=out)
        assert source.read_bytes() == data[:cut]
        codes[cut] = rc
    assert sum(rc == 4 for rc in codes.values()) > len(data) // 2


# ---------------------------------------------------------------------------------------- bad output paths


def test_output_in_missing_folder(cnn_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    output = tmp_path / "no" / "such" / "folder" / "result.onnx"
    rc, out, err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    assert_clean_failure(rc, err, 7, output=output, input_path=cnn_file, input_hash=before, folders=[tmp_path], out=out)
    assert not (tmp_path / "no").exists()


def test_output_is_a_directory(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    rc, out, err = run_cli(["optimize", cnn_file, "-o", out_dir], capfd)
    assert_clean_failure(rc, err, 7, input_path=cnn_file, input_hash=before, folders=[out_dir], out=out)
    assert out_dir.is_dir() and list(out_dir.iterdir()) == []


@pytest.mark.parametrize(
    "spelling", ["same-string", "dot-slash", "absolute-vs-relative", "dot-dot", "symlink", "hardlink"]
)
def test_output_is_the_input(
    spelling: str, cnn_file: Path, tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    monkeypatch.chdir(tmp_path)
    before = sha256(cnn_file)
    source, output = "model.onnx", "model.onnx"
    if spelling == "dot-slash":
        output = "./model.onnx"
    elif spelling == "absolute-vs-relative":
        source = str(cnn_file.resolve())
    elif spelling == "dot-dot":
        output = "out/../model.onnx"
    elif spelling == "symlink":
        (tmp_path / "link.onnx").symlink_to("model.onnx")
        output = "link.onnx"
    elif spelling == "hardlink":
        os.link(cnn_file, tmp_path / "hard.onnx")
        output = "hard.onnx"
    rc, out, err = run_cli(["optimize", source, "-o", output], capfd)
    assert_clean_failure(rc, err, 7, input_path=cnn_file, input_hash=before, folders=[tmp_path, out_dir], out=out)
    if spelling == "symlink":
        assert (tmp_path / "link.onnx").is_symlink()
    if spelling == "hardlink":
        assert sha256(tmp_path / "hard.onnx") == before


def test_output_via_symlink_to_the_input_in_another_folder(
    cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = sha256(cnn_file)
    link = out_dir / "result.onnx"
    link.symlink_to(cnn_file)
    rc, out, err = run_cli(["optimize", cnn_file, "-o", link], capfd)
    assert_clean_failure(rc, err, 7, input_path=cnn_file, input_hash=before, folders=[out_dir], out=out)
    assert link.is_symlink() and link.resolve() == cnn_file.resolve()


def test_unwritable_report_exits_7(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    rc, _out, err = run_cli(
        ["optimize", cnn_file, "-o", out_dir / "result.onnx", "--report", out_dir / "missing" / "r.json"], capfd
    )
    assert_clean_failure(rc, err, 7, input_path=cnn_file, input_hash=before, folders=[out_dir], out=None)
    assert "report" in err


def test_report_path_is_a_directory_exits_7(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    rc, _out, err = run_cli(["optimize", cnn_file, "-o", out_dir / "result.onnx", "--report", out_dir], capfd)
    assert_clean_failure(rc, err, 7, input_path=cnn_file, input_hash=before, folders=[out_dir], out=None)


# ------------------------------------------------------------------------------------------ bad settings


@pytest.mark.parametrize("spec", ["x", "x:a,b", "input:1,3,a,32", ":1,3,32,32", "input=1,3,32,32"])
def test_malformed_input_shape(
    spec: str, cnn_dynamic_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = sha256(cnn_dynamic_file)
    output = out_dir / "result.onnx"
    rc, out, err = run_cli(["optimize", cnn_dynamic_file, "-o", output, "--input-shape", spec], capfd)
    assert_clean_failure(
        rc, err, 9, output=output, input_path=cnn_dynamic_file, input_hash=before, folders=[out_dir], out=out
    )
    assert "--input-shape" in err


@pytest.mark.parametrize("specs", [["x:1,2"], ["inputs:1,3,32,32"], ["input:2,3,32,32", "other:1"]])
def test_input_shape_names_unknown_input(
    specs: list[str], cnn_dynamic_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = sha256(cnn_dynamic_file)
    output = out_dir / "result.onnx"
    argv: list[object] = ["optimize", cnn_dynamic_file, "-o", output]
    for spec in specs:
        argv += ["--input-shape", spec]
    rc, out, err = run_cli(argv, capfd)
    assert_clean_failure(
        rc, err, 9, output=output, input_path=cnn_dynamic_file, input_hash=before, folders=[out_dir], out=out
    )
    assert specs[-1].split(":")[0] in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["optimize"],
        ["optimize", "model.onnx"],  # -o is required
        ["optimize", "model.onnx", "-o", "out.onnx", "--target", "gpu"],
        ["optimize", "model.onnx", "-o", "out.onnx", "--rtol", "tight"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    _out, err = capfd.readouterr()
    assert "error:" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------- success


def test_optimize_success(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    output = out_dir / "result.onnx"
    rc, out, err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    assert rc == 0, err
    assert err.strip() == ""
    assert "verification PASSED" in out and "fusions" in out
    assert "com.microsoft::FusedConv" in out
    assert output.is_file()
    assert temp_leftovers(out_dir) == []
    assert sha256(cnn_file) == before
    optimized = onnx.load(str(output))
    assert len(optimized.graph.node) < len(onnx.load(str(cnn_file)).graph.node)
    (logits,) = run_in_ort(output)
    assert logits.shape == (1, 10)


def test_optimize_replaces_an_existing_output(cnn_file: Path, out_dir: Path, capfd) -> None:
    output = out_dir / "result.onnx"
    output.write_bytes(b"old contents")
    rc, _out, err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    assert rc == 0, err
    onnx.checker.check_model(onnx.load(str(output)))
    assert temp_leftovers(out_dir) == []


def test_optimize_portable_with_json_report(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    output, report_path = out_dir / "result.onnx", out_dir / "r.json"
    rc, out, err = run_cli(["optimize", cnn_file, "-o", output, "--target", "portable", "--report", report_path], capfd)
    assert rc == 0, err
    assert "verification PASSED" in out
    report = json.loads(report_path.read_text())
    assert report.keys() >= REPORT_KEYS
    assert report["phases"].keys() >= PHASES
    assert all(isinstance(v, float) and v >= 0 for v in report["phases"].values())
    assert report["verification"]["ok"] is True
    assert report["written"] is True and report["target"] == "portable"
    assert report["nodes_before"].get("BatchNormalization") == 4
    assert "BatchNormalization" not in report["nodes_after"]
    assert sum(report["nodes_after"].values()) < sum(report["nodes_before"].values())
    assert not any("com.microsoft" in op for op in report["nodes_after"])
    assert not any("com.microsoft" in label for label in report["fusions"])
    model = onnx.load(str(output))
    assert {node.domain for node in model.graph.node} <= {"", "ai.onnx"}
    assert {opset.domain for opset in model.opset_import} <= {"", "ai.onnx"}
    onnx.checker.check_model(model, full_check=True)
    run_in_ort(output)
    assert sha256(cnn_file) == before
    assert temp_leftovers(out_dir) == []


def test_input_shape_for_symbolic_batch(
    cnn_dynamic_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = sha256(cnn_dynamic_file)
    (value,) = onnx.load(str(cnn_dynamic_file)).graph.input
    assert value.type.tensor_type.shape.dim[0].dim_param == "N"
    shape = [4, *(d.dim_value for d in value.type.tensor_type.shape.dim[1:])]
    output, report_path = out_dir / "result.onnx", out_dir / "r.json"
    spec = f"{value.name}:{','.join(map(str, shape))}"
    rc, out, err = run_cli(
        ["optimize", cnn_dynamic_file, "-o", output, "--input-shape", spec, "--report", report_path], capfd
    )
    assert rc == 0, err
    assert "verification PASSED" in out
    assert json.loads(report_path.read_text())["verification"]["ok"] is True
    batch = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (logits,) = run_in_ort(output, {value.name: batch})
    (expected,) = run_in_ort(cnn_dynamic_file, {value.name: batch})
    assert logits.shape == (4, 10)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    assert sha256(cnn_dynamic_file) == before


def test_symbolic_batch_without_input_shape_defaults_to_one(
    cnn_dynamic_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run_cli(["optimize", cnn_dynamic_file, "-o", out_dir / "result.onnx"], capfd)
    assert rc == 0, err
    assert "verification PASSED" in out


# ----------------------------------------------------------------------------------- verification failure


def test_verification_failure_writes_nothing(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    output, report_path = out_dir / "result.onnx", out_dir / "r.json"
    argv = ["optimize", cnn_file, "-o", output, "--rtol", "0", "--atol", "0", "--ort-rounding", "0"]
    argv += ["--report", report_path]
    rc, out, err = run_cli(argv, capfd)
    assert_clean_failure(rc, err, 8, output=output, input_path=cnn_file, input_hash=before, folders=[out_dir], out=None)
    assert "verification FAILED" in out and "MISMATCH" in out and "fusions" in out
    assert "(not written)" in out
    report = json.loads(report_path.read_text())
    assert report["written"] is False and report["output"] is None
    assert report["verification"]["ok"] is False
    # an honest failure: BatchNormalization folding really changed float rounding
    assert max(o["max_abs_diff"] for o in report["verification"]["outputs"]) > 0


def test_verification_failure_with_force_writes_and_exits_8(
    cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = sha256(cnn_file)
    output = out_dir / "result.onnx"
    exact = ["--rtol", "0", "--atol", "0", "--ort-rounding", "0"]
    rc, out, err = run_cli(["optimize", cnn_file, "-o", output, *exact, "--force"], capfd)
    assert rc == 8
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("onnxsat: warning:"), lines
    assert "verification FAILED" in out
    assert output.is_file()
    assert temp_leftovers(out_dir) == []
    assert sha256(cnn_file) == before
    (logits,) = run_in_ort(output)
    assert logits.shape == (1, 10)


# ------------------------------------------------------------------------------------------ atomic writes


def test_failed_rename_leaves_no_output_and_no_temp(
    cnn_file: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("onnxsat.model_io.os.replace", refuse)
    before = sha256(cnn_file)
    output = out_dir / "result.onnx"
    rc, _out, err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    assert rc != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("onnxsat:"), lines
    assert not output.exists()
    assert list(out_dir.iterdir()) == []
    assert sha256(cnn_file) == before


def test_failed_rename_keeps_the_previous_output(
    cnn_file: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("onnxsat.model_io.os.replace", refuse)
    output = out_dir / "result.onnx"
    output.write_bytes(b"previous result")
    rc, _out, _err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    assert rc != 0
    assert output.read_bytes() == b"previous result"
    assert temp_leftovers(out_dir) == []


@pytest.mark.parametrize(
    ("raised", "code", "prefix"),
    [(RuntimeError("boom"), 1, "onnxsat: internal error: RuntimeError: boom"), (KeyboardInterrupt(), 130, "onnxsat:")],
)
def test_unexpected_exceptions_are_one_line(
    raised: BaseException,
    code: int,
    prefix: str,
    cnn_file: Path,
    out_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    def explode(*args: object, **kwargs: object) -> None:
        raise raised

    # the eqsat pass's transform, which the runner calls
    monkeypatch.setattr(importlib.import_module("onnxsat.passes.eqsat").EqsatPass, "transform", staticmethod(explode))
    rc, _out, err = run_cli(["optimize", cnn_file, "-o", out_dir / "result.onnx"], capfd)
    assert rc == code
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    assert "Traceback" not in err
    assert list(out_dir.iterdir()) == []


# ------------------------------------------------------------------------------------------------- demo


def test_demo(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "demo"
    rc, out, err = run_cli(["demo", "--output-dir", folder], capfd)
    assert rc == 0, err
    assert "speedup" in out
    assert "verification PASSED" in out
    assert (folder / "demo_cnn.onnx").is_file() and (folder / "demo_cnn.opt.onnx").is_file()
    report = json.loads((folder / "report.json").read_text())
    latency = report["latency"] if isinstance(report["latency"], list) else [report["latency"]]
    assert latency and all(entry["speedup"] > 0 for entry in latency)
    sparsified = json.loads((folder / "sparsify_report.json").read_text())
    assert (folder / "digits_cnn.sparse.onnx").is_file() and sparsified["written"]
    assert sparsified["overall"] > 0.5 and sparsified["accuracy"]["drop"] <= 0.01
    assert sparsified["metric"] == "top1" and sparsified["held_out"]["score"]["samples"] > 0
    compressed = json.loads((folder / "compress_report.json").read_text())
    assert compressed["written"] and (folder / "digits_resnet.compressed.onnx").is_file()
    assert (folder / "digits_resnet.compressed.recipe.yaml").is_file()
    assert compressed["accuracy"]["drop"] <= 0.01 and compressed["latency"]["speedup"] > 1.0
    assert compressed["held_out"]["score"]["samples"] == 119 and "headline:" in out
    assert temp_leftovers(folder) == []


# ------------------------------------------------------------------------------------------ subprocesses


@pytest.mark.parametrize("via", ["module", "script"])
def test_subprocess_success(via: str, cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    (tmp_path / "out").mkdir()
    result = run_subprocess(
        ["optimize", "model.onnx", "-o", "out/result.onnx", "--target", "portable", "--report", "out/r.json"],
        cwd=tmp_path,
        via=via,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""
    assert "verification PASSED" in result.stdout and "fusions" in result.stdout
    assert json.loads((tmp_path / "out" / "r.json").read_text()).keys() >= REPORT_KEYS
    run_in_ort(tmp_path / "out" / "result.onnx")
    assert sha256(cnn_file) == before
    assert temp_leftovers(tmp_path, tmp_path / "out") == []


@pytest.mark.parametrize(
    ("via", "kind"), [("module", "missing"), ("script", "truncated-half"), ("module", "opset6-no-ort-kernel")]
)
def test_subprocess_errors(via: str, kind: str, tmp_path: Path) -> None:
    build, code = BAD_INPUTS[kind]
    source = build(tmp_path)
    before = sha256(source) if source.is_file() else None
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = run_subprocess(["optimize", source, "-o", out_dir / "result.onnx"], cwd=tmp_path, via=via)
    assert_clean_failure(
        result.returncode,
        result.stderr,
        code,
        output=out_dir / "result.onnx",
        input_path=source,
        input_hash=before,
        folders=[out_dir, tmp_path],
        out=result.stdout,
    )


def test_subprocess_output_equals_input(cnn_file: Path, tmp_path: Path) -> None:
    before = sha256(cnn_file)
    result = run_subprocess(["optimize", "model.onnx", "-o", "./model.onnx"], cwd=tmp_path, via="script")
    assert_clean_failure(
        result.returncode, result.stderr, 7, input_path=cnn_file, input_hash=before, folders=[tmp_path]
    )


def test_subprocess_usage_error_exits_2(tmp_path: Path) -> None:
    result = run_subprocess(["optimize", "model.onnx"], cwd=tmp_path, via="script")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("onnxsat optimize: error: the following arguments are required: -o/--output")
    assert "onnxsat optimize --help" in result.stderr


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["quantize", "m.onnx", "-o", "o.onnx", "--max-drop", "abc"], "onnxsat quantize: error: argument --max-drop"),
        (["optimize", "m.onnx", "-o", "o.onnx", "--bogus"], "onnxsat optimize: error: unrecognized arguments: --bogus"),
        (["zoo", "build", "--frob"], "onnxsat zoo build: error: unrecognized arguments: --frob"),
        ([], "onnxsat: error: the following arguments are required: COMMAND"),
    ],
)
def test_usage_error_is_one_line_naming_the_command(argv: list[str], start: str, capfd) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    _out, err = capfd.readouterr()
    assert err.startswith(start) and err.count("\n") == 1, err
    assert "--help shows the usage" in err


def test_subprocess_debug_shows_traceback(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = run_subprocess(
        ["--debug", "optimize", "missing.onnx", "-o", out_dir / "result.onnx"], cwd=tmp_path, via="module"
    )
    assert result.returncode == InputNotFoundError.exit_code
    assert "Traceback (most recent call last)" in result.stderr
    assert "InputNotFoundError" in result.stderr
    assert "onnxsat: error:" not in result.stderr
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "missing.onnx", "-o", "out.onnx", "--debug"],
        ["bench", "compare", "missing.onnx", "--debug"],
        ["--debug", "profile", "missing.onnx"],
    ],
)
def test_debug_works_after_the_command_too(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The one-line error says "rerun with --debug", and people add it at the end. With it, the traceback and the
    same exit code (it was 1 for every error, which scripts branching on the code misread)."""
    paths = [str(tmp_path / arg) if arg.endswith(".onnx") else arg for arg in argv]
    assert main(paths) == InputNotFoundError.exit_code
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "InputNotFoundError" in err
    assert main([arg for arg in paths if arg != "--debug"]) == InputNotFoundError.exit_code
    assert "onnxsat: error: input model not found" in capsys.readouterr().err


# ------------------------------------------------------------------------------ regressions
# Each reproduces a defect found while writing these tests (fixed since).


def test_report_path_equal_to_input_must_not_overwrite_input(
    cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = sha256(cnn_file)
    rc, _out, err = run_cli(["optimize", cnn_file, "-o", out_dir / "result.onnx", "--report", cnn_file], capfd)
    assert sha256(cnn_file) == before, "the input model was overwritten by the JSON report"
    assert rc == 7, err


def test_report_path_equal_to_output_is_refused(
    cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    output = out_dir / "result.onnx"
    rc, _out, _err = run_cli(["optimize", cnn_file, "-o", output, "--report", output], capfd)
    assert rc == 7, f"exit {rc}; {output} now starts with {output.read_bytes()[:20]!r}"


@pytest.mark.parametrize(
    ("command", "clash"),
    [
        (["sparsify", "{model}", "--sparsity", "0.5", "--data", "{data}", "-o", "{data}"], "output path"),
        (["optimize", "{model}", "--inputs", "{feeds}", "-o", "{feeds}"], "output path"),
        (["optimize", "{model}", "--inputs", "{feeds}", "-o", "{out}", "--report", "{feeds}"], "report path"),
        (["sparsify", "{model}", "--sparsity", "0.5", "--data", "{data}", "-o", "{out}", "--html", "{data}"], "--html"),
        (["compress", "{model}", "--data", "{out_dir}/s.recipe.npz", "-o", "{out_dir}/s.onnx"], "recipe file"),
        (["compress", "{model}", "--data", "{data}", "--eval-data", "{out_dir}/s.recipe.fit.npz",
          "-o", "{out_dir}/s.onnx"], "recipe file"),
    ],
)  # fmt: skip
def test_no_output_replaces_data_or_feeds_the_run_reads(
    command: list[str], clash: str, cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A data or feeds file is an input as much as the model: `-o`, `--report`, `--html` or compress's recipe
    files (a rerun on the saved search samples) replaced one with exit 0."""
    rng = np.random.default_rng(0)
    data, feeds = out_dir / "data.npz", out_dir / "feeds.npz"
    declared = onnx.load(cnn_file).graph.input[0]
    samples = rng.standard_normal((8, *[d.dim_value for d in declared.type.tensor_type.shape.dim][1:]))
    samples = samples.astype(np.float32)
    for path in (data, out_dir / "s.recipe.npz", out_dir / "s.recipe.fit.npz"):
        np.savez(path, inputs=samples)
    np.savez(feeds, **{declared.name: samples[:1]})
    before = {path: sha256(path) for path in out_dir.glob("*.npz")}
    names = {"model": cnn_file, "data": data, "feeds": feeds, "out": out_dir / "r.onnx", "out_dir": out_dir}
    rc, _out, err = run_cli([part.format(**names) for part in command], capfd)
    assert rc == 7, err
    assert clash in err and "choose another path" in err
    assert {path: sha256(path) for path in out_dir.glob("*.npz")} == before
    assert not (out_dir / "r.onnx").exists() and not (out_dir / "s.onnx").exists()


def test_unwritable_report_writes_no_model(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    output = out_dir / "result.onnx"
    rc, _out, _err = run_cli(["optimize", cnn_file, "-o", output, "--report", out_dir / "missing" / "r.json"], capfd)
    assert rc == 7
    assert not output.exists(), "exit 7 (error) but the output model was written anyway"


def test_output_folder_is_a_file(cnn_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = sha256(cnn_file)
    output = cnn_file / "result.onnx"  # "model.onnx/result.onnx": the folder is a regular file
    rc, out, err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    assert_clean_failure(rc, err, 7, input_path=cnn_file, input_hash=before, folders=[tmp_path], out=out)


def test_negative_input_shape_dim_is_a_settings_error(
    cnn_dynamic_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    output = out_dir / "result.onnx"
    rc, out, err = run_cli(["optimize", cnn_dynamic_file, "-o", output, "--input-shape", "input:-1,3,32,32"], capfd)
    assert_clean_failure(rc, err, 9, output=output, folders=[out_dir], out=out)


def test_output_file_mode_follows_umask(cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    output = out_dir / "result.onnx"
    previous = os.umask(0o022)
    try:
        rc, _out, err = run_cli(["optimize", cnn_file, "-o", output], capfd)
    finally:
        os.umask(previous)
    assert rc == 0, err
    mode = stat.S_IMODE(output.stat().st_mode)
    assert mode == 0o644, f"output mode is {oct(mode)}; a plain write under umask 022 gives 0o644"


@pytest.mark.parametrize("spec", ["input:1,3", "input:", "input:2,4,64,64"])
def test_input_shape_that_does_not_fit_the_declared_shape_is_a_settings_error(
    spec: str, cnn_dynamic_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    output = out_dir / "result.onnx"
    rc, out, err = run_cli(["optimize", cnn_dynamic_file, "-o", output, "--input-shape", spec], capfd)
    assert_clean_failure(rc, err, 9, output=output, folders=[out_dir], out=out)
    assert "does not fit the declared shape" in err


def test_missing_input_is_reported_before_the_output_path(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.onnx"
    rc, _out, err = run_cli(["optimize", missing, "-o", missing], capfd)
    assert rc == 3, err


def test_the_runtimes_own_warnings_stay_off_stderr_unless_debugging(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The model declares its output [1, 8] but makes [2, 4]: ORT warns on every run, here in the sessions its
    own quantizer calibrates with, which ONNXSat does not configure."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([2, 4], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Reshape", ["h", "shape"], ["y"])],
        "wrong_output_shape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [weight, shape],
    )
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    quantize = ["quantize", str(model), "--mode", "static", "--no-node-timing", "--max-drop", "100%"]
    main([*quantize, "-o", str(tmp_path / "debug.onnx"), "--debug"])
    assert "[W:onnxruntime" in capfd.readouterr().err  # the model does make ORT warn
    main([*quantize, "-o", str(tmp_path / "quiet.onnx")])
    assert "onnxruntime" not in capfd.readouterr().err


def test_a_result_forced_out_over_its_held_out_budget_is_a_warning_and_exit_code_8(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner writes a result the held-out data refutes only with --force (see the pass core's tests);
    the command then says so on stderr for every budgeted command, and exits 8 as for any forced failure. A
    drop over the budget within the held-out data's sampling error is written, with a warning that says so."""
    import argparse
    from types import SimpleNamespace

    from onnxsat.commands import printing

    held = SimpleNamespace(drop=0.0223, within_budget=False, refuted=True, score=SimpleNamespace(samples=6))
    report = SimpleNamespace(held_out=held, verification=SimpleNamespace(ok=True))
    monkeypatch.setattr(printing, "run_file", lambda *args, **kwargs: report)
    monkeypatch.setattr(printing, "_emit", lambda *args: None)
    args = argparse.Namespace(report=None, html=None, model="m.onnx", output="o.onnx", input_shape=[], force=True)
    assert printing.run_and_print(args, SimpleNamespace()) == 8
    assert capsys.readouterr().err == (
        "onnxsat: warning: held-out drop 2.23% is over the budget; the result was written because of --force\n"
    )
    held.refuted = False
    assert printing.run_and_print(args, SimpleNamespace()) == 0
    assert "within the sampling error of its 6 samples" in capsys.readouterr().err
    held.within_budget = True
    assert printing.run_and_print(args, SimpleNamespace()) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--rtol", "-1", "--rtol must be 0 or more (got -1)"),
        ("--atol", "-0.001", "--atol must be 0 or more"),
        ("--max-iterations", "-5", "--max-iterations must be positive (got -5)"),
        ("--max-seconds", "0", "--max-seconds must be positive"),
        ("--max-seconds", "nan", "--max-seconds must be positive (got nan)"),  # it meant no limit
    ],
)
def test_negative_limits_and_tolerances_are_refused(
    cnn_file: Path, out_dir: Path, capfd: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    """A negative tolerance passed verification ("rtol -1"), a negative limit stopped at once, both exit 0."""
    rc, _out, err = run_cli(["optimize", cnn_file, "-o", out_dir / "o.onnx", flag, value], capfd)
    assert rc == 9 and message in err and not (out_dir / "o.onnx").exists()


def test_bench_large_refuses_a_folder_it_cannot_make_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """It was an internal error (FileNotFoundError, exit 1); a missing folder is now made, as --keep's is."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rc, _out, err = run_cli(["bench", "large", "--size-gb", "0.01", "--dir", blocker / "sub"], capfd)
    assert rc == 7 and "cannot create --dir folder" in err and "Traceback" not in err


def test_a_cache_that_cannot_be_kept_is_a_one_line_warning(
    cnn_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only home gave raw Python warnings (source path, code line) on an otherwise quiet run; a cache folder
    under an unknown user's home was an internal error."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("ONNXSAT_CACHE_DIR", str(blocker))
    assert main(["optimize", str(cnn_file), "-o", str(tmp_path / "o.onnx"), "--cost", "measured"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and all(line.startswith("onnxsat: warning: ") and "cost cache" in line for line in lines)
    monkeypatch.setenv("ONNXSAT_CACHE_DIR", "~no_such_user_here/cache")
    assert main(["optimize", str(cnn_file), "-o", str(tmp_path / "o2.onnx"), "--cost", "measured"]) == 9
    assert "names a home folder that cannot be found" in capsys.readouterr().err
