"""A small CNN really trained on scikit-learn's digits, in numpy alone: a model whose accuracy pruning can hurt.

Random-weight models say nothing about accuracy: any pruning "keeps" their meaningless predictions.
This one is trained (no PyTorch: forward and backward passes are written here with im2col) and its
held-out test split is fixed, so ``onnxsat sparsify`` can be shown to lose, or not lose, real accuracy.

Architecture: input [N, 1, 8, 8] (pixel values / 16, as :func:`onnxsat.data.load_dataset` gives
them) -> Conv 3x3 pad 1 (1->16) -> Relu -> Conv 3x3 pad 1 (16->32) -> Relu -> MaxPool 2x2 ->
Flatten -> Gemm (512->64) -> Relu -> Gemm (64->10) -> logits. Training is Adam on mini-batches with a
fixed seed, so a retrain writes the same model. ``python -m onnxsat.zoo.digits_cnn`` retrains it
and rewrites the bundled file.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from onnxsat.data.metrics import evaluate, run_logits
from onnxsat.data.sources import DIGITS, Dataset, load_dataset
from onnxsat.profile.counting import parameter_count

IR_VERSION = 9
OPSET = 17
INPUT_SHAPE = ("batch", 1, 8, 8)
CLASSES = 10
EPOCHS = 30
BATCH_SIZE = 32
LEARNING_RATE = 2e-3
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPSILON = 1e-8
_MATCH_TOLERANCE = 1e-4
"""How far ONNX Runtime's logits may be from the numpy forward pass (both float32) before export fails."""


@dataclass(frozen=True)
class Split:
    """A fixed train/test split of the 1,797 digits: a permutation from ``shuffle_seed``, whose first
    ``train_count`` indices train the model and the rest are held out for measuring it."""

    shuffle_seed: int
    train_count: int

    def indices(self, total: int) -> tuple[np.ndarray, np.ndarray]:
        """(train indices, test indices) into a dataset of ``total`` samples in its own order."""
        order = np.random.default_rng(self.shuffle_seed).permutation(total)
        return order[: self.train_count], order[self.train_count :]


DIGITS_SPLIT = Split(shuffle_seed=0, train_count=1400)
"""The bundled model's split: 1,400 training digits, 397 held out. Independent of the training seed,
so every retrain is measured on the same held-out digits."""


def bundled_digits_cnn() -> Path:
    """The committed trained model (see :data:`DIGITS_SPLIT` for its test split)."""
    return Path(__file__).parent / "models" / "digits_cnn.onnx"


def test_split() -> Dataset:
    """The held-out digits as a Dataset [397, 1, 8, 8] with labels: data the model never trained on."""
    return _split_part(test=True)


test_split.__test__ = False  # a test module importing it must not have pytest collect it as a test


def train(seed: int = 0, epochs: int = EPOCHS) -> tuple[onnx.ModelProto, dict[str, object]]:
    """Train on the split's training digits; return the ONNX model and its statistics.

    The statistics: train/test top-1 (measured in ONNX Runtime on the exported model), sample
    counts, seed, epochs and the mean training loss of each epoch. Export fails unless the checker
    passes and ORT's logits match the numpy forward pass.
    """
    train_set, test_set = _split_part(test=False), _split_part(test=True)
    params = _initial_params(np.random.default_rng(seed))
    # One BLAS thread: the matrices are small, so threads only spin (8x slower on a busy 2-core machine),
    # and a fixed thread count keeps the float sums, hence the trained weights, the same on every run.
    with threadpool_limits(limits=1, user_api="blas"):
        losses = _fit(params, train_set, epochs, np.random.default_rng(seed + 1))
    model = to_onnx(params)
    onnx.checker.check_model(model, full_check=True)
    _check_ort_matches(model, params, test_set)
    stats: dict[str, object] = {
        "train_top1": evaluate(model, train_set).top1,
        "test_top1": evaluate(model, test_set).top1,
        "train_samples": len(train_set),
        "test_samples": len(test_set),
        "seed": seed,
        "epochs": epochs,
        "loss_per_epoch": losses,
    }
    return model, stats


def to_onnx(params: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The network as an opset-17 ONNX graph with a dynamic batch dim: input "input", output "logits"."""
    nodes = [
        helper.make_node("Conv", ["input", "conv1_w", "conv1_b"], ["conv1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("Conv", ["relu1", "conv2_w", "conv2_b"], ["conv2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1_w", "fc1_b"], ["fc1"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1"], ["relu3"], name="relu3"),
        helper.make_node("Gemm", ["relu3", "fc2_w", "fc2_b"], ["logits"], name="fc2", transB=1),
    ]
    initializers = [numpy_helper.from_array(value.astype(np.float32), name) for name, value in params.items()]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [INPUT_SHAPE[0], CLASSES])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="onnxsat"
    )
    model.doc_string = "CNN trained with numpy on scikit-learn digits (pixels / 16); see onnxsat.zoo.digits_cnn"
    return model


def _split_part(test: bool) -> Dataset:
    digits = load_dataset(DIGITS, [None, *INPUT_SHAPE[1:]])
    train_indices, test_indices = DIGITS_SPLIT.indices(len(digits))
    indices = test_indices if test else train_indices
    return Dataset(digits.inputs[indices], digits.labels[indices], f"{DIGITS}:{'test' if test else 'train'}")


def _initial_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-initialized weights (right for ReLU layers), zero biases; names are the ONNX initializers'."""

    def he(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1_w": he(16, 1, 3, 3),
        "conv1_b": np.zeros(16, np.float32),
        "conv2_w": he(32, 16, 3, 3),
        "conv2_b": np.zeros(32, np.float32),
        "fc1_w": he(64, 32 * 4 * 4),
        "fc1_b": np.zeros(64, np.float32),
        "fc2_w": he(CLASSES, 64),
        "fc2_b": np.zeros(CLASSES, np.float32),
    }


def _fit(params: dict[str, np.ndarray], data: Dataset, epochs: int, rng: np.random.Generator) -> list[float]:
    """Adam over shuffled mini-batches, updating ``params`` in place; the mean loss of each epoch."""
    first = {name: np.zeros_like(value) for name, value in params.items()}
    second = {name: np.zeros_like(value) for name, value in params.items()}
    beta1, beta2 = _ADAM_BETAS
    step = 0
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(data))
        total = 0.0
        for start in range(0, len(order), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            loss, grads = _loss_and_grads(params, data.inputs[batch], data.labels[batch])
            total += loss * len(batch)
            step += 1
            for name, grad in grads.items():
                first[name] = beta1 * first[name] + (1 - beta1) * grad
                second[name] = beta2 * second[name] + (1 - beta2) * grad * grad
                corrected = first[name] / (1 - beta1**step)
                scale = np.sqrt(second[name] / (1 - beta2**step)) + _ADAM_EPSILON
                params[name] -= (LEARNING_RATE * corrected / scale).astype(np.float32)
        losses.append(total / len(order))
    return losses


def _forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Logits [N, 10] and the intermediates the backward pass needs."""
    cols1 = _im2col(x)
    relu1 = np.maximum(_conv(cols1, params["conv1_w"], params["conv1_b"], x.shape), 0)
    cols2 = _im2col(relu1)
    relu2 = np.maximum(_conv(cols2, params["conv2_w"], params["conv2_b"], relu1.shape), 0)
    pooled, pool_choice = _maxpool(relu2)
    flat = pooled.reshape(len(x), -1)
    relu3 = np.maximum(flat @ params["fc1_w"].T + params["fc1_b"], 0)
    logits = relu3 @ params["fc2_w"].T + params["fc2_b"]
    saved = {"cols1": cols1, "relu1": relu1, "cols2": cols2, "relu2": relu2, "pool_choice": pool_choice}
    return logits, saved | {"flat": flat, "relu3": relu3}


def _loss_and_grads(
    params: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray
) -> tuple[float, dict[str, np.ndarray]]:
    """Mean softmax cross-entropy of a batch and its gradient for every parameter."""
    logits, saved = _forward(params, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    rows = np.arange(len(x))
    loss = float(-np.log(probs[rows, labels]).mean())
    d_logits = probs
    d_logits[rows, labels] -= 1
    d_logits /= len(x)
    grads = {"fc2_w": d_logits.T @ saved["relu3"], "fc2_b": d_logits.sum(axis=0)}
    d_fc1 = (d_logits @ params["fc2_w"]) * (saved["relu3"] > 0)
    grads |= {"fc1_w": d_fc1.T @ saved["flat"], "fc1_b": d_fc1.sum(axis=0)}
    d_pooled = (d_fc1 @ params["fc1_w"]).reshape(len(x), 32, 4, 4)
    d_conv2 = _maxpool_backward(d_pooled, saved["pool_choice"]) * (saved["relu2"] > 0)
    grads["conv2_w"], grads["conv2_b"], d_cols2 = _conv_backward(d_conv2, saved["cols2"], params["conv2_w"])
    d_conv1 = _col2im(d_cols2, saved["relu1"].shape) * (saved["relu1"] > 0)
    grads["conv1_w"], grads["conv1_b"], _ = _conv_backward(d_conv1, saved["cols1"], params["conv1_w"])
    return loss, grads


def _im2col(x: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> [N*H*W, C*9]: every 3x3 pad-1 window as a row, in Conv weight order (c, kh, kw)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.stack([padded[:, :, i : i + h, j : j + w] for i in range(3) for j in range(3)], axis=2)
    return windows.transpose(0, 3, 4, 1, 2).reshape(n * h * w, c * 9)


def _col2im(d_cols: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The adjoint of :func:`_im2col`: window gradients summed back onto the pixels they came from."""
    n, c, h, w = shape
    windows = d_cols.reshape(n, h, w, c, 9).transpose(0, 3, 4, 1, 2)
    padded = np.zeros((n, c, h + 2, w + 2), d_cols.dtype)
    for k in range(9):
        i, j = divmod(k, 3)
        padded[:, :, i : i + h, j : j + w] += windows[:, :, k]
    return padded[:, :, 1:-1, 1:-1]


def _conv(cols: np.ndarray, weight: np.ndarray, bias: np.ndarray, in_shape: Sequence[int]) -> np.ndarray:
    """3x3 pad-1 convolution from im2col rows: [N*H*W, C*9] @ [C*9, K] -> [N, K, H, W]."""
    n, _, h, w = in_shape
    out = cols @ weight.reshape(len(weight), -1).T + bias
    return out.reshape(n, h, w, len(weight)).transpose(0, 3, 1, 2)


def _conv_backward(
    d_out: np.ndarray, cols: np.ndarray, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`_conv` for its weight, bias and im2col rows."""
    d_rows = d_out.transpose(0, 2, 3, 1).reshape(-1, len(weight))
    d_weight = (d_rows.T @ cols).reshape(weight.shape)
    return d_weight, d_rows.sum(axis=0), d_rows @ weight.reshape(len(weight), -1)


def _maxpool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 stride-2 max pooling, and which of the 4 window positions won (first on ties, like ORT)."""
    n, c, h, w = x.shape
    windows = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    choice = windows.argmax(axis=-1)
    return np.take_along_axis(windows, choice[..., None], axis=-1)[..., 0], choice


def _maxpool_backward(d_out: np.ndarray, choice: np.ndarray) -> np.ndarray:
    """Route each pooled gradient to the window position that won."""
    n, c, h, w = d_out.shape
    d_windows = np.zeros((n, c, h, w, 4), d_out.dtype)
    np.put_along_axis(d_windows, choice[..., None], d_out[..., None], axis=-1)
    return d_windows.reshape(n, c, h, w, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, 2 * h, 2 * w)


def _check_ort_matches(model: onnx.ModelProto, params: dict[str, np.ndarray], data: Dataset) -> None:
    """The exported graph must compute what was trained: ORT's logits against the numpy forward pass."""
    expected, _ = _forward(params, data.inputs)
    actual = run_logits(model, data)
    difference = float(np.max(np.abs(actual - expected)))
    if difference > _MATCH_TOLERANCE * max(1.0, float(np.max(np.abs(expected)))):
        raise RuntimeError(f"ONNX Runtime's logits differ from the numpy forward pass by {difference:.3g}")


def main(argv: Sequence[str] | None = None) -> int:
    """Retrain and write the model atomically; print its accuracies."""
    from onnxsat.model_io import save_model

    parser = argparse.ArgumentParser(prog="python -m onnxsat.zoo.digits_cnn", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=bundled_digits_cnn(), help="default: the bundled model file")
    parser.add_argument("--seed", type=int, default=0, help="weight initialization and batch order (default 0)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"default {EPOCHS}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    model, stats = train(args.seed, args.epochs)
    seconds = time.perf_counter() - started
    save_model(model, args.out)
    print(
        f"wrote {args.out} ({args.out.stat().st_size:,} bytes, {parameter_count(model):,} parameters) "
        f"after {seconds:.1f} s: train top-1 {stats['train_top1']:.4f} on {stats['train_samples']}, "
        f"test top-1 {stats['test_top1']:.4f} on {stats['test_samples']} (seed {args.seed}, {args.epochs} epochs)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
