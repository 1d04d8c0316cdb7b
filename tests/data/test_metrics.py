"""Accuracy and fidelity on hand-made logits; run_logits on tiny models with fixed and dynamic batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.data.metrics import Accuracy, evaluate, fidelity, run_logits, topk_accuracy
from onnxsat.data.sources import Dataset
from onnxsat.errors import DataError

WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
BIAS = np.array([0.1, -0.2, 0.3], dtype=np.float32)


def linear_model(batch: int | str, output: str = "logits") -> onnx.ModelProto:
    """logits = x @ WEIGHT + BIAS for x [batch, 4]; ``output="sum"`` instead sums over the batch."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["product"]),
        helper.make_node("Add", ["product", "b"], ["logits"]),
    ]
    out_shape: list[int | str] = [batch, 3]
    if output == "sum":
        nodes.append(helper.make_node("ReduceSum", ["logits"], ["sum"], keepdims=0))
        out_shape = []
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(WEIGHT, "w"), numpy_helper.from_array(BIAS, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def samples(count: int, labels: bool = True) -> Dataset:
    inputs = np.random.default_rng(count).standard_normal((count, 4)).astype(np.float32)
    expected = inputs @ WEIGHT + BIAS
    return Dataset(inputs, expected.argmax(axis=1) if labels else None, f"{count} samples")


# ---------------------------------------------------------------- metrics on hand-made logits

SEVEN_CLASSES = np.array(
    [
        [0.0, 9.0, 1.0, 2.0, 3.0, 4.0, 5.0],  # class 1 first
        [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0],  # class order 0, 1, 2, ...
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # all tied: argmax is class 0
        [np.nan, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # a NaN: no prediction
    ]
)


def test_topk_accuracy_counts_rank_within_five() -> None:
    # row 0: label 1 is top-1; row 1: label 4 is 5th (top-5 only); row 2: label 5 is 6th of a tie; row 3: NaN
    result = topk_accuracy(SEVEN_CLASSES, np.array([1, 4, 5, 1]))
    assert result == Accuracy(top1=0.25, top5=0.5, samples=4, kind="accuracy")


def test_ties_go_to_the_lower_class_like_argmax() -> None:
    assert topk_accuracy(SEVEN_CLASSES[2:3], np.array([0])).top1 == 1.0
    assert topk_accuracy(SEVEN_CLASSES[2:3], np.array([3])) == Accuracy(0.0, 1.0, 1, "accuracy")


def test_top5_is_everything_with_fewer_than_five_classes() -> None:
    result = topk_accuracy(np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]), np.array([0, 1]))
    assert result == Accuracy(top1=0.0, top5=1.0, samples=2, kind="accuracy")


def test_fidelity_compares_with_the_reference_prediction() -> None:
    reference = np.eye(7)[[1, 0, 4, 6]] * 10  # predicts 1, 0, 4, 6
    model = SEVEN_CLASSES.copy()
    model[3] = [6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]  # class 6 is last: outside the top 5
    # row 0 agrees; row 1 agrees; row 2 (tie) predicts 0, class 4 is 5th
    assert fidelity(reference, model) == Accuracy(top1=0.5, top5=0.75, samples=4, kind="fidelity")


@pytest.mark.parametrize(
    ("logits", "labels", "problem"),
    [
        (np.zeros((3, 10)), np.array([0, 12, 3]), "labels go up to 12 but the model has 10 classes"),
        (np.zeros((2, 10)), np.array([0, -1]), "labels must be 0 or more, found -1"),
        (np.zeros((2, 10)), np.array([0, 1, 2]), "2 rows of logits but 3 labels"),
        (np.zeros(10), np.array([0]), "logits must have shape [samples, classes], got [10]"),
        (np.zeros((0, 10)), np.zeros(0, int), "no samples"),
    ],
)
def test_bad_labels_or_logits_raise(logits: np.ndarray, labels: np.ndarray, problem: str) -> None:
    with pytest.raises(DataError) as caught:
        topk_accuracy(logits, labels)
    assert problem in str(caught.value)


def test_fidelity_needs_matching_shapes() -> None:
    with pytest.raises(DataError, match=r"reference logits have shape \[2, 5\] but the model's have \[2, 4\]"):
        fidelity(np.zeros((2, 5)), np.zeros((2, 4)))


# ---------------------------------------------------------------- running models


@pytest.mark.parametrize(("batch", "batch_size"), [(1, 64), (2, 64), ("N", 4), ("N", 64)])
def test_run_logits_runs_every_batch(batch: int | str, batch_size: int) -> None:
    data = samples(11)  # not a multiple of any batch size above
    logits = run_logits(linear_model(batch), data, batch_size=batch_size)
    np.testing.assert_allclose(logits, data.inputs @ WEIGHT + BIAS, rtol=1e-5, atol=1e-6)


def test_run_logits_takes_bytes_and_paths(tmp_path: Path) -> None:
    data = samples(5)
    model = linear_model("N")
    onnx.save(model, str(tmp_path / "linear.onnx"))
    from_proto = run_logits(model, data, batch_size=2)
    np.testing.assert_array_equal(run_logits(model.SerializeToString(), data, batch_size=2), from_proto)
    np.testing.assert_array_equal(run_logits(str(tmp_path / "linear.onnx"), data, batch_size=2, threads=2), from_proto)


def test_run_logits_refuses_samples_of_another_shape() -> None:
    data = Dataset(np.zeros((3, 5), np.float32), None, "wide samples")
    with pytest.raises(DataError, match=r"wide samples: inputs have shape \[3, 5\] but the model takes \[\?, 4\]"):
        run_logits(linear_model("N"), data)


def test_run_logits_refuses_an_output_that_is_not_per_sample() -> None:
    with pytest.raises(DataError, match="one row per sample"):
        run_logits(linear_model("N", output="sum"), samples(4))


def test_evaluate_with_labels_is_accuracy() -> None:
    data = samples(9)
    assert evaluate(linear_model(1), data, batch_size=4) == Accuracy(1.0, 1.0, 9, "accuracy")
    wrong = Dataset(data.inputs, (data.labels + 1) % 3, data.name)
    assert evaluate(linear_model("N"), wrong).top1 == 0.0


def test_evaluate_without_labels_is_fidelity() -> None:
    data = samples(7, labels=False)
    reference = run_logits(linear_model("N"), data)
    assert evaluate(linear_model(1), data, reference_logits=reference) == Accuracy(1.0, 1.0, 7, "fidelity")
    with pytest.raises(DataError, match="7 samples has no labels"):
        evaluate(linear_model(1), data)
