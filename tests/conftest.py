"""Shared fixtures: the demo CNN saved to a file (static and symbolic batch)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxsat.zoo.synthetic import demo_cnn


@pytest.fixture
def cnn_file(tmp_path: Path) -> Path:
    """demo_cnn() (static batch 1) saved as ``tmp_path/model.onnx``."""
    path = tmp_path / "model.onnx"
    onnx.save(demo_cnn(), str(path))
    return path


@pytest.fixture
def cnn_dynamic_file(tmp_path: Path) -> Path:
    """demo_cnn(batch="N") (symbolic batch dimension) saved as ``tmp_path/dynamic.onnx``."""
    path = tmp_path / "dynamic.onnx"
    onnx.save(demo_cnn(batch="N"), str(path))
    return path
