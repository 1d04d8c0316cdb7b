"""Dense maps (segmentation, text detection's probability maps ``[N, C, H, W]`` or ``[N, H, W]``): IoU.

A text detector's boxes come from its thresholded probability map, a segmenter's masks from the best
class per pixel; the score is the IoU of those regions with the original's, per sample, averaged (two
empty regions agree). One channel is cut at 0.5 for probabilities (0 for logits); several channels
take the best class per pixel and average the IoU over the classes either map shows. The cosine of the
raw maps is a detail beside it.
"""

from __future__ import annotations

import numpy as np

from onnxsat.metrics.base import Labels, Measure, Metric, per_sample_shape, register, shape_text
from onnxsat.metrics.classification import decision_threshold
from onnxsat.metrics.similarity import cosine


def map_shape(output: np.ndarray) -> tuple[int, int, int] | None:
    """(channels, height, width) when each sample is ``[C, H, W]`` or ``[H, W]`` with H and W above 1."""
    shape = per_sample_shape(output)
    if len(shape) == 2:
        shape = (1, *shape)
    if len(shape) != 3 or shape[1] < 2 or shape[2] < 2:
        return None
    return shape[0], shape[1], shape[2]


def _fits(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    if map_shape(reference) is None:
        return (
            f"needs [N, channels, H, W] or [N, H, W] maps; per sample it is {shape_text(per_sample_shape(reference))}"
        )
    return None


def _regions(output: np.ndarray, channels: int, threshold: float) -> np.ndarray:
    """Per sample, the label of every pixel: 1/0 above/below the threshold, or the best channel."""
    if channels == 1:
        return (output.reshape(len(output), -1) >= threshold).astype(np.int64)
    return np.argmax(output.reshape(len(output), channels, -1), axis=1)


def _iou(reference: np.ndarray, candidate: np.ndarray, classes: range) -> float:
    scores = []
    for cls in classes:
        a, b = reference == cls, candidate == cls
        union = np.count_nonzero(a | b)
        if union:
            scores.append(np.count_nonzero(a & b) / union)
    return float(np.mean(scores)) if scores else 1.0


def dense_map(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    del labels
    shape = map_shape(reference)
    assert shape is not None
    channels = shape[0]
    threshold = decision_threshold(reference)
    ref_regions, regions = _regions(reference, channels, threshold), _regions(candidate, channels, threshold)
    classes = range(1, 2) if channels == 1 else range(channels)
    ious = [_iou(a, b, classes) for a, b in zip(ref_regions, regions, strict=True)]
    details = {"cosine": cosine(reference, candidate, None).value, "min": min(ious)}
    return Measure(float(np.mean(ious)), details, np.asarray(ious, np.float64))


register(
    Metric(
        "map",
        "dense maps: IoU of thresholded (or best-class) regions with the original's, per sample",
        dense_map,
        _fits,
    )
)
