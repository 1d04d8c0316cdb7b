"""What ONNX Runtime returns for an output, as one array: tensors as they are, and the sequences
scikit-learn exports end in (ZipMap's sequence of ``{class: probability}`` maps, sequences of tensors).

Scoring reads these per sample and verification compares them within its tolerance: both need the
numbers, not Python lists of dicts (compared as objects, a last-bit difference looks like any other).
"""

from __future__ import annotations

import numpy as np

from onnxsat.errors import DataError


def map_keys(value: object) -> list[object] | None:
    """The keys of a sequence of maps (the first map's, in order), or None when ``value`` is not one."""
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return list(value[0])
    return None


def as_array(value: object, name: str) -> np.ndarray:
    """An output as one array: tensors as they are; a sequence of maps as ``[N, classes]`` in the maps'
    key order (every map with the same keys); a sequence of same-shaped tensors stacked."""
    if isinstance(value, np.ndarray):
        return value
    keys = map_keys(value)
    if keys is not None and all(list(item) == keys for item in value):  # type: ignore[union-attr]
        return np.array([[item[key] for key in keys] for item in value])  # type: ignore[index, union-attr]
    arrays = isinstance(value, list) and value and all(isinstance(item, np.ndarray) for item in value)
    if arrays and len({item.shape for item in value}) == 1:  # type: ignore[union-attr]
        return np.stack(value)  # type: ignore[arg-type]
    if isinstance(value, list) and not value:
        return np.zeros((0,), np.float32)
    raise DataError(f"output {name!r} is a {type(value).__name__} ONNXSat cannot read as samples")
