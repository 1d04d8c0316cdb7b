"""The bundled digits CNN: a valid, small ONNX file that really classifies held-out digits."""

from __future__ import annotations

import numpy as np
import onnx

from onnxsat.data.metrics import evaluate, run_logits
from onnxsat.data.sources import DIGITS_SPLIT
from onnxsat.profile.counting import parameter_count
from onnxsat.zoo import digits_cnn
from tools.zoo.digits_cnn import train

MAX_FILE_BYTES = 200_000


def test_bundled_model_is_valid_small_and_dynamic_batch() -> None:
    path = digits_cnn.bundled_digits_cnn()
    assert path.stat().st_size < MAX_FILE_BYTES
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [(opset.domain, opset.version) for opset in model.opset_import] == [("", 17)]
    (graph_input,) = model.graph.input
    dims = [dim.dim_param or dim.dim_value for dim in graph_input.type.tensor_type.shape.dim]
    assert graph_input.name == "input" and dims == ["batch", 1, 8, 8]
    assert [output.name for output in model.graph.output] == ["logits"]
    assert parameter_count(model) == 38_282


def test_bundled_model_classifies_the_held_out_digits() -> None:
    test_set = digits_cnn.test_split()
    assert test_set.inputs.shape == (397, 1, 8, 8) and test_set.labels is not None
    result = evaluate(str(digits_cnn.bundled_digits_cnn()), test_set, batch_size=50)
    assert result.kind == "accuracy" and result.samples == 397
    assert result.top1 >= 0.95
    logits = run_logits(str(digits_cnn.bundled_digits_cnn()), test_set.take(3))
    assert logits.shape == (3, 10) and np.all(np.isfinite(logits))


def test_split_holds_out_digits_the_model_never_trained_on() -> None:
    train_indices, test_indices = DIGITS_SPLIT.indices(1797)
    assert len(train_indices) == 1400 and len(test_indices) == 397
    assert sorted([*train_indices, *test_indices]) == list(range(1797))


def test_two_epochs_of_training_lower_the_loss() -> None:
    model, stats = train(seed=0, epochs=2)
    losses = stats["loss_per_epoch"]
    assert isinstance(losses, list) and len(losses) == 2 and losses[1] < losses[0]
    assert stats["test_samples"] == 397 and stats["train_samples"] == 1400
    assert isinstance(stats["test_top1"], float) and stats["test_top1"] > 0.5
    onnx.checker.check_model(model)
