"""A lean package: importing ONNXSat loads none of the optional modules, and the developer tools are not in it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

OPTIONAL = ("matplotlib", "sklearn", "PIL", "tqdm", "graphviz", "torch", "yaml")
"""Modules of the extras (and pyyaml, only needed to read a YAML pipeline) that no import may load by itself."""

PACKAGE_MODULES = (
    "onnxsat.data",
    "onnxsat.data.sources",
    "onnxsat.data.metrics",
    "onnxsat.zoo.synthetic",
    "onnxsat.zoo.digits_cnn",
    "onnxsat.zoo.bundled",
    "onnxsat.zoo.large",
    "onnxsat.zoo.catalogue",
    "onnxsat.commands.zoo",
)


def _loaded_after(statement: str) -> dict[str, list[str]]:
    """Run ``statement`` in a fresh interpreter; which of :data:`OPTIONAL` were loaded after ``import onnxsat``
    alone ("package") and after the statement too ("after")."""
    code = (
        "import json, sys\n"
        "import onnxsat\n"
        f"optional = {OPTIONAL!r}\n"
        "package = [m for m in optional if m in sys.modules]\n"
        f"{statement}\n"
        "print(json.dumps({'package': package, 'after': [m for m in optional if m in sys.modules]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_import_onnxsat_loads_no_optional_module() -> None:
    assert _loaded_after("pass")["package"] == []


def test_data_and_zoo_import_no_optional_module() -> None:
    loaded = _loaded_after("\n".join(f"import {module}" for module in PACKAGE_MODULES))
    assert loaded["after"] == loaded["package"], "data/ and zoo/ import their optional modules lazily"


def test_the_developer_tools_are_not_in_the_package() -> None:
    package = Path(importlib.util.find_spec("onnxsat").origin).parent  # type: ignore[arg-type, union-attr]
    assert not (package / "fuzz").exists()
    for module in ("torch_zoo", "digits_network", "digits_layers", "digits_training", "batchnorm"):
        assert not (package / "zoo" / f"{module}.py").exists(), module
    assert (package / "zoo" / "models" / "digits_cnn.onnx").is_file(), "the trained model stays as package data"


def test_a_missing_extra_stops_the_command_before_any_work(
    cnn_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``--html`` without the report extra: one line naming the extra, exit 14, and no model written."""
    from onnxsat.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails, as when it is not installed
    output = tmp_path / "out.onnx"
    assert main(["optimize", str(cnn_file), "-o", str(output), "--html", str(tmp_path / "page.html")]) == 14
    err = capfd.readouterr().err
    assert err == "onnxsat: error: --html pages: matplotlib is not installed; pip install 'onnxsat[report]'\n"
    assert not output.exists()
