"""A one-file model's large weights stay in its file while ONNXSat works, and go back into one file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxsat
from onnxsat import external_data, inline_weights, model_io
from onnxsat.errors import NotOnnxError
from onnxsat.verification import run_model


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kilobytes instead of megabytes, so the models here stay small."""
    monkeypatch.setattr(inline_weights, "MIN_LAZY_FILE", 4096)
    monkeypatch.setattr(inline_weights, "MIN_LAZY_BYTES", 1024)


def _model(path: Path) -> onnx.ModelProto:
    """x @ W1 (large) + b (small) -> Relu -> @ W2 (large, transposed twice so that optimize has work)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((48, 32)).astype(np.float32), "w2")
    bias = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t1"], perm=[1, 0]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
        helper.make_node("MatMul", ["t2", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [w1, bias, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)
    return model


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_large_initializers_become_references_to_the_file_itself(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    original = _model(path)
    loaded = inline_weights.load_structure(path)
    assert loaded is not None
    external = {t.name for t in loaded.graph.initializer if external_data.is_external(t)}
    assert external == {"w1", "w2"}  # the 192-byte bias stays inline
    base = model_io.model_folder(path)
    for tensor in loaded.graph.initializer:
        ref = external_data.reference(tensor, base) if external_data.is_external(tensor) else None
        if ref is not None:
            assert ref.path == path.resolve()
        value = external_data.tensor_value(tensor, base)
        np.testing.assert_array_equal(value, _initializers(original)[tensor.name])
    assert [n.op_type for n in loaded.graph.node] == [n.op_type for n in original.graph.node]


def test_written_back_into_one_file_equal_to_the_original(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    original = _model(path)
    loaded = model_io.load_model(path, weights_on_disk=True)
    out = tmp_path / "copy.onnx"
    model_io.save_model(loaded, out, model_io.model_folder(path), inline_source=path)
    assert not model_io.data_file_path(out).exists()
    written = onnx.load(str(out))
    onnx.checker.check_model(written)
    assert not external_data.has_external_data(written)
    got, want = _initializers(written), _initializers(original)
    assert sorted(t.name for t in written.graph.initializer) == sorted(want)  # each once, none left external
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    feeds = {"x": np.ones((4, 64), np.float32)}
    np.testing.assert_array_equal(run_model(written, feeds, "copy")[0], run_model(original, feeds, "original")[0])


def test_small_files_and_damaged_files_are_parsed_as_usual(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    _model(path)
    monkeypatch.setattr(inline_weights, "MIN_LAZY_FILE", path.stat().st_size + 1)
    assert inline_weights.load_structure(path) is None
    monkeypatch.setattr(inline_weights, "MIN_LAZY_FILE", 4096)
    truncated = tmp_path / "cut.onnx"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size - 100])
    assert inline_weights.load_structure(truncated) is None
    with pytest.raises(NotOnnxError):
        model_io.load_model(truncated, weights_on_disk=True)


def test_optimize_leaves_weights_on_disk_and_writes_one_file(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    original = _model(path)
    before = path.read_bytes()
    out = tmp_path / "opt.onnx"
    report = onnxsat.optimize(path, out)
    assert path.read_bytes() == before  # the input, whose bytes the run read in place, is untouched
    assert report.verification.ok and report.written
    assert not model_io.data_file_path(out).exists()
    written = onnx.load(str(out))
    assert not external_data.has_external_data(written)
    assert "Transpose" not in {n.op_type for n in written.graph.node}
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)}
    np.testing.assert_allclose(
        run_model(written, feeds, "result")[0], run_model(original, feeds, "original")[0], rtol=1e-5, atol=1e-5
    )
    # the weights read in place are the file's own bytes: its size counts them once (it read twice as large)
    assert report.sizes["original"] == path.stat().st_size


def test_report_gives_saturation_time_per_rule_family(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    _model(path)
    report = onnxsat.optimize(path, tmp_path / "opt.onnx")
    seconds = [entry["seconds"] for entry in report.rule_seconds]
    assert seconds == sorted(seconds, reverse=True) and seconds
    families = {entry["family"] for entry in report.rule_seconds}
    assert {"analysis", "consecutive"} <= families
    assert all(0 <= e["search_apply_seconds"] <= e["seconds"] + 1e-3 for e in report.rule_seconds)
    assert "saturation seconds by rule family" in report.to_table()
