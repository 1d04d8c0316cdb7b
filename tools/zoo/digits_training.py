"""How the digits CNN is trained: the optimizers, the named recipes and the mini-batch loop.

``adam`` is how the bundled model was trained (quick, no weight decay). ``sgd`` and ``sgd-bn`` train it the way
the ONNXPruner paper's models are trained (SGD with momentum 0.9, L2 weight decay 5e-4 on the weights, cosine
learning rate from a peak of 0.1, without and with BatchNormalization): pruning criteria behave differently on
such models (weight decay kills ReLU units and shrinks the weights of the rest), so claims about pruning want them
too. Everything is seeded and the caller pins BLAS to one thread, so a recipe retrains the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from onnxsat.data.sources import Dataset
from tools.zoo.digits_network import loss_and_grads, update_running_statistics

BATCH_SIZE = 32
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPSILON = 1e-8
SGD_MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
_DECAYED_SUFFIXES = ("_w", "_scale")
"""What weight decay shrinks: Conv/Gemm weights and BN scales (gammas), not biases or BN shifts."""


class Optimizer(Protocol):
    """Updates the parameters in place from one batch's gradients."""

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None: ...


class Adam:
    """Adam with a constant learning rate and bias correction, no weight decay."""

    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate
        self._first: dict[str, np.ndarray] = {}
        self._second: dict[str, np.ndarray] = {}
        self._steps = 0

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        beta1, beta2 = _ADAM_BETAS
        self._steps += 1
        for name, grad in grads.items():
            first = self._first.get(name, np.zeros_like(grad))
            second = self._second.get(name, np.zeros_like(grad))
            self._first[name] = first = beta1 * first + (1 - beta1) * grad
            self._second[name] = second = beta2 * second + (1 - beta2) * grad * grad
            corrected = first / (1 - beta1**self._steps)
            scale = np.sqrt(second / (1 - beta2**self._steps)) + _ADAM_EPSILON
            params[name] -= (self.learning_rate * corrected / scale).astype(np.float32)


class CosineSgd:
    """SGD with momentum, L2 weight decay added to the gradient (as PyTorch's ``weight_decay``), and a learning
    rate that falls from ``peak`` to 0 along a half cosine over ``total_steps``."""

    def __init__(self, peak: float, total_steps: int) -> None:
        self.peak = peak
        self.total_steps = total_steps
        self._velocity: dict[str, np.ndarray] = {}
        self._steps = 0

    def learning_rate(self) -> float:
        """The rate for the next step."""
        return self.peak * 0.5 * (1 + math.cos(math.pi * self._steps / self.total_steps))

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        rate = self.learning_rate()
        for name, grad in grads.items():
            if name.endswith(_DECAYED_SUFFIXES):
                grad = grad + WEIGHT_DECAY * params[name]
            velocity = self._velocity.get(name, np.zeros_like(grad))
            self._velocity[name] = velocity = (SGD_MOMENTUM * velocity + grad).astype(np.float32)
            params[name] = (params[name] - rate * velocity).astype(np.float32)
        self._steps += 1


@dataclass(frozen=True)
class Recipe:
    """A named way to train the CNN: the model variant, the optimizer and their defaults."""

    name: str
    batchnorm: bool
    epochs: int
    learning_rate: float
    """Adam's constant rate, or SGD's cosine peak."""
    optimizer: Callable[[float, int], Optimizer]
    """Builds the optimizer from the learning rate and the total number of steps."""


RECIPES = {
    "adam": Recipe("adam", batchnorm=False, epochs=30, learning_rate=2e-3, optimizer=lambda rate, _: Adam(rate)),
    "sgd": Recipe("sgd", batchnorm=False, epochs=300, learning_rate=0.1, optimizer=CosineSgd),
    "sgd-bn": Recipe("sgd-bn", batchnorm=True, epochs=300, learning_rate=0.1, optimizer=CosineSgd),
}
DEFAULT_RECIPE = "adam"


def fit(
    params: dict[str, np.ndarray],
    data: Dataset,
    recipe: Recipe,
    epochs: int,
    learning_rate: float,
    rng: np.random.Generator,
) -> list[float]:
    """Train ``params`` in place on shuffled mini-batches of ``data``; the mean loss of each epoch.

    A BN model's running statistics follow each batch's. Raises RuntimeError if the loss stops being finite
    (a learning rate too high): such a model is not worth exporting.
    """
    optimizer = recipe.optimizer(learning_rate, epochs * math.ceil(len(data) / BATCH_SIZE))
    losses = []
    for epoch in range(epochs):
        order = rng.permutation(len(data))
        total = 0.0
        for start in range(0, len(order), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            loss, grads, batch_statistics = loss_and_grads(params, data.inputs[batch], data.labels[batch])
            update_running_statistics(params, batch_statistics)
            if not math.isfinite(loss):
                raise RuntimeError(f"recipe {recipe.name}: the training loss diverged in epoch {epoch + 1}")
            total += loss * len(batch)
            optimizer.step(params, grads)
        losses.append(total / len(order))
    return losses
