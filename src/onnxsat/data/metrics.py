"""How well a model does on a dataset: top-1/top-5 against labels, or agreement with the original model.

Pruning is judged by what it costs in accuracy. With labels that is plain top-k accuracy; without
them ("fidelity") the pruned model is compared with the original's own predictions, which needs no
labels at all and measures exactly what pruning changed.

This is the classifier evaluation the benchmarks and the zoo's training report; accuracy budgets on
any output (sequences, detections, maps, a user's metric) go through the registry in ``onnxsat.metrics``,
whose top-k metrics rank classes with :func:`class_ranks` from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.data.sources import Dataset, require_shape
from onnxsat.errors import DataError, RuntimeUnsupportedError
from onnxsat.verification import session, tidy_ort_message

TOP_K = 5

_ORT_FLOAT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


@dataclass(frozen=True)
class Accuracy:
    """Fractions in [0, 1] over ``samples``; ``kind`` is "accuracy" (vs labels) or "fidelity" (vs the original)."""

    top1: float
    top5: float
    samples: int
    kind: str


def topk_accuracy(logits: np.ndarray, labels: np.ndarray) -> Accuracy:
    """Top-1 and top-5 accuracy (top-k with k = min(5, classes)) of ``logits`` [N, classes] against ``labels``."""
    logits, labels = np.asarray(logits), np.asarray(labels)
    if np.issubdtype(labels.dtype, np.floating) and not np.all(labels == np.round(labels)):
        raise DataError("the labels are a regression's targets (not whole numbers): top-k accuracy needs classes")
    _check_rows(logits, len(labels), "labels")
    classes = logits.shape[1]
    if labels.min() < 0:
        raise DataError(f"labels must be 0 or more, found {labels.min()}")
    if labels.max() >= classes:
        raise DataError(f"labels go up to {labels.max()} but the model has {classes} classes")
    return _accuracy(class_ranks(logits, labels.astype(np.int64)), classes, "accuracy")


def fidelity(reference_logits: np.ndarray, logits: np.ndarray) -> Accuracy:
    """How often ``logits`` keep the reference's prediction: top-1 when the argmaxes agree, top-5 when the
    reference's class is within the model's top 5."""
    reference_logits, logits = np.asarray(reference_logits), np.asarray(logits)
    _check_rows(logits, len(reference_logits), "reference logits")
    if reference_logits.shape != logits.shape:
        raise DataError(
            f"reference logits have shape {list(reference_logits.shape)} but the model's have {list(logits.shape)}"
        )
    return _accuracy(class_ranks(logits, np.argmax(reference_logits, axis=1)), logits.shape[1], "fidelity")


def run_logits(
    model: onnx.ModelProto | bytes | str, dataset: Dataset, *, batch_size: int = 64, threads: int = 1
) -> np.ndarray:
    """The model's first output on every sample, in dataset order, batch by batch in ONNX Runtime.

    ORT runs with all graph optimizations (as the model will be deployed) and ``threads`` intra-op
    threads. A model whose batch dim is fixed (to 1, say) is fed batches of exactly that size, the last
    one padded with zeros whose outputs are dropped.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    sess = _session(model, threads)
    graph_inputs = sess.get_inputs()
    if len(graph_inputs) != 1:
        raise DataError(f"the model has {len(graph_inputs)} inputs; {dataset.name} can feed only one")
    model_input = graph_inputs[0]
    dtype = _ORT_FLOAT_TYPES.get(model_input.type)
    if dtype is None:
        raise DataError(f"the model's input {model_input.name!r} is a {model_input.type}, not float samples")
    require_shape(dataset.inputs.shape, model_input.shape, dataset.name)
    fixed_batch = model_input.shape[0] if isinstance(model_input.shape[0], int) and model_input.shape[0] > 0 else None
    step = fixed_batch or batch_size
    output_name = sess.get_outputs()[0].name
    outputs = []
    for inputs, _ in dataset.batches(step):
        count = len(inputs)
        if fixed_batch is not None and count < fixed_batch:
            inputs = np.concatenate([inputs, np.zeros((fixed_batch - count, *inputs.shape[1:]), inputs.dtype)])
        outputs.append(_run(sess, model_input.name, output_name, inputs.astype(dtype))[:count])
    return np.concatenate(outputs)


def evaluate(
    model: onnx.ModelProto | bytes | str,
    dataset: Dataset,
    *,
    reference_logits: np.ndarray | None = None,
    batch_size: int = 64,
    threads: int = 1,
) -> Accuracy:
    """Accuracy against the dataset's labels; without labels, fidelity to ``reference_logits``.

    Outputs like [N, classes, 1, 1] (a convolutional head) are flattened to [N, classes].
    """
    if dataset.labels is None and reference_logits is None:
        raise DataError(f"{dataset.name} has no labels: give the original model's logits to measure fidelity")
    logits = run_logits(model, dataset, batch_size=batch_size, threads=threads)
    if logits.ndim < 2:
        raise DataError(f"the model's first output has shape {list(logits.shape)}, not [samples, classes]")
    logits = logits.reshape(len(logits), -1)
    if dataset.labels is not None:
        return topk_accuracy(logits, dataset.labels)
    return fidelity(np.asarray(reference_logits).reshape(len(reference_logits), -1), logits)


def _check_rows(logits: np.ndarray, count: int, against: str) -> None:
    """Logits must be [N, classes] with one row per label (or reference row), and N > 0."""
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise DataError(f"logits must have shape [samples, classes], got {list(logits.shape)}")
    if len(logits) != count:
        raise DataError(f"{len(logits)} rows of logits but {count} {against}")
    if count == 0:
        raise DataError("no samples to measure accuracy on")


def class_ranks(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Where ``classes[i]`` stands in row i sorted from the highest score (0 = the argmax).

    Ties go to the lower class index, as ``argmax`` does, so rank 0 is exactly "argmax is the class".
    A row with a NaN is no prediction at all: its rank is past the last class, wrong at every k.
    """
    rows = np.arange(len(scores))
    target = scores[rows, classes][:, None]
    lower_index = np.arange(scores.shape[1])[None, :] < classes[:, None]
    ranks = np.count_nonzero((scores > target) | ((scores == target) & lower_index), axis=1)
    ranks[np.isnan(scores).any(axis=1)] = scores.shape[1]
    return ranks


def _accuracy(ranks: np.ndarray, classes: int, kind: str) -> Accuracy:
    top1 = float(np.mean(ranks == 0))
    top5 = float(np.mean(ranks < min(TOP_K, classes)))
    return Accuracy(top1=top1, top5=top5, samples=len(ranks), kind=kind)


def _session(model: onnx.ModelProto | bytes | str, threads: int) -> ort.InferenceSession:
    """A CPU session with every graph optimization on; a model ORT cannot load is one error line."""
    try:
        source = Path(model) if isinstance(model, str) else model
        if isinstance(source, bytes):
            source = onnx.load_model_from_string(source)
        return session(source, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads=threads)
    except Exception as error:  # onnx and ORT raise several unrelated exception types
        raise RuntimeUnsupportedError(f"ONNX Runtime cannot load the model: {_ort_reason(error)}") from None


def _run(sess: ort.InferenceSession, input_name: str, output_name: str, inputs: np.ndarray) -> np.ndarray:
    """One batch through the model; its output must have one row per sample to be split back into samples."""
    try:
        result = sess.run([output_name], {input_name: inputs})[0]
    except Exception as error:  # ORT raises several unrelated exception types
        raise RuntimeUnsupportedError(f"ONNX Runtime cannot run the model: {_ort_reason(error)}") from None
    if result.ndim == 0 or len(result) != len(inputs):
        raise DataError(
            f"the model's output {output_name!r} has shape {list(result.shape)} for a batch of {len(inputs)}: "
            "it needs one row per sample"
        )
    return result


def _ort_reason(error: Exception) -> str:
    return tidy_ort_message(" ".join(str(error).split())) or type(error).__name__
