"""Classifier outputs: top-1 / top-5 (against labels, or agreement with the original) and one-value
decisions (a speech probability, a binary logit)."""

from __future__ import annotations

import numpy as np

from onnxsat.data.metrics import class_ranks
from onnxsat.errors import DataError
from onnxsat.metrics.base import (
    Labels,
    Measure,
    Metric,
    dominant_answer,
    per_sample_shape,
    register,
    shape_text,
    unit_interval,
)

TOP_K = 5


def class_scores(output: np.ndarray) -> np.ndarray | None:
    """``[N, classes]`` from an output whose samples are one vector (``[N, C]``, ``[N, C, 1, 1]``), else None."""
    shape = per_sample_shape(output)
    wide = [d for d in shape if d != 1]
    if len(wide) != 1 or wide[0] < 2:
        return None
    return output.reshape(len(output), -1)


def _fits_classes(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    if class_scores(reference) is None:
        shape = shape_text(per_sample_shape(reference))
        return f"needs one score per class per sample ([N, classes]); per sample it is {shape}"
    return None


def _targets(reference: np.ndarray, labels: Labels) -> np.ndarray:
    scores = class_scores(reference)
    assert scores is not None
    if labels is None:
        return np.argmax(scores, axis=1)
    if len(labels) != len(scores):
        raise DataError(f"{len(labels)} labels but {len(scores)} samples")
    if len(labels) and labels.max() >= scores.shape[1]:
        raise DataError(f"labels go up to {labels.max()} but the model has {scores.shape[1]} classes")
    return labels.astype(np.int64)


def _top_k(reference: np.ndarray, candidate: np.ndarray, labels: Labels, k: int) -> Measure:
    scores = class_scores(candidate)
    assert scores is not None
    ranks = class_ranks(scores, _targets(reference, labels))
    right = {1: (ranks == 0).astype(np.float64), TOP_K: (ranks < min(TOP_K, scores.shape[1])).astype(np.float64)}
    top1, top5 = float(np.mean(right[1])), float(np.mean(right[TOP_K]))
    return Measure(top1 if k == 1 else top5, {"top1": top1, "top5": top5}, right[k])


def top1(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    return _top_k(reference, candidate, labels, 1)


def top5(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    return _top_k(reference, candidate, labels, TOP_K)


def decision_threshold(reference: np.ndarray) -> float:
    """0.5 for probabilities (every value in [0, 1]), else 0 (logits): read from the original alone, so
    every candidate is cut at the same place."""
    return 0.5 if unit_interval(np.asarray(reference, dtype=np.float64)) else 0.0


def _fits_decision(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    if int(np.prod(per_sample_shape(reference), dtype=np.int64)) != 1:
        return f"needs one value per sample; per sample it is {shape_text(per_sample_shape(reference))}"
    return None


def decision_labels(labels: np.ndarray) -> bool:
    """Whether ``labels`` are decisions, 0 and 1 only: the labels ``binary`` scores against."""
    return bool(np.isin(labels, (0, 1)).all())


def binary(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """Share of samples whose decision (value at or above the threshold) is the original's; with labels
    (0 or 1), share of right decisions."""
    if labels is not None and not decision_labels(labels):
        other = labels[~np.isin(labels, (0, 1))][0]
        raise DataError(f"binary scores against labels 0 and 1; the data's labels hold {other}")
    threshold = decision_threshold(reference)
    decided = candidate.reshape(len(candidate)) >= threshold
    truth = reference.reshape(len(reference)) >= threshold if labels is None else labels.astype(bool)
    positive = truth.sum()
    both = (decided & truth).sum()
    recall = float(both / positive) if positive else 1.0
    right = (decided == truth).astype(np.float64)
    return Measure(float(np.mean(right)), {"threshold": threshold, "recall": recall}, right)


def tags(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """Per sample, the share of its yes/no decisions (one per value, cut as ``binary`` cuts one) that are the
    labels' (``[N, K]`` booleans), or the original's without labels; averaged over the samples."""
    threshold = decision_threshold(reference)
    decided = candidate.reshape(len(candidate), -1) >= threshold
    truth = reference.reshape(len(reference), -1) >= threshold if labels is None else labels.astype(bool)
    if truth.shape != decided.shape:
        raise DataError(f"the labels hold {truth.shape[1]} yes/no values per sample, the output {decided.shape[1]}")
    right = decided == truth
    rows = float(np.mean(right.all(axis=1))) if len(right) else 1.0
    per_sample = right.mean(axis=1)
    return Measure(float(np.mean(per_sample)), {"threshold": threshold, "rows all right": rows}, per_sample)


def _fits_tags(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    shape = per_sample_shape(reference)
    if not np.issubdtype(reference.dtype, np.floating) or int(np.prod(shape, dtype=np.int64)) < 2:
        return f"needs several float values per sample; per sample it is {shape_text(shape)} {reference.dtype}"
    return None


def predicted_class(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """Share of samples whose class (the output's one integer per sample, as a classifier that ends in
    ArgMax or a scikit-learn label output gives it) is the label's, or the original's without labels."""
    got = candidate.reshape(len(candidate))
    if labels is None:
        right = (got == reference.reshape(len(reference))).astype(np.float64)
        return Measure(float(np.mean(right)), per_sample=right)
    if len(labels) != len(got):
        raise DataError(f"{len(labels)} labels but {len(got)} samples")
    right = (got == labels).astype(np.float64)
    return Measure(float(np.mean(right)), per_sample=right)


def _fits_predicted_class(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    shape = per_sample_shape(reference)
    if np.issubdtype(reference.dtype, np.floating) or int(np.prod(shape, dtype=np.int64)) != 1:
        return f"needs one integer per sample; per sample it is {shape_text(shape)} {reference.dtype}"
    return None


def one_label(reference: np.ndarray) -> str | None:
    """The class label the original gives (nearly) every sample, when it does."""
    return dominant_answer(reference.reshape(len(reference)).tolist(), "class {}".format)


def one_class(reference: np.ndarray) -> str | None:
    """The class the original gives (nearly) every sample, when it does (see ``Metric.blind_spot``)."""
    scores = class_scores(reference)
    return None if scores is None else dominant_answer(np.argmax(scores, axis=1).tolist(), "class {}".format)


def one_decision(reference: np.ndarray) -> str | None:
    """The decision the original takes for (nearly) every sample, when it does."""
    decided = reference.reshape(len(reference)) >= decision_threshold(reference)
    return dominant_answer(["yes" if d else "no" for d in decided], str)


register(
    Metric(
        "top1",
        "share of samples whose top class is the label's (or the original's)",
        top1,
        _fits_classes,
        uses_labels=True,
        blind_spot=one_class,
    )
)
register(
    Metric(
        "top5",
        "share of samples whose label (or the original's top class) is among the top 5",
        top5,
        _fits_classes,
        uses_labels=True,
        blind_spot=one_class,
    )
)
register(
    Metric(
        "binary",
        "one value per sample: share of decisions (at 0.5 for probabilities, 0 for logits) unchanged",
        binary,
        _fits_decision,
        uses_labels=True,
        blind_spot=one_decision,
    )
)
register(
    Metric(
        "tags",
        "several yes/no values per sample (multi-label classes, bits): share of decisions (at 0.5 for probabilities, "
        "0 for logits) that are the labels' rows (or the original's)",
        tags,
        _fits_tags,
        uses_tags=True,
    )
)
register(
    Metric(
        "label",
        "one class per sample (an integer): share of samples whose class is the label's (or the original's)",
        predicted_class,
        _fits_predicted_class,
        uses_labels=True,
        blind_spot=one_label,
    )
)
