"""Training the bundled digits CNN in numpy alone: a model whose accuracy pruning can hurt.

Random-weight models say nothing about accuracy: any pruning "keeps" their meaningless predictions.
This one is trained (no PyTorch: :mod:`tools.zoo.digits_network` has the architecture, its forward and
backward passes) on the fixed split :data:`onnxsat.data.sources.DIGITS_SPLIT`, so ``onnxsat sparsify`` can be
shown to lose, or not lose, real accuracy. This module holds the training entry, the ONNX export and the
command line; the package ships only the trained file (:mod:`onnxsat.zoo.digits_cnn`).

``python -m tools.zoo.digits_cnn`` (from the repository root) retrains the bundled model (recipe ``adam``) and
rewrites the bundled file; ``--recipe sgd`` or ``sgd-bn`` train it as pruning papers train theirs
(:mod:`tools.zoo.digits_training`), the latter with BatchNormalization nodes. Every recipe is seeded, so a
retrain writes the same model. Needs scikit-learn (the ``data`` extra) for the digits.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from onnxsat.data.metrics import evaluate, run_logits
from onnxsat.data.sources import Dataset
from onnxsat.profile.counting import parameter_count
from onnxsat.zoo.digits_cnn import bundled_digits_cnn, test_split, train_split
from tools.zoo import batchnorm
from tools.zoo.digits_network import (
    BATCHNORM_OF,
    CLASSES,
    HIDDEN_UNITS,
    INPUT_SHAPE,
    dead_units,
    forward,
    has_batchnorm,
    initial_params,
)
from tools.zoo.digits_training import DEFAULT_RECIPE, RECIPES, fit

IR_VERSION = 9
OPSET = 17
_MATCH_TOLERANCE = 1e-4
"""How far ONNX Runtime's logits may be from the numpy forward pass (both float32) before export fails."""


def train(
    seed: int = 0, epochs: int | None = None, recipe: str = DEFAULT_RECIPE, learning_rate: float | None = None
) -> tuple[onnx.ModelProto, dict[str, object]]:
    """Train on the split's training digits with a recipe of :data:`~tools.zoo.digits_training.RECIPES`
    (``epochs`` and ``learning_rate`` default to the recipe's); return the ONNX model and its statistics.

    The statistics: train/test top-1 (measured in ONNX Runtime on the exported model), sample counts, recipe,
    seed, epochs, learning rate, the mean training loss of each epoch and the dead units of each hidden layer
    (channels never positive on the training digits). Export fails unless the checker passes and ORT's logits
    match the numpy forward pass.
    """
    chosen = RECIPES[recipe]
    epochs = chosen.epochs if epochs is None else epochs
    learning_rate = chosen.learning_rate if learning_rate is None else learning_rate
    train_set, test_set = train_split(), test_split()
    params = initial_params(np.random.default_rng(seed), chosen.batchnorm)
    # One BLAS thread: the matrices are small, so threads only spin (8x slower on a busy 2-core machine),
    # and a fixed thread count keeps the float sums, hence the trained weights, the same on every run.
    with threadpool_limits(limits=1, user_api="blas"):
        losses = fit(params, train_set, chosen, epochs, learning_rate, np.random.default_rng(seed + 1))
        dead = dead_units(params, train_set.inputs)
    model = to_onnx(params)
    onnx.checker.check_model(model, full_check=True)
    _check_ort_matches(model, params, test_set)
    stats: dict[str, object] = {
        "train_top1": evaluate(model, train_set).top1,
        "test_top1": evaluate(model, test_set).top1,
        "train_samples": len(train_set),
        "test_samples": len(test_set),
        "recipe": recipe,
        "seed": seed,
        "epochs": epochs,
        "learning_rate": learning_rate,
        "loss_per_epoch": losses,
        "dead_units": dead,
    }
    return model, stats


def to_onnx(params: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The network as an opset-17 ONNX graph with a dynamic batch dim: input "input", output "logits".

    BN parameters (the ``sgd-bn`` recipe's) become BatchNormalization nodes in inference form, their running
    statistics initializers like the rest.
    """
    nodes = [
        *_hidden_nodes(params, "conv1", "Conv", "input", "relu1", pads=[1, 1, 1, 1]),
        *_hidden_nodes(params, "conv2", "Conv", "relu1", "relu2", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        *_hidden_nodes(params, "fc1", "Gemm", "flat", "relu3", transB=1),
        helper.make_node("Gemm", ["relu3", "fc2_w", "fc2_b"], ["logits"], name="fc2", transB=1),
    ]
    initializers = [numpy_helper.from_array(value.astype(np.float32), name) for name, value in params.items()]
    graph = helper.make_graph(
        nodes,
        "digits_cnn_bn" if has_batchnorm(params) else "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [INPUT_SHAPE[0], CLASSES])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="onnxsat"
    )
    kind = "CNN with BatchNormalization" if has_batchnorm(params) else "CNN"
    # The text the bundled file carries (a retrain rewrites it byte for byte); onnxsat.zoo.digits_cnn, the
    # package's loader of the file, says where this trainer lives.
    model.doc_string = f"{kind} trained with numpy on scikit-learn digits (pixels / 16); see onnxsat.zoo.digits_cnn"
    return model


def _hidden_nodes(
    params: dict[str, np.ndarray], layer: str, op: str, source: str, relu: str, **attributes: object
) -> list[NodeProto]:
    """A hidden layer's Conv or Gemm (with its bias if it has one), its BatchNormalization if any, its Relu."""
    inputs = [source, f"{layer}_w", *([f"{layer}_b"] if f"{layer}_b" in params else [])]
    nodes = [helper.make_node(op, inputs, [layer], name=layer, **attributes)]
    if has_batchnorm(params):
        bn = BATCHNORM_OF[layer]
        statistics = [f"{bn}_scale", f"{bn}_B", f"{bn}_mean", f"{bn}_var"]
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [layer, *statistics],
                [bn],
                name=bn,
                epsilon=batchnorm.EPSILON,
                momentum=1 - batchnorm.MOMENTUM,
            )
        )
    nodes.append(helper.make_node("Relu", [nodes[-1].output[0]], [relu], name=relu))
    return nodes


def _check_ort_matches(model: onnx.ModelProto, params: dict[str, np.ndarray], data: Dataset) -> None:
    """The exported graph must compute what was trained: ORT's logits against the numpy forward pass."""
    expected, _ = forward(params, data.inputs)
    actual = run_logits(model, data)
    difference = float(np.max(np.abs(actual - expected)))
    if difference > _MATCH_TOLERANCE * max(1.0, float(np.max(np.abs(expected)))):
        raise RuntimeError(f"ONNX Runtime's logits differ from the numpy forward pass by {difference:.3g}")


def main(argv: Sequence[str] | None = None) -> int:
    """Train the digits CNN with a recipe and write it atomically; print its accuracies and dead units."""
    from onnxsat.model_io import save_model

    parser = argparse.ArgumentParser(prog="python -m tools.zoo.digits_cnn", description=main.__doc__)
    parser.add_argument(
        "--recipe",
        choices=list(RECIPES),
        default=DEFAULT_RECIPE,
        help=f"default {DEFAULT_RECIPE} (the bundled model's); sgd and sgd-bn: SGD momentum 0.9, weight decay 5e-4, "
        "cosine learning rate, the latter with BatchNormalization",
    )
    parser.add_argument("--seed", type=int, default=0, help="weight initialization and batch order (default 0)")
    parser.add_argument("--epochs", type=int, help="default: the recipe's (adam 30, sgd and sgd-bn 300)")
    parser.add_argument(
        "--peak-lr", type=float, help="Adam's learning rate or SGD's cosine peak; default the recipe's (2e-3, 0.1)"
    )
    parser.add_argument(
        "--out", type=Path, help="where to write the model; default the bundled model file, for the adam recipe only"
    )
    args = parser.parse_args(argv)
    if args.out is None and args.recipe != DEFAULT_RECIPE:
        parser.error(f"--recipe {args.recipe} needs --out: only the {DEFAULT_RECIPE} recipe rewrites the bundled model")
    out = bundled_digits_cnn() if args.out is None else args.out
    started = time.perf_counter()
    model, stats = train(args.seed, args.epochs, args.recipe, args.peak_lr)
    seconds = time.perf_counter() - started
    save_model(model, out)
    print(
        f"wrote {out} ({out.stat().st_size:,} bytes, {parameter_count(model):,} parameters) "
        f"after {seconds:.1f} s: train top-1 {stats['train_top1']:.4f} on {stats['train_samples']}, "
        f"test top-1 {stats['test_top1']:.4f} on {stats['test_samples']} "
        f"(recipe {args.recipe}, seed {args.seed}, {stats['epochs']} epochs, learning rate {stats['learning_rate']:g})"
    )
    dead = cast(dict[str, int], stats["dead_units"])
    counts = ", ".join(f"{layer} {dead[layer]}/{units}" for layer, units in HIDDEN_UNITS.items())
    print(f"dead ReLU units (never positive on the {stats['train_samples']} training digits): {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
