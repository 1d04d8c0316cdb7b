"""The numpy layer arithmetic the digits CNN is trained with: affine maps, 3x3 convolution by im2col, 2x2 max pooling.

Each forward function has its adjoint beside it, so the network module (:mod:`tools.zoo.digits_network`) only
wires layers together. Convolution is an affine map on im2col rows, so one affine forward and one affine backward
serve both Conv and Gemm, with or without a bias (the BatchNormalization variant drops the bias its shift replaces).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def affine(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x @ weight.T (+ bias)`` for rows ``x`` [N, fan_in] and a weight [units, ...] flattened to [units, fan_in]."""
    out = x @ weight.reshape(len(weight), -1).T
    return out if bias is None else out + bias


def affine_backward(
    d_out: np.ndarray, x: np.ndarray, weight: np.ndarray, with_bias: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Gradients of :func:`affine` for its weight (in the weight's own shape), bias (None without one) and rows."""
    d_weight = (d_out.T @ x).reshape(weight.shape)
    d_bias = d_out.sum(axis=0) if with_bias else None
    return d_weight, d_bias, d_out @ weight.reshape(len(weight), -1)


def im2col(x: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> [N*H*W, C*9]: every 3x3 pad-1 window as a row, in Conv weight order (c, kh, kw)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.stack([padded[:, :, i : i + h, j : j + w] for i in range(3) for j in range(3)], axis=2)
    return windows.transpose(0, 3, 4, 1, 2).reshape(n * h * w, c * 9)


def col2im(d_cols: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The adjoint of :func:`im2col`: window gradients summed back onto the pixels they came from."""
    n, c, h, w = shape
    windows = d_cols.reshape(n, h, w, c, 9).transpose(0, 3, 4, 1, 2)
    padded = np.zeros((n, c, h + 2, w + 2), d_cols.dtype)
    for k in range(9):
        i, j = divmod(k, 3)
        padded[:, :, i : i + h, j : j + w] += windows[:, :, k]
    return padded[:, :, 1:-1, 1:-1]


def conv(cols: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, in_shape: Sequence[int]) -> np.ndarray:
    """3x3 pad-1 convolution from im2col rows: [N*H*W, C*9] @ [C*9, K] -> [N, K, H, W]."""
    n, _, h, w = in_shape
    return affine(cols, weight, bias).reshape(n, h, w, len(weight)).transpose(0, 3, 1, 2)


def conv_rows(d_out: np.ndarray) -> np.ndarray:
    """A convolution's output gradient [N, K, H, W] as the rows [N*H*W, K] of the affine map it came from."""
    return d_out.transpose(0, 2, 3, 1).reshape(-1, d_out.shape[1])


def maxpool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 stride-2 max pooling, and which of the 4 window positions won (first on ties, like ORT)."""
    n, c, h, w = x.shape
    windows = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    choice = windows.argmax(axis=-1)
    return np.take_along_axis(windows, choice[..., None], axis=-1)[..., 0], choice


def maxpool_backward(d_out: np.ndarray, choice: np.ndarray) -> np.ndarray:
    """Route each pooled gradient to the window position that won."""
    n, c, h, w = d_out.shape
    d_windows = np.zeros((n, c, h, w, 4), d_out.dtype)
    np.put_along_axis(d_windows, choice[..., None], d_out[..., None], axis=-1)
    return d_windows.reshape(n, c, h, w, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, 2 * h, 2 * w)
