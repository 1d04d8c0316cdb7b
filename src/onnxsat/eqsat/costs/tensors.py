"""Sizes of tensors whose shapes may be partly unknown, for pricing and for building benchmark inputs.

A cost model must never crash on a signature, because the extractor asks about every e-node, including
ones whose shapes inference could not pin down. So every unknown is replaced by a documented default:
an unknown or symbolic dim counts as ``default_dim`` (1 unless the caller says otherwise, e.g. a typical
batch size), and a tensor of unknown rank counts as ``DEFAULT_NUMEL`` elements.
"""

from __future__ import annotations

import math
import numbers

import onnx

from onnxsat.eqsat.costs.signature import TensorInfo

DEFAULT_DIM = 1
"""What an unknown or symbolic dimension counts as unless a ``default_dim`` option says otherwise."""

DEFAULT_NUMEL = 4096
"""Elements assumed for a tensor of unknown rank: a small activation, so unknowns neither vanish nor dominate."""

DEFAULT_ELEM_BYTES = 4.0
"""Bytes per element for an unknown or undefined element type (float32, the common case)."""

STRING_ELEM_BYTES = 32.0
"""Nominal bytes per string element: a std::string header plus a short payload."""


def _elem_bytes_table() -> dict[int, float]:
    # By name, so element types an older onnx lacks are skipped instead of failing at import.
    sizes = {
        "FLOAT": 4,
        "UINT8": 1,
        "INT8": 1,
        "UINT16": 2,
        "INT16": 2,
        "INT32": 4,
        "INT64": 8,
        "STRING": STRING_ELEM_BYTES,
        "BOOL": 1,
        "FLOAT16": 2,
        "DOUBLE": 8,
        "UINT32": 4,
        "UINT64": 8,
        "COMPLEX64": 8,
        "COMPLEX128": 16,
        "BFLOAT16": 2,
        "FLOAT8E4M3FN": 1,
        "FLOAT8E4M3FNUZ": 1,
        "FLOAT8E5M2": 1,
        "FLOAT8E5M2FNUZ": 1,
        "FLOAT8E8M0": 1,
        "UINT4": 0.5,
        "INT4": 0.5,
        "FLOAT4E2M1": 0.5,
        "UINT2": 0.25,
        "INT2": 0.25,
        "FLOAT6E2M3": 0.75,
        "FLOAT6E3M2": 0.75,
    }
    table = {}
    for name, size in sizes.items():
        value = getattr(onnx.TensorProto, name, None)
        if value is not None:
            table[int(value)] = float(size)
    return table


ELEM_BYTES: dict[int, float] = _elem_bytes_table()
"""Bytes per element by ``onnx.TensorProto`` data type; sub-byte types count their packed fraction."""


def elem_bytes(elem_type: int | None) -> float:
    """Bytes per element; ``DEFAULT_ELEM_BYTES`` for unknown or undefined types."""
    if elem_type is None:
        return DEFAULT_ELEM_BYTES
    return ELEM_BYTES.get(elem_type, DEFAULT_ELEM_BYTES)


def resolve_dim(dim: int | str | None, default_dim: int = DEFAULT_DIM) -> int:
    """A static dim as is; a symbolic, unknown or negative (corrupt) one as ``default_dim``."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 0:
        return default_dim
    return int(dim)  # also accepts numpy integers, which a caller may pass for static dims


def resolve_shape(info: TensorInfo | None, default_dim: int = DEFAULT_DIM) -> tuple[int, ...] | None:
    """The shape with every non-static dim replaced by ``default_dim``; None when the rank is unknown."""
    if info is None or info.shape is None:
        return None
    return tuple(resolve_dim(d, default_dim) for d in info.shape)


def numel(info: TensorInfo | None, default_dim: int = DEFAULT_DIM, default_numel: int = DEFAULT_NUMEL) -> int:
    """Element count (0 for an omitted tensor, ``default_numel`` for unknown rank)."""
    if info is None:
        return 0
    shape = resolve_shape(info, default_dim)
    if shape is None:
        return default_numel
    return math.prod(shape)


def nbytes(info: TensorInfo | None, default_dim: int = DEFAULT_DIM, default_numel: int = DEFAULT_NUMEL) -> float:
    """Bytes the tensor occupies (0 for an omitted one)."""
    if info is None:
        return 0.0
    return numel(info, default_dim, default_numel) * elem_bytes(info.elem_type)
