"""BatchNormalization in numpy, as PyTorch trains it and ONNX runs it, for the digits CNN's ``sgd-bn`` recipe.

Pruning papers prune BN models: the BN scale is a per-channel gain that tree-level importance reads, and batch
statistics keep ReLU units alive that plain SGD with weight decay kills. Training normalizes each channel (axis 1)
with the batch's own mean and variance; inference, and the exported opset-17 BatchNormalization node, use running
averages of them. The running variance averages the unbiased batch variance, as PyTorch does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPSILON = 1e-5
"""Added to the variance before the square root (PyTorch's and ONNX's default)."""
MOMENTUM = 0.1
"""running = (1 - MOMENTUM) * running + MOMENTUM * batch: PyTorch's convention; ONNX's attribute is 1 - this."""


@dataclass(frozen=True)
class BatchNormCache:
    """What the backward pass needs from a training-mode forward pass."""

    normalized: np.ndarray
    inverse_std: np.ndarray
    gamma: np.ndarray


def batch_norm_train(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray
) -> tuple[np.ndarray, BatchNormCache, tuple[np.ndarray, np.ndarray]]:
    """Normalize with the batch's statistics: the output, the cache for the backward pass, and (mean, unbiased
    variance) per channel for the running averages."""
    axes = _reduce_axes(x)
    mean = x.mean(axis=axes, keepdims=True)
    variance = x.var(axis=axes, keepdims=True)
    inverse_std = 1.0 / np.sqrt(variance + EPSILON)
    normalized = (x - mean) * inverse_std
    count = x.size // x.shape[1]
    batch_statistics = (mean.reshape(-1), variance.reshape(-1) * count / max(count - 1, 1))
    return _scale_shift(normalized, gamma, beta), BatchNormCache(normalized, inverse_std, gamma), batch_statistics


def batch_norm_infer(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, variance: np.ndarray
) -> np.ndarray:
    """Normalize with the running statistics: what ONNX's BatchNormalization computes."""
    inverse_std = 1.0 / np.sqrt(_per_channel(variance, x.ndim) + EPSILON)
    return _scale_shift((x - _per_channel(mean, x.ndim)) * inverse_std, gamma, beta)


def batch_norm_backward(d_out: np.ndarray, cache: BatchNormCache) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`batch_norm_train` for its input, gamma and beta (the batch statistics depend on the input,
    hence the two mean terms)."""
    axes = _reduce_axes(d_out)
    count = d_out.size // d_out.shape[1]
    d_normalized = d_out * _per_channel(cache.gamma, d_out.ndim)
    d_x = (
        cache.inverse_std
        / count
        * (
            count * d_normalized
            - d_normalized.sum(axis=axes, keepdims=True)
            - cache.normalized * (d_normalized * cache.normalized).sum(axis=axes, keepdims=True)
        )
    )
    return d_x, (d_out * cache.normalized).sum(axis=axes), d_out.sum(axis=axes)


def running_average(running: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """One step of the running mean or variance, kept in float32 like the exported initializers."""
    return ((1 - MOMENTUM) * running + MOMENTUM * batch).astype(np.float32)


def _scale_shift(normalized: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    return _per_channel(gamma, normalized.ndim) * normalized + _per_channel(beta, normalized.ndim)


def _per_channel(values: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast over [N, C] or [N, C, H, W]."""
    return values.reshape(1, -1, *([1] * (ndim - 2)))


def _reduce_axes(x: np.ndarray) -> tuple[int, ...]:
    """Every axis but the channel axis 1."""
    return (0, *range(2, x.ndim))
