"""The bundled digits CNN: a small CNN really trained on scikit-learn's digits, shipped as a file.

Random-weight models say nothing about accuracy: any pruning "keeps" their meaningless predictions.
This one is trained and its held-out test split is fixed (:data:`~onnxsat.data.sources.DIGITS_SPLIT`),
so ``onnxsat sparsify`` and ``onnxsat prune`` can be shown to lose, or not lose, real accuracy. Only the
file and its split live in the package; the numpy training that wrote it is a developer tool in the
repository (``python -m tools.zoo.digits_cnn``, seeded: a retrain writes the same model).
"""

from __future__ import annotations

from pathlib import Path

from onnxsat.data.sources import DIGITS_SPLIT, DIGITS_TEST, DIGITS_TRAIN, Dataset, load_dataset

INPUT_SHAPE: tuple[str | int, ...] = ("batch", 1, 8, 8)
"""The bundled model's input: a dynamic batch of 8x8 grayscale digits (pixel values / 16)."""

__all__ = ["DIGITS_SPLIT", "INPUT_SHAPE", "bundled_digits_cnn", "test_split", "train_split"]


def bundled_digits_cnn() -> Path:
    """The committed trained model (see :data:`~onnxsat.data.sources.DIGITS_SPLIT` for its test split)."""
    return Path(__file__).parent / "models" / "digits_cnn.onnx"


def test_split() -> Dataset:
    """The held-out digits as a Dataset [397, 1, 8, 8] with labels: data the model never trained on
    (needs the ``data`` extra: scikit-learn)."""
    return load_dataset(DIGITS_TEST, [None, *INPUT_SHAPE[1:]])


test_split.__test__ = False  # a test module importing it must not have pytest collect it as a test


def train_split() -> Dataset:
    """The 1,400 digits the model trained on, as a Dataset [1400, 1, 8, 8] with labels."""
    return load_dataset(DIGITS_TRAIN, [None, *INPUT_SHAPE[1:]])
