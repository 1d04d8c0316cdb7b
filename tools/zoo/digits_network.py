"""The digits CNN's architecture in numpy: initial parameters, forward and backward passes, dead ReLU units.

Input [N, 1, 8, 8] (pixel values / 16, as :func:`onnxsat.data.load_dataset` gives them) -> Conv 3x3 pad 1 (1->16)
-> Relu -> Conv 3x3 pad 1 (16->32) -> Relu -> MaxPool 2x2 -> Flatten -> Gemm (512->64) -> Relu -> Gemm (64->10)
-> logits. The BatchNormalization variant puts a BN between each hidden layer and its Relu and drops that layer's
bias (the BN shift replaces it). One forward and one backward pass serve both variants, the BN step taken only where
the parameters hold it, so the two cannot drift apart.

Parameters are named as the ONNX initializers: ``conv1_w``, ``conv1_b``, ..., ``fc2_b``, and for the BN after
hidden layer L (:data:`BATCHNORM_OF`): ``bnK_scale`` and ``bnK_B`` (trained), ``bnK_mean`` and ``bnK_var``
(running statistics, which only the training loop updates).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tools.zoo.batchnorm import (
    BatchNormCache,
    batch_norm_backward,
    batch_norm_infer,
    batch_norm_train,
    running_average,
)
from tools.zoo.digits_layers import (
    affine,
    affine_backward,
    col2im,
    conv,
    conv_rows,
    im2col,
    maxpool,
    maxpool_backward,
)

INPUT_SHAPE = ("batch", 1, 8, 8)
CLASSES = 10
HIDDEN_UNITS = {"conv1": 16, "conv2": 32, "fc1": 64}
"""Each hidden layer (the ones followed by a Relu) and its channel count."""
BATCHNORM_OF = {"conv1": "bn1", "conv2": "bn2", "fc1": "bn3"}
"""The BatchNormalization after each hidden layer, in the BN variant."""
_POOLED_SHAPE = (32, 4, 4)


@dataclass
class Activations:
    """What the backward pass needs from the forward pass; ``relus`` also tells which units are dead."""

    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    """The rows each affine layer multiplied: im2col rows for a Conv, its input for a Gemm."""
    relus: dict[str, np.ndarray] = field(default_factory=dict)
    """Each hidden layer's Relu output."""
    pool_choice: np.ndarray = field(default_factory=lambda: np.zeros(0, np.intp))
    """Which position of each 2x2 window the max pooling took."""
    batchnorm: dict[str, BatchNormCache] = field(default_factory=dict)
    """Training mode only: each BN's cache for its backward pass."""
    batch_statistics: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Training mode only: each BN's (mean, unbiased variance) over the batch."""


def initial_params(rng: np.random.Generator, batchnorm: bool = False) -> dict[str, np.ndarray]:
    """He-initialized weights (right for ReLU layers), zero biases, BN scale 1 and shift 0, running mean 0 and
    variance 1. The BN variant draws the same weights from the same ``rng`` as the plain one."""

    def he(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    params = {
        "conv1_w": he(16, 1, 3, 3),
        "conv1_b": np.zeros(16, np.float32),
        "conv2_w": he(32, 16, 3, 3),
        "conv2_b": np.zeros(32, np.float32),
        "fc1_w": he(64, 32 * 4 * 4),
        "fc1_b": np.zeros(64, np.float32),
        "fc2_w": he(CLASSES, 64),
        "fc2_b": np.zeros(CLASSES, np.float32),
    }
    if not batchnorm:
        return params
    for layer, units in HIDDEN_UNITS.items():
        del params[f"{layer}_b"]
        bn = BATCHNORM_OF[layer]
        params |= {f"{bn}_scale": np.ones(units, np.float32), f"{bn}_B": np.zeros(units, np.float32)}
        params |= {f"{bn}_mean": np.zeros(units, np.float32), f"{bn}_var": np.ones(units, np.float32)}
    return params


def has_batchnorm(params: dict[str, np.ndarray]) -> bool:
    """Whether these are the BN variant's parameters."""
    return f"{BATCHNORM_OF['conv1']}_scale" in params


def forward(params: dict[str, np.ndarray], x: np.ndarray, train: bool = False) -> tuple[np.ndarray, Activations]:
    """Logits [N, 10] and the activations. ``train`` matters to the BN variant only: batch statistics (saved for
    the backward pass and the running averages) instead of the running ones."""
    saved = Activations()
    cols1 = saved.inputs["conv1"] = im2col(x)
    relu1 = _hidden(params, "conv1", conv(cols1, params["conv1_w"], params.get("conv1_b"), x.shape), train, saved)
    cols2 = saved.inputs["conv2"] = im2col(relu1)
    relu2 = _hidden(params, "conv2", conv(cols2, params["conv2_w"], params.get("conv2_b"), relu1.shape), train, saved)
    pooled, saved.pool_choice = maxpool(relu2)
    flat = saved.inputs["fc1"] = pooled.reshape(len(x), -1)
    relu3 = saved.inputs["fc2"] = _hidden(
        params, "fc1", affine(flat, params["fc1_w"], params.get("fc1_b")), train, saved
    )
    return affine(relu3, params["fc2_w"], params["fc2_b"]), saved


def loss_and_grads(
    params: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray
) -> tuple[float, dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Mean softmax cross-entropy of a batch, its gradient for every trained parameter, and each BN's batch
    statistics (none in the plain variant) for the running averages."""
    logits, saved = forward(params, x, train=True)
    loss, d_logits = _softmax_cross_entropy(logits, labels)
    grads: dict[str, np.ndarray] = {}
    d_relu3 = _affine_grads(params, "fc2", d_logits, saved, grads)
    d_fc1 = _hidden_backward("fc1", d_relu3, saved, grads)
    d_pooled = _affine_grads(params, "fc1", d_fc1, saved, grads).reshape(len(x), *_POOLED_SHAPE)
    d_conv2 = _hidden_backward("conv2", maxpool_backward(d_pooled, saved.pool_choice), saved, grads)
    d_cols2 = _affine_grads(params, "conv2", conv_rows(d_conv2), saved, grads)
    d_conv1 = _hidden_backward("conv1", col2im(d_cols2, saved.relus["conv1"].shape), saved, grads)
    _affine_grads(params, "conv1", conv_rows(d_conv1), saved, grads)
    return loss, grads, saved.batch_statistics


def update_running_statistics(
    params: dict[str, np.ndarray], batch_statistics: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    """Move each BN's running mean and variance in ``params`` toward this batch's (in place)."""
    for bn, (mean, variance) in batch_statistics.items():
        params[f"{bn}_mean"] = running_average(params[f"{bn}_mean"], mean)
        params[f"{bn}_var"] = running_average(params[f"{bn}_var"], variance)


def dead_units(params: dict[str, np.ndarray], x: np.ndarray) -> dict[str, int]:
    """Per hidden layer, how many of its Relu's channels are never positive on ``x`` (inference mode): units that
    do nothing on that data, which any pruning criterion should remove first."""
    _, saved = forward(params, x)
    return {layer: int(np.sum(relu.max(axis=(0, *range(2, relu.ndim))) <= 0)) for layer, relu in saved.relus.items()}


def _hidden(params: dict[str, np.ndarray], layer: str, z: np.ndarray, train: bool, saved: Activations) -> np.ndarray:
    """A hidden layer's pre-activation through its BN (if any) and its Relu."""
    bn = BATCHNORM_OF[layer]
    if has_batchnorm(params):
        gamma, beta = params[f"{bn}_scale"], params[f"{bn}_B"]
        if train:
            z, saved.batchnorm[bn], saved.batch_statistics[bn] = batch_norm_train(z, gamma, beta)
        else:
            z = batch_norm_infer(z, gamma, beta, params[f"{bn}_mean"], params[f"{bn}_var"])
    saved.relus[layer] = np.maximum(z, 0)
    return saved.relus[layer]


def _hidden_backward(layer: str, d_relu: np.ndarray, saved: Activations, grads: dict[str, np.ndarray]) -> np.ndarray:
    """The adjoint of :func:`_hidden`: the gradient of the layer's pre-activation, BN gradients into ``grads``."""
    d_z = d_relu * (saved.relus[layer] > 0)
    bn = BATCHNORM_OF[layer]
    if bn in saved.batchnorm:
        d_z, grads[f"{bn}_scale"], grads[f"{bn}_B"] = batch_norm_backward(d_z, saved.batchnorm[bn])
    return d_z


def _affine_grads(
    params: dict[str, np.ndarray], layer: str, d_out: np.ndarray, saved: Activations, grads: dict[str, np.ndarray]
) -> np.ndarray:
    """A Gemm's (or an im2col Conv's) weight and bias gradients into ``grads``; the gradient of its input rows."""
    d_weight, d_bias, d_x = affine_backward(d_out, saved.inputs[layer], params[f"{layer}_w"], f"{layer}_b" in params)
    grads[f"{layer}_w"] = d_weight
    if d_bias is not None:
        grads[f"{layer}_b"] = d_bias
    return d_x


def _softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean loss and its gradient for the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    loss = float(-np.log(probs[rows, labels]).mean())
    d_logits = probs
    d_logits[rows, labels] -= 1
    d_logits /= len(labels)
    return loss, d_logits
