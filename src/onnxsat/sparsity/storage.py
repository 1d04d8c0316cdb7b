"""Pruned weights written back into a model: dense, or as ONNX sparse initializers (COO).

COO as ONNX defines it keeps the **non-zero** values and their flat (linearized) indices, int64, plus
the dense dims, built with vectorised numpy (a per-element Python loop takes minutes on large weights).

A COO tensor costs 8 bytes of index per non-zero on top of the value, so a float32 weight only gets
smaller above 2/3 sparsity (float16: 4/5). Weights where COO would be larger stay dense, and the
report says why. ONNX Runtime densifies sparse initializers when it loads the model: the file shrinks,
inference does not get faster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.external_data import tensor_value

INDEX_BYTES = 8


def with_masks(model: onnx.ModelProto, masks: Mapping[str, np.ndarray], base_dir: Path | None) -> onnx.ModelProto:
    """A copy of ``model`` with the masked elements of each named initializer set to zero (dtype kept)."""
    masked = onnx.ModelProto()
    masked.CopyFrom(model)
    for index, tensor in enumerate(masked.graph.initializer):
        mask = masks.get(tensor.name)
        if mask is None:
            continue
        value = np.array(tensor_value(tensor, base_dir))
        value[mask] = 0
        masked.graph.initializer[index].CopyFrom(numpy_helper.from_array(value, tensor.name))
    return masked


@dataclass
class SparseStorage:
    """What moving initializers to ``graph.sparse_initializer`` did."""

    moved: list[str] = field(default_factory=list)
    kept_dense: dict[str, str] = field(default_factory=dict)
    """Initializer name -> why it stayed dense (below the level, or COO would be larger)."""


def coo_bytes(value: np.ndarray) -> int:
    nonzero = int(np.count_nonzero(value))
    return nonzero * (value.dtype.itemsize + INDEX_BYTES)


def to_sparse_initializers(model: onnx.ModelProto, names: list[str], min_sparsity: float) -> SparseStorage:
    """Move the named initializers at or above ``min_sparsity`` into sparse COO form, in place, when that
    makes them smaller."""
    storage = SparseStorage()
    wanted = set(names)
    keep: list[onnx.TensorProto] = []
    for tensor in model.graph.initializer:
        if tensor.name not in wanted:
            keep.append(tensor)
            continue
        value = numpy_helper.to_array(tensor)
        sparsity = 1.0 - np.count_nonzero(value) / value.size if value.size else 0.0
        if sparsity < min_sparsity:
            storage.kept_dense[tensor.name] = f"sparsity {sparsity:.1%} below {min_sparsity:.0%}"
            keep.append(tensor)
            continue
        if coo_bytes(value) >= value.nbytes:
            storage.kept_dense[tensor.name] = (
                f"COO would be larger ({coo_bytes(value):,} vs {value.nbytes:,} bytes at {sparsity:.1%} sparsity)"
            )
            keep.append(tensor)
            continue
        flat = value.reshape(-1)
        indices = np.flatnonzero(flat).astype(np.int64)
        values = numpy_helper.from_array(flat[indices], tensor.name)
        sparse = onnx.helper.make_sparse_tensor(values, numpy_helper.from_array(indices), list(value.shape))
        model.graph.sparse_initializer.append(sparse)
        storage.moved.append(tensor.name)
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return storage
