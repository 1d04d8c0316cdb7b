"""Architecture models shipped inside the ``onnx`` package: real graphs with no download and no PyTorch.

``onnx/backend/test/data/light/`` holds "light" versions of the classic ONNX model-zoo networks
(ResNet-50, Inception v1/v2, DenseNet-121, ShuffleNet, SqueezeNet, VGG-19, AlexNet, ZFNet-512), as
converted from Caffe2. They keep the full architecture but every weight is a ``ConstantOfShape`` of a
single value fed by a shape initializer, so each file is a few KiB. They are old-style models: IR
version 3, opset 9, initializers also listed as graph inputs (ONNX Runtime treats those as
overridable and will not constant-fold them), residual adds written as ``Sum``, unfolded
BatchNormalization. That makes them a good test of graphs unlike what today's exporters write.
Their outputs are degenerate (every weight tensor is constant, so the classifiers' softmax is uniform):
they test that a graph is handled and runs, not that numerics survive.
"""

from __future__ import annotations

from pathlib import Path

from onnxsat.errors import SettingsError

LIGHT_PREFIX = "light_"


def light_models_dir() -> Path:
    """The folder of the light models inside the installed ``onnx`` package (it may be missing)."""
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def bundled_models() -> dict[str, Path]:
    """The light models present in this ``onnx`` install: name (e.g. ``"resnet50"``) -> path, sorted by name.

    Empty if the ``onnx`` build ships without its test data.
    """
    folder = light_models_dir()
    if not folder.is_dir():
        return {}
    return {path.stem.removeprefix(LIGHT_PREFIX): path for path in sorted(folder.glob(f"{LIGHT_PREFIX}*.onnx"))}


def bundled_model(name: str) -> Path:
    """Path of one light model by name (``"resnet50"`` or ``"light_resnet50"``)."""

    models = bundled_models()
    key = name.removeprefix(LIGHT_PREFIX)
    if key not in models:
        available = ", ".join(models) or "none in this onnx install"
        raise SettingsError(f"unknown bundled model {name!r}: choose from {available}")
    return models[key]
