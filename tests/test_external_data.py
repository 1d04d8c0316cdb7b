"""Models whose weights live in external data files: optimized lazily, and untrusted locations refused.

Every refusal test checks the exit code, the one stderr line, that no output was written, and, where
a location points at a real file outside the folder, that the file was never opened (its access time
is pinned in the past and must not move).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxsat import external_data
from onnxsat.cli import main
from onnxsat.model_io import check_model, load_model, model_folder
from onnxsat.zoo.synthetic import demo_cnn


def save_external(model: onnx.ModelProto, path: Path, location: str = "weights.bin") -> Path:
    """Save ``model`` with every initializer in one external file beside it."""
    onnx.save_model(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0
    )
    return path


def set_location(model_path: Path, location: str, *, tensor_index: int = 0) -> None:
    """Point one initializer's external data at ``location`` (what a hostile file would do)."""
    model = onnx.load(str(model_path), load_external_data=False)
    for entry in model.graph.initializer[tensor_index].external_data:
        if entry.key == "location":
            entry.value = location
    model_path.write_bytes(model.SerializeToString())


def set_entry(model_path: Path, key: str, value: str) -> None:
    model = onnx.load(str(model_path), load_external_data=False)
    entries = model.graph.initializer[0].external_data
    for entry in entries:
        if entry.key == key:
            entry.value = value
            break
    else:
        entry = entries.add()
        entry.key, entry.value = key, value
    model_path.write_bytes(model.SerializeToString())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(argv: list[str | Path], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capfd.readouterr().err


def run_ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture
def external_cnn(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    return save_external(demo_cnn(), folder / "cnn.onnx")


# ---- lazy loading, folding from disk, streaming on save ------------------------------------------------


def test_load_keeps_weights_on_disk(external_cnn: Path) -> None:
    model = load_model(external_cnn)
    tensors = [t for t in external_data.iter_tensors(model) if external_data.is_external(t)]
    assert tensors, "every initializer was saved externally"
    assert all(not t.raw_data for t in tensors), "no external bytes are copied into the protobuf"
    check_model(model)  # the checker sees stand-ins, not missing files


def test_optimize_external_model_writes_data_file_and_matches(
    external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    source_data = external_cnn.parent / "weights.bin"
    before = digest(source_data), digest(external_cnn)
    out = tmp_path / "out" / "cnn.opt.onnx"
    out.parent.mkdir()
    code, err = run(["optimize", external_cnn, "-o", out], capfd)
    assert code == 0, err
    assert (digest(source_data), digest(external_cnn)) == before, "input model and its data are untouched"
    data_file = out.with_name("cnn.opt.onnx.data")
    assert data_file.is_file()
    written = onnx.load(str(out), load_external_data=False)
    external = [t for t in written.graph.initializer if external_data.is_external(t)]
    assert external, "large weights are in the output's data file"
    for tensor in external:
        entries = {e.key: e.value for e in tensor.external_data}
        assert entries["location"] == data_file.name
        assert int(entries["offset"]) % 4096 == 0, "tensors start on page boundaries"
    assert any(n.op_type == "FusedConv" for n in written.graph.node), "BN folding read its weights from disk"
    feeds = {"input": np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(external_cnn, feeds)[0], rtol=1e-4, atol=1e-5)


def test_output_data_file_may_not_replace_the_inputs_data(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model_path = save_external(demo_cnn(), tmp_path / "cnn.onnx", location="out.onnx.data")
    before = digest(tmp_path / "out.onnx.data")
    code, err = run(["optimize", model_path, "-o", tmp_path / "out.onnx"], capfd)
    assert code == 7
    assert "external data" in err and err.count("\n") == 1
    assert digest(tmp_path / "out.onnx.data") == before
    assert not (tmp_path / "out.onnx").exists()


def test_tensor_value_reads_only_its_own_bytes(external_cnn: Path) -> None:
    model = load_model(external_cnn)
    tensor = model.graph.initializer[0]
    loaded = onnx.load(str(external_cnn))  # onnx's own eager load, as the reference
    np.testing.assert_array_equal(
        external_data.tensor_value(tensor, model_folder(external_cnn)),
        onnx.numpy_helper.to_array(loaded.graph.initializer[0]),
    )
    assert not tensor.raw_data, "reading a value does not load it into the model"


def test_in_memory_model_writes_large_tensors_to_data_file(tmp_path: Path) -> None:
    """A model held in memory is written with a data file when it has external-data origins."""
    from onnxsat.model_io import save_model

    model = load_model(save_external(demo_cnn(), tmp_path / "cnn.onnx"))
    target = tmp_path / "copy.onnx"
    save_model(model, target, model_folder(tmp_path / "cnn.onnx"))
    reloaded = onnx.load(str(target))  # onnx follows the references: they are valid and inside the folder
    original = onnx.load(str(tmp_path / "cnn.onnx"))
    for a, b in zip(reloaded.graph.initializer, original.graph.initializer, strict=True):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))
    assert not list(tmp_path.glob(".*.tmp")), "no temporary files are left behind"


# ---- untrusted locations ------------------------------------------------------------------------------


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the model's folder, with an access time pinned in the past."""
    path = tmp_path / "secret.bin"
    path.write_bytes(b"\x00" * 4096)
    os.utime(path, (1_000_000, 1_000_000))
    return path


def assert_refused(model_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], code: int, *words: str) -> None:
    out = tmp_path / "refused.onnx"
    exit_code, err = run(["optimize", model_path, "-o", out], capfd)
    assert exit_code == code, err
    assert err.startswith("onnxsat: error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err
    assert not out.exists() and not out.with_name("refused.onnx.data").exists()


def test_location_escaping_the_folder_is_refused_unread(
    external_cnn: Path, tmp_path: Path, secret: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    set_location(external_cnn, "../secret.bin")
    assert_refused(external_cnn, tmp_path, capfd, 10, "outside the model's folder")
    assert secret.stat().st_atime == 1_000_000, "the file outside the folder was never read"


def test_deep_traversal_to_system_file_is_refused(
    external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    set_location(external_cnn, "../../../../../../../../etc/passwd")
    assert_refused(external_cnn, tmp_path, capfd, 10, "outside the model's folder")


def test_absolute_location_is_refused(
    external_cnn: Path, tmp_path: Path, secret: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    set_location(external_cnn, str(secret))
    assert_refused(external_cnn, tmp_path, capfd, 10, "absolute path")
    assert secret.stat().st_atime == 1_000_000


def test_symlink_out_of_the_folder_is_refused(
    external_cnn: Path, tmp_path: Path, secret: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (external_cnn.parent / "link.bin").symlink_to(secret)
    set_location(external_cnn, "link.bin")
    assert_refused(external_cnn, tmp_path, capfd, 10, "outside the model's folder")
    assert secret.stat().st_atime == 1_000_000


def test_symlinked_folder_inside_is_allowed(
    external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A symlink that stays inside the folder is an ordinary layout, not an escape."""
    (external_cnn.parent / "alias.bin").symlink_to(external_cnn.parent / "weights.bin")
    model = onnx.load(str(external_cnn), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "alias.bin"
    external_cnn.write_bytes(model.SerializeToString())
    code, err = run(["optimize", external_cnn, "-o", tmp_path / "ok.onnx"], capfd)
    assert code == 0, err


def test_fifo_location_is_refused_without_blocking(
    external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(external_cnn.parent / "pipe")  # opening it for reading would block forever
    set_location(external_cnn, "pipe")
    assert_refused(external_cnn, tmp_path, capfd, 10, "not a regular file")


def test_nul_byte_in_location_is_refused(external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    set_location(external_cnn, "weights.bin\x00.txt")
    assert_refused(external_cnn, tmp_path, capfd, 10, "NUL")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("offset", "999999999", ("lies outside",)),
        ("length", "4", ("dims and type need",)),
        ("offset", "-8", ("lies outside",)),
        ("length", "many", ("not integers",)),
    ],
)
def test_bad_offsets_and_lengths_are_refused(
    external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], key: str, value: str, words: tuple[str, ...]
) -> None:
    set_entry(external_cnn, key, value)
    assert_refused(external_cnn, tmp_path, capfd, 5, *words)


def test_missing_data_file_is_refused(external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (external_cnn.parent / "weights.bin").unlink()
    assert_refused(external_cnn, tmp_path, capfd, 5, "cannot be read")


def write_constant_model(folder: Path, size: int, location: str, offset: int) -> Path:
    """``y = x + c`` where the Constant ``c`` (``size`` float32) points at ``location`` in external data."""
    value = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[size])
    value.data_location = TensorProto.EXTERNAL
    for key, entry_value in (("location", location), ("offset", str(offset)), ("length", str(size * 4))):
        entry = value.external_data.add()
        entry.key, entry.value = key, entry_value
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=value), helper.make_node("Add", ["x", "c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
    )
    folder.mkdir(exist_ok=True)
    path = folder / "const.onnx"
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def test_external_constant_attribute_outside_folder_is_refused(
    tmp_path: Path, secret: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """References hide in Constant attributes too, not only in initializers."""
    path = write_constant_model(tmp_path / "m", 4, "../secret.bin", 0)
    assert_refused(path, tmp_path, capfd, 10, "outside the model's folder")
    assert secret.stat().st_atime == 1_000_000


# ---- symbolic dimensions ------------------------------------------------------------------------------


def test_symbolic_dimension_names_are_kept(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``batch`` and ``sequence`` survive exactly, on inputs and outputs, with fixed dims beside them."""
    weight = onnx.numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 8])],
        [weight],
    )
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    source, out = tmp_path / "seq.onnx", tmp_path / "seq.opt.onnx"
    onnx.save(model, str(source))
    code, err = run(["optimize", source, "-o", out, "--input-shape", "x:2,5,8"], capfd)
    assert code == 0, err
    written = onnx.load(str(out))
    for before, after in (
        (model.graph.input[0], written.graph.input[0]),
        (model.graph.output[0], written.graph.output[0]),
    ):
        assert after.type.tensor_type.shape == before.type.tensor_type.shape
    dims = [d.dim_param or d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "sequence", 8]


def test_external_constant_attribute_inside_folder_is_streamed_to_the_output(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An attribute tensor that lives in external data keeps living there, now in the output's file (as the
    initializer the Constant node is read as)."""
    values = np.arange(512, dtype=np.float32)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "const.bin").write_bytes(b"\0" * 64 + values.tobytes())
    source, out = write_constant_model(tmp_path / "m", 512, "const.bin", 64), tmp_path / "out.onnx"
    code, err = run(["optimize", source, "-o", out, "--target", "none"], capfd)
    assert code == 0, err
    written = onnx.load(str(out), load_external_data=False)
    assert "Constant" not in [node.op_type for node in written.graph.node]
    tensor = written.graph.initializer[0]
    assert external_data.is_external(tensor)
    assert {e.key: e.value for e in tensor.external_data}["location"] == "out.onnx.data"
    feeds = {"x": np.ones(512, dtype=np.float32)}
    np.testing.assert_array_equal(run_ort(out, feeds)[0], values + 1)


@pytest.mark.parametrize(
    "command",
    [
        ["prune", "--rate", "0.25"],
        ["quantize", "--no-node-timing", "--mode", "static", "--budget-minutes", "1"],
        ["sparsify", "--max-drop", "50%"],
    ],
)
def test_commands_that_score_on_data_read_the_weights_from_any_folder(
    external_cnn: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command
) -> None:
    """Scoring runs the models from bytes, where the data file's relative path meant the working folder."""
    data = tmp_path / "data.npz"
    np.savez(data, inputs=np.random.default_rng(0).standard_normal((12, 3, 64, 64)).astype(np.float32))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, err = run([command[0], external_cnn, "-o", tmp_path / "out.onnx", *command[1:], "--data", data], capfd)
    assert code == 0, err


def test_given_bytes_are_the_file_and_its_data(external_cnn: Path, tmp_path: Path) -> None:
    """Reports' "original" size is the model as the user gave it, not the normal form held in memory."""
    model = onnx.load(str(external_cnn), load_external_data=False)
    data = sum(p.stat().st_size for p in external_cnn.parent.iterdir() if p != external_cnn)
    assert external_data.given_bytes(model, str(external_cnn)) == external_cnn.stat().st_size + data
    model.doc_string = "restated"  # a model in memory differs from its file: the file counts
    assert external_data.given_bytes(model, str(external_cnn)) == external_cnn.stat().st_size + data
    assert external_data.given_bytes(model, "<memory>") == external_data.stored_bytes(model)
