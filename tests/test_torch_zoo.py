"""The PyTorch zoo: optional. Without torch the API says how to install it; with torch, exports run in ORT.

Only the cheapest models are exported here (a second or two each); the full zoo is built by hand with
``python -m tools.zoo.torch_zoo OUT_DIR`` (or ``python -m tools.zoo build``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxsat.errors import SettingsError
from tools.zoo import torch_zoo
from tools.zoo.torch_zoo import TORCH_MODELS, build_torch_model, build_zoo, model_file_name


def test_catalogue_lists_the_architectures_without_importing_torch() -> None:
    assert {"resnet18", "resnet50", "mobilenet_v2", "googlenet", "vit_tiny", "bert_tiny"} <= set(TORCH_MODELS)
    assert {spec.kind for spec in TORCH_MODELS.values()} == {"cnn", "transformer"}
    assert model_file_name("resnet18") == "resnet18.onnx"
    assert model_file_name("resnet18", optimize=False) == "resnet18.noopt.onnx"


def test_without_torch_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setattr(torch_zoo, "_torchvision_stub_library", None)
    with pytest.raises(SettingsError, match="pip install torch"):
        build_torch_model("squeezenet1_1", tmp_path)
    with pytest.raises(SettingsError, match="pip install torch"):
        build_zoo(["bert_tiny"], tmp_path)
    assert not torch_zoo.torch_available()
    assert list(tmp_path.iterdir()) == []


def test_unknown_model_or_variant_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="unknown zoo model"):
        build_torch_model("alexnet_xl", tmp_path)
    with pytest.raises(SettingsError, match="unknown zoo variant"):
        build_zoo(["squeezenet1_1"], tmp_path, variants=["fast"])


@pytest.mark.parametrize("name", ["squeezenet1_1", "bert_tiny"])
def test_export_runs_in_onnx_runtime_and_matches_torch(name: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    if name == "squeezenet1_1":
        pytest.importorskip("torchvision")  # torch alone (installed to train a model) does not build it
    path = build_torch_model(name, tmp_path)
    assert path == tmp_path / f"{name}.onnx"
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert model.ir_version <= torch_zoo.MAX_IR_VERSION

    inputs = torch_zoo.example_inputs(name)
    with torch.no_grad():
        expected = torch_zoo.build_torch_module(name)(*inputs.values())
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(inputs)
    outputs = session.run(None, {key: value.numpy() for key, value in inputs.items()})
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_weights_are_perturbed_away_from_identity_folds() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    module = torch_zoo.build_torch_module("mobilenet_v2")
    assert not module.training
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.is_floating_point():
            assert bool((tensor != 0).all()), name
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms
    for norm in norms:
        assert bool((norm.running_var > 0).all())
        assert not bool((norm.running_var == 1).all())
        assert not bool((norm.weight == 1).all())
