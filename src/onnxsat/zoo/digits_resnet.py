"""The bundled digits ResNet: a ResNet-8 (16/32/64 channels, BatchNorm, residual Adds) really trained on
scikit-learn's digits at 32x32, shipped as a file, for ``onnxsat demo``'s compression.

The bundled digits CNN (:mod:`onnxsat.zoo.digits_cnn`) runs in a few microseconds, where no technique
can be timed apart from session overhead; this one is shaped like the convolution nets users compress
and small enough to ship (0.3 MB). It trained on ``digits-train`` only and reaches 99.24% top-1 on
``digits-test``. The PyTorch training that wrote it is a developer tool in the repository
(``python -m tools.zoo.digits_resnet``, seeded).
"""

from __future__ import annotations

from pathlib import Path

INPUT_SHAPE: tuple[str | int, ...] = ("batch", 1, 32, 32)
"""A dynamic batch of 32x32 grayscale digits scaled to [0, 1] (what ``--data digits-*`` feeds it)."""


def bundled_digits_resnet() -> Path:
    """The committed trained model."""
    return Path(__file__).parent / "models" / "digits_resnet.onnx"
