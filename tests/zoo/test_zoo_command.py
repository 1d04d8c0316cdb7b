"""``onnxsat zoo build`` (the package's models, no optional dependency) and ``python -m tools.zoo build`` (the same
plus the PyTorch exports): every model without PyTorch built and checked; PyTorch's absence and bad input refused."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from onnxsat.cli import main
from onnxsat.zoo import catalogue
from onnxsat.zoo.catalogue import zoo_models
from tools.zoo import build as tools_zoo

TORCH_NAMES = {"resnet18", "resnet50", "mobilenet_v2", "shufflenet_v2_x1_0", "squeezenet1_1", "vgg11_bn"}
TORCH_NAMES |= {"googlenet", "vit_tiny", "bert_tiny"}


def tools_main(argv: list[str]) -> int:
    """``python -m tools.zoo`` with ``argv`` (the same arguments after ``zoo`` as ``onnxsat zoo``)."""
    assert argv[0] == "zoo"
    return tools_zoo.main(argv[1:])


_real_find_spec = importlib.util.find_spec


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make torch and torchvision look uninstalled to the catalogue."""

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name in ("torch", "torchvision") else _real_find_spec(name, package)

    monkeypatch.setattr(catalogue.importlib.util, "find_spec", find_spec)


def test_list_names_every_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "build", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(zoo_models())
    assert {"simple_classifier", "digits_cnn", "demo_cnn", "conv_bn_relu_chain", "densenet_like"} <= set(listed)
    assert not TORCH_NAMES & set(listed), "the package's zoo builds no PyTorch model"
    assert all(not model.needs for model in zoo_models().values())
    assert tools_main(["zoo", "build", "--list"]) == 0
    tools_listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert tools_listed == list(tools_zoo.zoo_models()) and tools_listed[: len(listed)] == listed
    assert set(tools_listed) >= TORCH_NAMES


def test_the_package_builds_its_whole_zoo_without_warnings(
    no_torch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["zoo", "build", "--out", str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.iterdir()) == sorted(zoo_models())
    assert capsys.readouterr().err == ""


def test_without_torch_everything_else_is_built_and_valid(
    no_torch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new" / "zoo"
    assert tools_main(["zoo", "build", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    buildable = [m.name for m in tools_zoo.zoo_models().values() if not m.needs]
    assert sorted(p.stem for p in out.iterdir()) == sorted(buildable)
    assert "skipping 10 PyTorch models" in captured.err and "[zoo]" in captured.err
    for path in out.iterdir():
        onnx.checker.check_model(onnx.load(str(path)))
    assert "62,006 params" in next(line for line in captured.out.splitlines() if line.startswith("simple_classifier"))


def test_named_models_are_seeded(tmp_path: Path) -> None:
    for seed, folder in ((0, "a"), (0, "b"), (1, "c")):
        assert main(["zoo", "build", "simple_classifier", "--seed", str(seed), "--out", str(tmp_path / folder)]) == 0
    a, b, c = (tmp_path / f / "simple_classifier.onnx" for f in "abc")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


def test_torch_model_without_torch_says_how_to_install(
    no_torch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tools_main(["zoo", "build", "digits_cnn", "resnet18", "--out", str(tmp_path)]) == 9
    err = capsys.readouterr().err
    assert "cannot build resnet18 without torch and torchvision" in err
    assert "pip install /opt/wheels/torch-" in err and "'.[zoo]'" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # checked before anything was built


def test_unknown_name_lists_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "build", "simple_classifier", "alexnet_xl", "--out", str(tmp_path)]) == 9
    err = capsys.readouterr().err
    assert err.startswith("onnxsat: error: unknown zoo model 'alexnet_xl'; known models: simple_classifier, ")
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []
    assert err.rstrip().endswith(
        "(PyTorch exports are built from a checkout of the repository: python -m tools.zoo build)"
    )
    assert main(["zoo", "build", "resnet18", "--out", str(tmp_path)]) == 9  # a PyTorch model: not the package's
    assert "python -m tools.zoo build" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_output_folder_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert main(["zoo", "build", "demo_cnn", "--out", str(a_file)]) == 7
    assert main(["zoo", "build", "demo_cnn", "--out", str(a_file / "below")]) == 7
    assert main(["zoo", "build", "demo_cnn"]) == 9
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"onnxsat: error: --out is not a folder: {a_file}",
        f"onnxsat: error: cannot create --out folder {a_file / 'below'}: Not a directory",
        "onnxsat: error: zoo build needs --out DIR (or --list)",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path.chmod(0o500)
    try:
        assert main(["zoo", "build", "demo_cnn", "--out", str(tmp_path)]) == 7
    finally:
        tmp_path.chmod(0o700)
    assert "--out folder is not writable" in capsys.readouterr().err


def test_torch_model_through_the_command(tmp_path: Path) -> None:
    """Runs only where PyTorch and torchvision are installed (the `zoo` extra)."""
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    assert tools_main(["zoo", "build", "squeezenet1_1", "--out", str(tmp_path)]) == 0
    onnx.checker.check_model(onnx.load(str(tmp_path / "squeezenet1_1.onnx")))


def test_the_tools_entry_runs_from_the_repository_root() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "tools.zoo", "build", "--list"], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert {line.split()[0] for line in done.stdout.splitlines()} >= TORCH_NAMES | {"digits_cnn"}
