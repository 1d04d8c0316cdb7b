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


@pytest.fixture(autouse=True)
def int8_kernels_without_clipping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ORT's int8 kernels clip full-range products (x86 without VNNI), quantize also builds and scores each
    integer mode with 7-bit weights: one more evaluation and a note. So that every test sees one behaviour on any
    CPU, quantize is told here that nothing clips; the tests of that weighing say otherwise themselves. (The probe
    itself, ``runtime.int8_sums``, is not replaced: tests of the kernels read the truth.)"""
    from onnxsat.quantization import quantize

    monkeypatch.setattr(quantize, "int8_pairs_saturate", lambda: False)
