"""The light architecture models shipped inside the onnx package: found, valid, runnable, no torch needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxsat.errors import SettingsError
from onnxsat.zoo import bundled
from onnxsat.zoo.bundled import bundled_model, bundled_models, light_models_dir

requires_light_models = pytest.mark.skipif(
    not light_models_dir().is_dir(), reason="this onnx build ships without backend test data"
)


@requires_light_models
def test_lists_the_classic_architectures() -> None:
    models = bundled_models()
    assert {"resnet50", "squeezenet", "inception_v1", "densenet121"} <= set(models)
    assert list(models) == sorted(models)
    for name, path in models.items():
        assert path.is_file()
        assert path.name == f"light_{name}.onnx"
        assert path.parent == light_models_dir()


@requires_light_models
def test_every_light_model_passes_the_checker() -> None:
    for path in bundled_models().values():
        onnx.checker.check_model(onnx.load(str(path)))


@requires_light_models
def test_squeezenet_runs_in_onnx_runtime() -> None:
    session = ort.InferenceSession(str(bundled_model("squeezenet")), providers=["CPUExecutionProvider"])
    (image,) = session.get_inputs()
    assert image.shape == [1, 3, 224, 224]
    (output,) = session.run(None, {image.name: np.zeros((1, 3, 224, 224), np.float32)})
    assert output.shape == (1, 1000, 1, 1)
    assert np.isfinite(output).all()


@requires_light_models
def test_name_with_or_without_prefix() -> None:
    assert bundled_model("light_resnet50") == bundled_model("resnet50")


def test_unknown_name_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="unknown bundled model"):
        bundled_model("no_such_net")


def test_missing_test_data_gives_an_empty_listing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bundled, "light_models_dir", lambda: tmp_path / "missing")
    assert bundled_models() == {}
    with pytest.raises(SettingsError, match="none in this onnx install"):
        bundled_model("resnet50")
