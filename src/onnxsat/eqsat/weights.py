"""Numpy kernels for the derived constants that rules write as ``Tensor.derived(kernel, args, attrs)``.

Rules only say *what* a folded weight is; the arithmetic lives here, once, and runs at decode time on
the tensors the extractor actually kept. Kernels compute in float64 and store the result in the
weight's dtype, so a folded float32 weight is as close to exact as float32 allows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from onnxsat.external_data import tensor_value

Kernel = Callable[[list[np.ndarray | None], dict[str, onnx.AttributeProto]], np.ndarray]


def _float_attr(attrs: dict[str, onnx.AttributeProto], name: str, default: float) -> float:
    return float(attrs[name].f) if name in attrs else default


def _int_attr(attrs: dict[str, onnx.AttributeProto], name: str, default: int) -> int:
    return int(attrs[name].i) if name in attrs else default


def bn_scale(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """gamma / sqrt(var + epsilon), with BatchNormalization's attributes; kept in float64 (never stored)."""
    gamma, var = args
    epsilon = _float_attr(attrs, "epsilon", 1e-5)
    return gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)


def bn_fold_bias(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """(b - mean) * scale + beta in the conv weight's dtype; a missing conv bias counts as zeros."""
    bias, mean, scale, beta, weight = args
    base = np.zeros(mean.shape, dtype=np.float64) if bias is None else bias.astype(np.float64)
    folded = (base - mean.astype(np.float64)) * scale + beta.astype(np.float64)
    return folded.astype(weight.dtype)


def scale_conv_weight(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """Conv weight (M, C/group, k...) times a per-output-channel scale (M,)."""
    weight, scale = args
    shape = (-1,) + (1,) * (weight.ndim - 1)
    return (weight.astype(np.float64) * scale.astype(np.float64).reshape(shape)).astype(weight.dtype)


def scale_convtranspose_weight(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """ConvTranspose weight (C, M/group, k...) times a per-output-channel scale (M,).

    Output channel ``g * (M/group) + j`` is column ``j`` of the rows of group ``g``.
    """
    weight, scale = args
    group = _int_attr(attrs, "group", 1)
    in_channels, out_per_group = weight.shape[:2]
    spatial = weight.shape[2:]
    grouped = weight.astype(np.float64).reshape(group, in_channels // group, out_per_group, *spatial)
    factors = scale.astype(np.float64).reshape(group, 1, out_per_group, *([1] * len(spatial)))
    return (grouped * factors).reshape(weight.shape).astype(weight.dtype)


KERNELS: dict[str, Kernel] = {
    "bn_scale": bn_scale,
    "bn_fold_bias": bn_fold_bias,
    "scale_conv_weight": scale_conv_weight,
    "scale_convtranspose_weight": scale_convtranspose_weight,
}


def constant_node_value(node: onnx.NodeProto, base_dir: Path | None = None) -> np.ndarray:
    """The tensor a ``Constant`` node produces, whichever of its value attributes it uses."""
    attr = node.attribute[0]
    if attr.name == "value":
        return tensor_value(attr.t, base_dir)
    if attr.name == "value_float":
        return np.array(attr.f, dtype=np.float32)
    if attr.name == "value_floats":
        return np.array(list(attr.floats), dtype=np.float32)
    if attr.name == "sparse_value":
        return sparse_tensor_value(attr.sparse_tensor, base_dir)
    if attr.name == "value_int":
        return np.array(attr.i, dtype=np.int64)
    if attr.name == "value_ints":
        return np.array(list(attr.ints), dtype=np.int64)
    raise ValueError(f"Constant with attribute {attr.name!r} has no numeric value")


def sparse_tensor_value(sparse: onnx.SparseTensorProto, base_dir: Path | None = None) -> np.ndarray:
    """The dense array a sparse initializer stands for (COO: flat or per-dimension indices)."""
    values = tensor_value(sparse.values, base_dir)
    indices = tensor_value(sparse.indices, base_dir)
    dense = np.zeros(int(np.prod(sparse.dims)), dtype=values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), tuple(sparse.dims))
    dense[flat] = values
    return dense.reshape(tuple(sparse.dims))
