"""Every model ``onnxsat zoo build`` can write, by name, whatever builds it.

Four sources, one namespace:

- ``onnx.helper`` graphs built here (no dependency): the seed's SimpleClassifier, the demo CNN, and
  the scale benchmark's Conv-BN-Relu chain and DenseNet-like DAG at modest sizes;
- the trained digits CNN, a file shipped with ONNXSat;
- the architecture models bundled with the ``onnx`` package, named ``light_<name>`` (absent from
  onnx builds without their test data);
- PyTorch exports (:mod:`onnxsat.zoo.torch_zoo`), which need the optional ``zoo`` extra.

Every model is written as ``OUT/<name>.onnx``; seeded models take the seed given to the command.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxsat.zoo import bundled, synthetic, torch_zoo
from onnxsat.zoo.digits_cnn import bundled_digits_cnn

TORCH_SOURCE = "PyTorch"
PLAIN_TORCH = frozenset({"bert_tiny", "gpt2_tiny"})
"""The PyTorch models written in plain PyTorch; the others are torchvision's."""


@dataclass(frozen=True)
class ZooModel:
    """One buildable model: where it comes from, what it is, and how to write it into a folder."""

    name: str
    source: str
    description: str
    write: Callable[[Path, int], Path]
    """``(out_dir, seed) -> path written``."""

    @property
    def needs_torch(self) -> bool:
        return self.source == TORCH_SOURCE

    def missing_packages(self) -> list[str]:
        """The packages this model needs that are not installed (looked up, not imported: that takes seconds)."""
        if not self.needs_torch:
            return []
        needed = ["torch"] if self.name in PLAIN_TORCH else ["torch", "torchvision"]
        return [package for package in needed if importlib.util.find_spec(package) is None]


def _helper_model(name: str, description: str, build: Callable[[int], onnx.ModelProto]) -> ZooModel:
    def write(out_dir: Path, seed: int) -> Path:
        from onnxsat.model_io import save_model

        path = out_dir / f"{name}.onnx"
        save_model(build(seed), path)
        return path

    return ZooModel(name, "onnx.helper", description, write)


def _copied(name: str, source: str, description: str, original: Path) -> ZooModel:
    """A model shipped as a file: copied as it is (the seed does not apply)."""

    def write(out_dir: Path, seed: int) -> Path:
        from onnxsat.model_io import write_bytes_atomic

        path = out_dir / f"{name}.onnx"
        write_bytes_atomic(original.read_bytes(), path)
        return path

    return ZooModel(name, source, description, write)


def _torch_model(name: str, description: str) -> ZooModel:
    def write(out_dir: Path, seed: int) -> Path:
        return torch_zoo.build_torch_model(name, out_dir, seed=seed)

    return ZooModel(name, TORCH_SOURCE, description, write)


def zoo_models() -> dict[str, ZooModel]:
    """Every model by name, in the order ``--list`` shows them."""
    models = [
        _helper_model(
            "simple_classifier",
            "the seed's SimpleClassifier: 2 Conv + 3 Gemm, CIFAR-sized 3x32x32 input, 62,006 parameters",
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
    models.extend(_torch_model(name, spec.description) for name, spec in torch_zoo.TORCH_MODELS.items())
    return {model.name: model for model in models}
