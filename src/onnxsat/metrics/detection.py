"""Detector outputs (YOLO-style ``[N, 4+classes, anchors]`` or ``[N, anchors, 5+classes]``): boxes
after a confidence threshold and non-maximum suppression, matched to the original's.

What a detector's user sees is its boxes, not its raw scores: a candidate keeps a box when it finds one
of the same class overlapping the original's by IoU 0.5 or more. The score is F1 over every box of
every sample (2 x matched / (original's boxes + candidate's boxes)); two empty answers agree.

Layout: the short axis holds the box (centre x, centre y, width, height) then the class scores. With
the short axis first (``[4+C, A]``, YOLOv8 and later) every row after the box is a class; with it last
(``[A, 5+C]``, YOLOv5) the fifth is objectness, multiplied into the class scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxsat.metrics.base import (
    VARIED_SAMPLES,
    Labels,
    Measure,
    Metric,
    per_sample_shape,
    register,
    shape_text,
    unit_interval,
)

CONFIDENCE = 0.25
NMS_IOU = 0.45
MATCH_IOU = 0.5
MAX_CANDIDATES = 3000
"""Boxes above the confidence threshold kept for NMS, best first (as YOLO's own post-processing caps them)."""
MAX_DETECTIONS = 300


@dataclass(frozen=True)
class YoloLayout:
    channels_first: bool
    """``[4+C, A]`` (True) or ``[A, 5+C]`` (False)."""

    @property
    def objectness(self) -> bool:
        return not self.channels_first

    def channels(self, sample: np.ndarray) -> np.ndarray:
        """One sample as ``[channels, anchors]``."""
        return sample if self.channels_first else sample.T


def yolo_layout(output: np.ndarray) -> YoloLayout | None:
    """The layout of a YOLO-style output, or None when its samples are not ``[K, A]`` with K >= 5 the
    short axis and every class score (and objectness) in [0, 1]."""
    shape = per_sample_shape(output)
    if len(shape) != 2 or min(shape) < 5 or shape[0] == shape[1]:
        return None
    layout = YoloLayout(channels_first=shape[0] < shape[1])
    channels = np.moveaxis(output, 1, 2) if not layout.channels_first else output
    return layout if unit_interval(np.asarray(channels[:, 4:, :], dtype=np.float64)) else None


def boxes_in_pixels(output: np.ndarray, layout: YoloLayout) -> bool:
    """Whether the box rows hold pixel coordinates (some above 1): what sets a detector apart from
    probability maps or softmaxed sequences that happen to have five or more rows."""
    channels = np.moveaxis(output, 1, 2) if not layout.channels_first else output
    boxes = np.asarray(channels[:, :4, :], dtype=np.float64)
    finite = boxes[np.isfinite(boxes)]
    return finite.size > 0 and float(finite.max()) > 1.0


def detections(sample: np.ndarray, layout: YoloLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes ``[M, 4]`` as x1, y1, x2, y2; scores ``[M]``; classes ``[M]``) after the threshold and
    class-wise NMS, best first."""
    channels = np.asarray(layout.channels(sample), dtype=np.float64)
    centre_x, centre_y, width, height = channels[:4]
    classes = channels[5:] * channels[4] if layout.objectness else channels[4:]
    best = np.argmax(classes, axis=0)
    score = classes[best, np.arange(classes.shape[1])]
    keep = np.flatnonzero(np.nan_to_num(score, nan=-1.0) >= CONFIDENCE)
    keep = keep[np.argsort(-score[keep], kind="stable")][:MAX_CANDIDATES]
    boxes = np.stack(
        [centre_x - width / 2, centre_y - height / 2, centre_x + width / 2, centre_y + height / 2], axis=1
    )[keep]
    kept = _nms(boxes, best[keep])
    return boxes[kept], score[keep][kept], best[keep][kept]


def iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one x1y1x2y2 box with each of ``others``."""
    width = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = width * height
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _nms(boxes: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Greedy NMS within each class over boxes already sorted best first: the indices kept."""
    kept: list[int] = []
    suppressed = np.zeros(len(boxes), dtype=bool)
    for index in range(len(boxes)):
        if suppressed[index]:
            continue
        kept.append(index)
        if len(kept) == MAX_DETECTIONS:
            break
        rest = np.arange(index + 1, len(boxes))
        same = rest[classes[rest] == classes[index]]
        suppressed[same[iou(boxes[index], boxes[same]) > NMS_IOU]] = True
    return np.array(kept, dtype=np.int64)


def matched(reference: tuple[np.ndarray, ...], candidate: tuple[np.ndarray, ...]) -> int:
    """How many of the candidate's boxes (best first) find an unmatched original box of the same class
    at IoU >= 0.5."""
    ref_boxes, _, ref_classes = reference
    boxes, _, classes = candidate
    free = np.ones(len(ref_boxes), dtype=bool)
    count = 0
    for box, cls in zip(boxes, classes, strict=True):
        options = np.flatnonzero(free & (ref_classes == cls))
        if not len(options):
            continue
        overlaps = iou(box, ref_boxes[options])
        best = int(np.argmax(overlaps))
        if overlaps[best] >= MATCH_IOU:
            free[options[best]] = False
            count += 1
    return count


def _fits(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    if yolo_layout(reference) is None:
        shape = shape_text(per_sample_shape(reference))
        wanted = "YOLO-style [N, 4+classes, anchors] or [N, anchors, 5+classes] scores in [0, 1]"
        return f"needs {wanted}; per sample it is {shape}"
    return None


def detection(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    del labels  # class labels per image do not say where the boxes are: agreement with the original
    layout = yolo_layout(reference)
    assert layout is not None
    total_ref = total_cand = hits = 0
    for ref_sample, cand_sample in zip(reference, candidate, strict=True):
        ref, cand = detections(ref_sample, layout), detections(cand_sample, layout)
        total_ref, total_cand = total_ref + len(ref[0]), total_cand + len(cand[0])
        hits += matched(ref, cand)
    f1 = 1.0 if total_ref + total_cand == 0 else 2 * hits / (total_ref + total_cand)
    precision = hits / total_cand if total_cand else 1.0
    recall = hits / total_ref if total_ref else 1.0
    return Measure(f1, {"precision": precision, "recall": recall, "boxes": float(total_ref)})


def no_boxes(reference: np.ndarray) -> str | None:
    """When the original finds no box in any sample: a candidate that never finds one agrees in full."""
    layout = yolo_layout(reference)
    if layout is None or len(reference) < VARIED_SAMPLES:
        return None
    if any(len(detections(sample, layout)[0]) for sample in reference):
        return None
    return f"finds no box in any of the {len(reference)} samples"


register(
    Metric(
        "detection",
        "YOLO-style boxes after threshold 0.25 and NMS, matched at IoU 0.5 with the same class: F1",
        detection,
        _fits,
        blind_spot=no_boxes,
    )
)
