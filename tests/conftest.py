"""Shared fixtures: the demo CNN saved to a file (static and symbolic batch), and a stand-in failure of a
lossy result's run."""

from __future__ import annotations

import sys
from collections.abc import Callable
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


@pytest.fixture
def failing_result_run(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``fail(message)``: from then on, running a lossy pass's result in ONNX Runtime raises ``message``;
    the input model still runs (it runs first, to be blamed if it cannot)."""
    from onnxsat.errors import RuntimeUnsupportedError

    verification = sys.modules["onnxsat.verification"]
    run_model = verification.run_model

    def fail(message: str) -> None:
        def refuse(model: object, feeds: object, what: str, *args: object, **kwargs: object) -> object:
            if what == "result":
                raise RuntimeUnsupportedError(message)
            return run_model(model, feeds, what, *args, **kwargs)

        monkeypatch.setattr(verification, "run_model", refuse)

    return fail
