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


def test_a_command_imports_its_own_pass_only(tmp_path: Path) -> None:
    """A run of one command (here refusing a file that is not a model) imports that command's module, not the
    other passes': starting the CLI does not pay for compress, quantize and pruning to run optimize."""
    missing = tmp_path / "missing.onnx"
    code = (
        "import json, sys\n"
        "from onnxsat.cli import main\n"
        f"code = main(['optimize', {str(missing)!r}, '-o', {str(tmp_path / 'out.onnx')!r}])\n"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith('onnxsat.'))]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    exit_code, loaded = json.loads(done.stdout.splitlines()[-1])
    assert exit_code != 0 and done.stderr.startswith("onnxsat: error:")
    assert "onnxsat.commands.optimize" in loaded
    others = ("onnxsat.api", "onnxsat.commands.quantize", "onnxsat.compression", "onnxsat.quantization.quantize")
    assert not [module for module in loaded if module.startswith(others)]


@pytest.mark.parametrize(
    ("argv", "commands"),
    [
        (["show-egraph", "m.onnx", "-o", "g.png"], {"show", "show-egraph"}),
        (["--debug", "prune", "m.onnx"], {"prune"}),
        (["--help"], None),
        (["optimzie", "m.onnx"], None),
        (["show-graph", "m.onnx"], None),
    ],
)
def test_the_parser_holds_the_named_command_or_all(argv: list[str], commands: set[str] | None) -> None:
    """The command the arguments name, found past the global flags (``show-egraph`` lives in ``show``'s
    module); every command when they name none, so ``--help`` and a typo's message list them all."""
    import argparse

    from onnxsat.cli import build_parser

    def choices(parser: argparse.ArgumentParser) -> set[str]:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return set(action.choices)

    every = choices(build_parser())
    assert {"optimize", "quantize", "compress", "show", "show-egraph"} <= every
    assert choices(build_parser(argv)) == (commands or every)
