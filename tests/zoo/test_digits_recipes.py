"""The digits CNN's training recipes: BN gradients against finite differences, short ``sgd`` and ``sgd-bn``
trainings that export valid, ORT-matching, accurate models, the command line, and the pruner on the BN model."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxsat.data.metrics import run_logits
from onnxsat.data.sources import load_dataset
from onnxsat.errors import OutputPathError
from onnxsat.pruning.cost import parameter_count
from onnxsat.pruning.prune import PruneOptions, prune_model
from onnxsat.zoo.digits_cnn import test_split
from tools.zoo import digits_cnn
from tools.zoo.batchnorm import batch_norm_backward, batch_norm_train
from tools.zoo.digits_network import forward, initial_params, loss_and_grads
from tools.zoo.digits_training import CosineSgd

GRADIENT_TOLERANCE = 1e-5
"""Worst relative error allowed between analytic and central-difference gradients in float64 (seen: ~3e-7)."""


def _relative_error(analytic: float, numeric: float) -> float:
    return abs(analytic - numeric) / max(abs(analytic), abs(numeric), 1e-12)


@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 2, 2)])
def test_batch_norm_backward_matches_finite_differences(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x, weights = rng.standard_normal(shape), rng.standard_normal(shape)  # loss = sum(weights * output)
    gamma, beta = 1 + 0.3 * rng.standard_normal(shape[1]), 0.3 * rng.standard_normal(shape[1])

    def loss(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> float:
        return float(np.sum(weights * batch_norm_train(x, gamma, beta)[0]))

    _, cache, _ = batch_norm_train(x, gamma, beta)
    analytic = dict(zip(("x", "gamma", "beta"), batch_norm_backward(weights, cache), strict=True))
    values = {"x": x, "gamma": gamma, "beta": beta}
    step = 1e-6
    for name, value in values.items():
        for index in np.ndindex(value.shape):
            bump = np.zeros_like(value)
            bump[index] = step
            numeric = (loss(**(values | {name: value + bump})) - loss(**(values | {name: value - bump}))) / (2 * step)
            assert _relative_error(float(analytic[name][index]), numeric) < GRADIENT_TOLERANCE, (name, index)


def test_bn_network_gradients_match_finite_differences() -> None:
    """Every trained parameter of the BN variant, along random directions, on six digits in float64."""
    rng = np.random.default_rng(0)
    params = {name: value.astype(np.float64) for name, value in initial_params(rng, batchnorm=True).items()}
    for name in ("bn1_scale", "bn1_B", "bn2_scale", "bn2_B", "bn3_scale", "bn3_B"):
        params[name] += 0.3 * rng.standard_normal(params[name].shape)  # away from the symmetric start
    digits = test_split().take(6)
    x, labels = digits.inputs.astype(np.float64), digits.labels
    assert labels is not None
    _, grads, statistics = loss_and_grads(params, x, labels)
    assert set(statistics) == {"bn1", "bn2", "bn3"} and "conv1_b" not in grads
    assert set(grads) == {name for name in params if not name.endswith(("_mean", "_var"))}
    step = 1e-6
    for name, grad in grads.items():
        for _ in range(2):
            direction = rng.standard_normal(grad.shape)
            plus = loss_and_grads(params | {name: params[name] + step * direction}, x, labels)[0]
            minus = loss_and_grads(params | {name: params[name] - step * direction}, x, labels)[0]
            numeric = (plus - minus) / (2 * step)
            assert _relative_error(float(np.sum(grad * direction)), numeric) < GRADIENT_TOLERANCE, name


def test_cosine_sgd_schedule_and_weight_decay_on_weights_only() -> None:
    optimizer = CosineSgd(peak=0.1, total_steps=4)
    params = {"fc2_w": np.ones(2, np.float32), "fc2_b": np.ones(2, np.float32), "bn1_scale": np.ones(2, np.float32)}
    zero = {name: np.zeros(2, np.float32) for name in params}
    rates = []
    for _ in range(4):
        rates.append(optimizer.learning_rate())
        optimizer.step(params, zero)
    assert rates == pytest.approx([0.1, 0.1 * (1 + np.cos(np.pi / 4)) / 2, 0.05, 0.1 * (1 - np.cos(np.pi / 4)) / 2])
    assert params["fc2_b"].tolist() == [1.0, 1.0]  # biases are not decayed
    assert params["fc2_w"][0] < 1 and params["bn1_scale"][0] == params["fc2_w"][0]


@functools.cache
def _trained(recipe: str) -> tuple[onnx.ModelProto, dict[str, object]]:
    """A recipe's model after two epochs (about a second), trained once per test process."""
    return digits_cnn.train(seed=0, epochs=2, recipe=recipe)


@pytest.mark.parametrize("recipe", ["sgd", "sgd-bn"])
def test_short_training_exports_a_valid_accurate_model(recipe: str) -> None:
    model, stats = _trained(recipe)
    onnx.checker.check_model(model, full_check=True)
    assert stats["recipe"] == recipe and stats["epochs"] == 2 and stats["learning_rate"] == 0.1
    assert isinstance(stats["test_top1"], float) and stats["test_top1"] > 0.9  # 98.5% seen after two epochs
    losses = stats["loss_per_epoch"]
    assert isinstance(losses, list) and losses[1] < losses[0]
    dead = stats["dead_units"]
    assert isinstance(dead, dict) and set(dead) == {"conv1", "conv2", "fc1"}
    assert all(0 <= dead[layer] <= units for layer, units in {"conv1": 16, "conv2": 32, "fc1": 64}.items())
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("BatchNormalization") == (3 if recipe == "sgd-bn" else 0)
    # ORT runs the graph as the numpy inference pass computes it from the very initializers exported
    params = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    assert ("conv1_b" in params) == (recipe == "sgd")
    test_set = test_split()
    expected, _ = forward(params, test_set.inputs)
    assert np.max(np.abs(run_logits(model, test_set) - expected)) < 1e-4 * max(1.0, float(np.max(np.abs(expected))))


def test_pruner_slices_the_batchnorm_model() -> None:
    """As exported (prune would otherwise fold the BatchNorms into the convolutions first)."""
    model, _ = _trained("sgd-bn")
    options = PruneOptions(rate=0.5, normalize=False)
    pruned, _ = prune_model(model, options, dataset=load_dataset("digits-train", [None, 1, 8, 8]))
    onnx.checker.check_model(pruned, full_check=True)
    assert parameter_count(pruned) < parameter_count(model)
    sizes = {tensor.name: tensor.dims[0] for tensor in pruned.graph.initializer if tensor.name.startswith("bn")}
    assert sizes["bn1_scale"] < 16 and sizes["bn1_var"] == sizes["bn1_scale"]
    assert sizes["bn2_mean"] < 32 and sizes["bn3_B"] < 64
    assert [node.op_type for node in pruned.graph.node].count("BatchNormalization") == 3
    assert run_logits(pruned, test_split().take(4)).shape == (4, 10)


def test_cli_writes_atomically_and_prints_dead_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sgd.onnx"
    out.write_bytes(b"previous")
    assert digits_cnn.main(["--recipe", "sgd", "--epochs", "1", "--seed", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "(recipe sgd, seed 3, 1 epochs, learning rate 0.1)" in printed
    assert "dead ReLU units (never positive on the 1400 training digits): conv1 " in printed
    assert "/16, conv2 " in printed and "/32, fc1 " in printed and printed.rstrip().endswith("/64")
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sgd.onnx"]  # no temporary file left


def test_cli_keeps_the_previous_file_when_the_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("onnxsat.model_io.os.replace", refuse)
    out = tmp_path / "sgd-bn.onnx"
    out.write_bytes(b"previous")
    with pytest.raises(OutputPathError):
        digits_cnn.main(["--recipe", "sgd-bn", "--epochs", "1", "--out", str(out)])
    assert out.read_bytes() == b"previous" and [path.name for path in tmp_path.iterdir()] == ["sgd-bn.onnx"]


def test_cli_needs_out_for_a_recipe_other_than_the_bundled_models(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        digits_cnn.main(["--recipe", "sgd"])
    assert exit_info.value.code == 2 and "--recipe sgd needs --out" in capsys.readouterr().err
