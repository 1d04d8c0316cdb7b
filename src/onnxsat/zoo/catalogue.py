"""Every model ``onnxsat zoo build`` can write, by name, whatever builds it.

Three sources, one namespace, none needing more than the core dependencies:

- ``onnx.helper`` graphs built here: SimpleClassifier (PyTorch's 60-Minute Blitz CIFAR-10 CNN), the
  demo CNN, and the scale benchmark's Conv-BN-Relu chain and DenseNet-like DAG at modest sizes;
- the trained digits CNN, a file shipped with ONNXSat;
- the architecture models bundled with the ``onnx`` package, named ``light_<name>`` (absent from
  onnx builds without their test data).

PyTorch exports are built by a developer tool of the repository, ``python -m tools.zoo build``, which
adds them to this catalogue (:class:`ZooModel` ``needs`` names the packages such a model imports).
Every model is written as ``OUT/<name>.onnx``; models with random weights draw them from the command's ``--seed``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxsat.model_io import save_model, write_bytes_atomic
from onnxsat.zoo import bundled, synthetic
from onnxsat.zoo.digits_cnn import bundled_digits_cnn


@dataclass(frozen=True)
class ZooModel:
    """One buildable model: where it comes from, what it is, and how to write it into a folder."""

    name: str
    source: str
    description: str
    write: Callable[[Path, int], Path]
    """``(out_dir, seed) -> path written``."""
    needs: tuple[str, ...] = ()
    """Optional packages building it imports (none for the models of this catalogue)."""

    def missing_packages(self) -> list[str]:
        """The packages this model needs that are not installed (looked up, not imported: that takes seconds)."""
        return [package for package in self.needs if importlib.util.find_spec(package) is None]


def _helper_model(name: str, description: str, build: Callable[[int], onnx.ModelProto]) -> ZooModel:
    def write(out_dir: Path, seed: int) -> Path:

        path = out_dir / f"{name}.onnx"
        save_model(build(seed), path)
        return path

    return ZooModel(name, "onnx.helper", description, write)


def _copied(name: str, source: str, description: str, original: Path) -> ZooModel:
    """A model shipped as a file: copied as it is (``--seed`` does not apply)."""

    def write(out_dir: Path, seed: int) -> Path:

        path = out_dir / f"{name}.onnx"
        write_bytes_atomic(original.read_bytes(), path)
        return path

    return ZooModel(name, source, description, write)


def zoo_models() -> dict[str, ZooModel]:
    """Every model by name, in the order ``--list`` shows them."""
    models = [
        _helper_model(
            "simple_classifier",
            "PyTorch's 60-Minute Blitz CIFAR-10 CNN: 2 Conv + 3 Gemm, 3x32x32 input, 62,006 parameters",
            lambda seed: synthetic.simple_classifier(seed),
        ),
        _helper_model(
            "demo_cnn", "Conv+BN+Relu/Clip, depthwise Conv, Gemm head; 3x64x64", lambda seed: synthetic.demo_cnn(seed)
        ),
        _helper_model(
            "conv_bn_relu_chain",
            "32 Conv-BN-Relu blocks in a row (the scale benchmark's chain)",
            lambda seed: synthetic.conv_bn_relu_chain(32, seed=seed),
        ),
        _helper_model(
            "densenet_like",
            "16-layer DenseNet-style DAG, every layer reads every earlier output",
            lambda seed: synthetic.densenet_like(16, seed=seed),
        ),
        _copied("digits_cnn", "trained, bundled", "small CNN trained on scikit-learn's digits", bundled_digits_cnn()),
    ]
    models.extend(
        _copied(f"{bundled.LIGHT_PREFIX}{name}", "onnx package", f"onnx's light {name} (constant weights)", path)
        for name, path in bundled.bundled_models().items()
    )
    return {model.name: model for model in models}
