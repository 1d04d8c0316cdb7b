"""Models for the picture tests, and Graphviz required (skipped without it, failed on CI)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import onnx
import pytest

from onnxsat.cli import main
from onnxsat.zoo.synthetic import conv_bn_relu_chain, demo_cnn


@pytest.fixture(autouse=True)
def graphviz_dot() -> None:
    if shutil.which("dot") is None:
        reason = "Graphviz's dot is not installed (Debian: apt-get install graphviz; .ci/run installs it)"
        if os.environ.get("ONNXSAT_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def small_file(tmp_path: Path) -> Path:
    """Conv -> BatchNormalization -> Relu: three nodes, the e-graph of Figure 1's size."""
    path = tmp_path / "small.onnx"
    onnx.save(conv_bn_relu_chain(1), str(path))
    return path


@pytest.fixture
def optimized_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The demo CNN, its `onnxsat optimize` result (ort target: FusedConv) and the JSON report."""
    original, result, report = tmp_path / "cnn.onnx", tmp_path / "cnn_opt.onnx", tmp_path / "report.json"
    onnx.save(demo_cnn(), str(original))
    assert main(["optimize", str(original), "-o", str(result), "--report", str(report)]) == 0
    return original, result, report
