"""Outputs never replace what the run reads or what is no file: the input's external data (as the output, the
report or the page, by any name for it), the pipeline file, a device or a pipe; names that cannot be written
atomically are refused before any work, and a symbolic link stays a link."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main


@pytest.fixture
def external(tmp_path: Path) -> Path:
    """m.onnx, its weight in weights.bin."""
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 7
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("link", ["same", "symlink", "hard link"])
@pytest.mark.parametrize("option", ["-o", "--report", "--html"])
def test_no_output_replaces_the_inputs_external_data(
    external: Path, option: str, link: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optimize m.onnx -o weights.bin` replaced the input's weights with the result: the input was lost, exit 0."""
    data = external.with_name("weights.bin")
    before = digest(data)
    name = {"same": data, "symlink": external.with_name("link.bin"), "hard link": external.with_name("hard.bin")}[link]
    if link == "symlink":
        name.symlink_to(data.name)
    elif link == "hard link":
        os.link(data, name)
    argv = ["optimize", str(external), "-o", str(external.with_name("out.onnx"))]
    argv = [*argv[:3], str(name)] if option == "-o" else [*argv, option, str(name)]
    err = refused(argv, capsys)
    assert "is a file this run reads" in err and "weights.bin" in err
    assert digest(data) == before and not external.with_name("out.onnx").exists()


def test_a_pipeline_writes_neither_its_result_nor_its_report_over_its_own_file(
    external: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = external.with_name("p.yaml")
    pipeline.write_text("input_model: m.onnx\noutput_model: o.onnx\npasses:\n  - type: eqsat\n")
    before = digest(pipeline)
    assert "is a file this run reads" in refused(["run", str(pipeline), "-o", str(pipeline)], capsys)
    assert "is a file this run reads" in refused(["run", str(pipeline), "--report", str(pipeline)], capsys)
    assert digest(pipeline) == before


def test_a_pipe_standard_output_and_a_folder_name_are_no_output_files(
    external: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o /dev/null` as root replaced the device with a regular file: an output is renamed over its path."""
    fifo = external.with_name("fifo")
    os.mkfifo(fifo)
    assert "is a device or a pipe, not a file" in refused(["optimize", str(external), "-o", str(fifo)], capsys)
    assert fifo.exists() and not fifo.is_file()
    assert "not to standard output" in refused(["optimize", str(external), "-o", "-"], capsys)
    folder = f"{external.parent}/newout/"
    assert "names a folder" in refused(["optimize", str(external), "-o", folder], capsys)
    assert not Path(folder.rstrip("/")).exists()


def test_a_name_too_long_to_write_atomically_is_refused_before_any_work(
    external: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 245-byte name ran the whole optimization, then could not be written (its temporary name is longer)."""
    name = external.with_name("a" * 240 + ".onnx")
    assert "output file name too long: 245 bytes" in refused(["optimize", str(external), "-o", str(name)], capsys)


def test_an_output_through_a_symbolic_link_writes_the_file_it_names(
    external: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real, link = external.with_name("real.onnx"), external.with_name("latest.onnx")
    real.write_bytes(b"")
    link.symlink_to(real.name)
    assert main(["optimize", str(external), "-o", str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink() and real.stat().st_size > 0
    onnx.checker.check_model(str(link))


def test_a_compress_recipe_path_that_cannot_be_written_is_refused_before_the_search(
    external: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`c.recipe.npz` a folder: the search ran 68 s and wrote the model, then failed on the recipe (exit 7)."""
    external.with_name("c.recipe.npz").mkdir()
    argv = ["compress", str(external), "-o", str(external.with_name("c.onnx")), "--data", "random"]
    assert "output path is a directory" in refused(argv, capsys)
    assert not external.with_name("c.onnx").exists()
