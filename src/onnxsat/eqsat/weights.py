"""Numpy kernels for the derived constants that rules write as ``Tensor.derived(kernel, args, attrs)``.

Rules only say *what* a folded weight is; the arithmetic lives in a kernel, once, and runs at decode
time on the tensors the extractor actually kept. Kernels compute in float64 and store the result in the
weight's dtype, so a folded float32 weight is as close to exact as float32 allows. The kernels shared by
several families are here; one family's own may sit next to its rules (``rules/lrn_decomposition.py``).
Each registers itself with :func:`weight_kernel`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from onnxsat.eqsat.registry import register
from onnxsat.external_data import sparse_tensor_value, tensor_value

Kernel = Callable[[list[np.ndarray | None], dict[str, onnx.AttributeProto]], np.ndarray]

KERNELS: dict[str, Kernel] = {}
"""Kernel name (the string a rule writes in ``Tensor.derived``) -> kernel; filled by :func:`weight_kernel`."""
FOLDING_KERNELS: set[str] = set()
"""Kernels whose result is a BatchNormalization (or a per-channel scale) folded into a convolution's weight:
decode labels a node that reads one as ``Conv+BatchNormalization`` in the fusion report."""


def weight_kernel(name: str, *, folds: bool = False) -> Callable[[Kernel], Kernel]:
    """Register the decorated function as the kernel ``name``, wherever it is defined (here, or next to the
    rule that writes it); ``folds`` marks it as one of :data:`FOLDING_KERNELS`."""

    def decorate(kernel: Kernel) -> Kernel:
        register(KERNELS, name, kernel, "weight kernel")
        if folds:
            FOLDING_KERNELS.add(name)
        return kernel

    return decorate


def float_attr(attrs: dict[str, onnx.AttributeProto], name: str, default: float) -> float:
    """A float attribute of the kernel's attribute set, or ``default`` when the node omits it."""
    return float(attrs[name].f) if name in attrs else default


def int_attr(attrs: dict[str, onnx.AttributeProto], name: str, default: int) -> int:
    """An int attribute of the kernel's attribute set, or ``default`` when the node omits it."""
    return int(attrs[name].i) if name in attrs else default


@weight_kernel("bn_scale")
def bn_scale(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """gamma / sqrt(var + epsilon), with BatchNormalization's attributes; kept in float64 (never stored)."""
    gamma, var = args
    epsilon = float_attr(attrs, "epsilon", 1e-5)
    return gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)


@weight_kernel("bn_fold_bias")
def bn_fold_bias(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """(b - mean) * scale + beta in the conv weight's dtype; a missing conv bias counts as zeros."""
    bias, mean, scale, beta, weight = args
    base = np.zeros(mean.shape, dtype=np.float64) if bias is None else bias.astype(np.float64)
    folded = (base - mean.astype(np.float64)) * scale + beta.astype(np.float64)
    return folded.astype(weight.dtype)


@weight_kernel("scale_conv_weight", folds=True)
def scale_conv_weight(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """Conv weight (M, C/group, k...) times a per-output-channel scale (M,)."""
    weight, scale = args
    shape = (-1,) + (1,) * (weight.ndim - 1)
    return (weight.astype(np.float64) * scale.astype(np.float64).reshape(shape)).astype(weight.dtype)


@weight_kernel("scale_convtranspose_weight", folds=True)
def scale_convtranspose_weight(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """ConvTranspose weight (C, M/group, k...) times a per-output-channel scale (M,).

    Output channel ``g * (M/group) + j`` is column ``j`` of the rows of group ``g``.
    """
    weight, scale = args
    group = int_attr(attrs, "group", 1)
    in_channels, out_per_group = weight.shape[:2]
    spatial = weight.shape[2:]
    grouped = weight.astype(np.float64).reshape(group, in_channels // group, out_per_group, *spatial)
    factors = scale.astype(np.float64).reshape(group, 1, out_per_group, *([1] * len(spatial)))
    return (grouped * factors).reshape(weight.shape).astype(weight.dtype)


@weight_kernel("bn_shift")
def bn_shift(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """beta - mean * scale: what BatchNormalization adds after scaling (float64, never stored)."""
    beta, mean, scale = args
    return beta.astype(np.float64) - mean.astype(np.float64) * scale


@weight_kernel("channel_vector")
def channel_vector(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """A per-channel constant ([M,1,1], [1,M,1,1], [1] ...) as a flat float64 vector of the weight's M rows."""
    value, weight = args
    return np.broadcast_to(value.astype(np.float64).reshape(-1), (weight.shape[0],)).copy()


@weight_kernel("scale_vector")
def scale_vector(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """A bias times a per-channel scale, in the bias's dtype."""
    bias, scale = args
    return (bias.astype(np.float64) * scale.astype(np.float64)).astype(bias.dtype)


@weight_kernel("add_channel_bias")
def add_channel_bias(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """A convolution's bias (zeros when it has none) plus a per-channel constant, in the weight's dtype."""
    bias, shift, weight = args
    base = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
    return (base + shift.astype(np.float64).reshape(-1)).astype(weight.dtype)


@weight_kernel("subtract_channel_bias")
def subtract_channel_bias(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """A convolution's bias (zeros when it has none) minus a per-channel constant, in the weight's dtype."""
    bias, shift, weight = args
    base = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
    return (base - shift.astype(np.float64).reshape(-1)).astype(weight.dtype)


@weight_kernel("scale_conv_input_channels")
def scale_conv_input_channels(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """Conv weight (M, C, k...) times a per-input-channel scale (C,): a BatchNormalization moved past it."""
    weight, scale = args
    shape = (1, -1) + (1,) * (weight.ndim - 2)
    return (weight.astype(np.float64) * scale.reshape(shape)).astype(weight.dtype)


@weight_kernel("conv_input_shift_bias")
def conv_input_shift_bias(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """Bias that adds a per-input-channel shift (C,) seen through an unpadded Conv: b + sum W * shift."""
    bias, weight, shift = args
    base = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
    shape = (1, -1) + (1,) * (weight.ndim - 2)
    through = (weight.astype(np.float64) * shift.reshape(shape)).sum(axis=tuple(range(1, weight.ndim)))
    return (base + through).astype(weight.dtype)


@weight_kernel("scale_columns")
def scale_columns(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """A [K, N] weight times a constant broadcast over its columns (a scalar, [N] or [1, N])."""
    weight, scale = args
    return (weight.astype(np.float64) * scale.astype(np.float64).reshape(-1)).astype(weight.dtype)


@weight_kernel("add_values")
def add_values(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """c1 + c2 with broadcasting, in c1's dtype (an absent c1 counts as zero)."""
    first, second = args
    if first is None:
        return np.asarray(second).copy()
    return (first.astype(np.float64) + second.astype(np.float64)).astype(first.dtype)


@weight_kernel("multiply_values")
def multiply_values(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """c1 * c2 with broadcasting, in c1's dtype."""
    first, second = args
    return (first.astype(np.float64) * second.astype(np.float64)).astype(first.dtype)


@weight_kernel("concat_last")
def concat_last(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """Weights (or biases) of parallel MatMuls side by side: one product computes them all."""
    return np.concatenate([np.asarray(a) for a in args], axis=-1)


@weight_kernel("concat_first")
def concat_first(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    """Filters (or biases) of parallel convolutions stacked: one convolution computes them all."""
    return np.concatenate([np.asarray(a) for a in args], axis=0)


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
