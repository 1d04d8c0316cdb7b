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

import ast
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

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
    classes: int | None = None
    """How many rows after the box are class scores, when the exporter says so (:func:`exported_detector`);
    the rows after them (an oriented box's angle, mask coefficients, keypoints) are no scores. None: all."""
    table: bool = False
    """A table of the boxes an export's own NMS kept, ``[K, 6+]``: x1, y1, x2, y2, score, class (then
    mask coefficients or keypoints), as Ultralytics writes with NMS inside and YOLOv10 always."""

    @property
    def objectness(self) -> bool:
        return not self.channels_first

    def channels(self, sample: np.ndarray) -> np.ndarray:
        """One sample as ``[channels, anchors]``."""
        return sample if self.channels_first else sample.T

    def scores(self, channels: np.ndarray) -> np.ndarray:
        """The class-score rows (and objectness) of ``channels`` (``[..., channels, anchors]``)."""
        return channels[..., 4:, :] if self.classes is None else channels[..., 4 : 4 + self.classes, :]


def yolo_layout(output: np.ndarray, classes: int | None = None, table: bool = False) -> YoloLayout | None:
    """The layout of a YOLO-style output, or None when its samples are not ``[K, A]`` with K >= 5 the
    short axis and every class score (and objectness) in [0, 1]. ``classes``: the exporter's class count;
    the output is then ``[4+classes+extra, A]``. ``table``: kept boxes, ``[K, 6+]`` with scores in [0, 1]."""
    shape = per_sample_shape(output)
    if table:
        fits = len(shape) == 2 and shape[1] >= 6 and unit_interval(np.asarray(output[..., 4], dtype=np.float64))
        return YoloLayout(channels_first=False, table=True) if fits else None
    if len(shape) != 2 or min(shape) < 5 or shape[0] == shape[1]:
        return None
    layout = YoloLayout(channels_first=shape[0] < shape[1], classes=classes)
    if classes is not None and not (layout.channels_first and shape[0] >= 4 + classes):
        return None
    channels = np.moveaxis(output, 1, 2) if not layout.channels_first else output
    return layout if unit_interval(np.asarray(layout.scores(channels), dtype=np.float64)) else None


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
    return kept_anchors(sample, layout)[:3]


def kept_anchors(sample: np.ndarray, layout: YoloLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`detections`, and the anchor (or table row) each kept box came from: where its mask coefficients
    are."""
    if layout.table:  # NMS done by the model: the rows above the threshold, best first
        rows = np.asarray(sample, dtype=np.float64)
        keep = np.flatnonzero(np.nan_to_num(rows[:, 4], nan=-1.0) >= CONFIDENCE)
        keep = keep[np.argsort(-rows[keep, 4], kind="stable")]
        return rows[keep, :4], rows[keep, 4], np.rint(rows[keep, 5]).astype(np.int64), keep
    channels = np.asarray(layout.channels(sample), dtype=np.float64)
    centre_x, centre_y, width, height = channels[:4]
    classes = channels[5:] * channels[4] if layout.objectness else layout.scores(channels)
    best = np.argmax(classes, axis=0)
    score = classes[best, np.arange(classes.shape[1])]
    keep = np.flatnonzero(np.nan_to_num(score, nan=-1.0) >= CONFIDENCE)
    keep = keep[np.argsort(-score[keep], kind="stable")][:MAX_CANDIDATES]
    boxes = np.stack(
        [centre_x - width / 2, centre_y - height / 2, centre_x + width / 2, centre_y + height / 2], axis=1
    )[keep]
    kept = _nms(boxes, best[keep])
    return boxes[kept], score[keep][kept], best[keep][kept], keep[kept]


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
    return len(pairs(reference, candidate))


def pairs(reference: tuple[np.ndarray, ...], candidate: tuple[np.ndarray, ...]) -> list[tuple[int, int]]:
    """(original's index, candidate's index) of each match :func:`matched` counts: each candidate box in its
    order (best first) takes the unmatched original box of its class it overlaps most, at IoU >= 0.5."""
    ref_boxes, _, ref_classes = reference
    boxes, _, classes = candidate
    free = np.ones(len(ref_boxes), dtype=bool)
    found = []
    for index, (box, cls) in enumerate(zip(boxes, classes, strict=True)):
        options = np.flatnonzero(free & (ref_classes == cls))
        if not len(options):
            continue
        overlaps = iou(box, ref_boxes[options])
        best = int(np.argmax(overlaps))
        if overlaps[best] >= MATCH_IOU:
            free[options[best]] = False
            found.append((int(options[best]), index))
    return found


def _fits(reference: np.ndarray, batch_axis: int, classes: int | None = None, table: bool = False) -> str | None:
    del batch_axis
    if yolo_layout(reference, classes, table) is None:
        shape = shape_text(per_sample_shape(reference))
        wanted = "YOLO-style [N, 4+classes, anchors] or [N, anchors, 5+classes] scores in [0, 1]"
        if classes is not None:
            wanted = f"[N, 4+{classes}(+more), anchors] with {classes} class-score rows in [0, 1] (the model's names)"
        if table:
            wanted = "a table of kept boxes [N, K, 6+] (x1, y1, x2, y2, score in [0, 1], class)"
        return f"needs {wanted}; per sample it is {shape}"
    return None


def matched_f1(hits: int, total_ref: int, total_cand: int) -> tuple[float, dict[str, float]]:
    """F1 of ``hits`` matched boxes among the original's ``total_ref`` and the candidate's ``total_cand`` (two
    empty answers agree), with precision, recall and the original's count beside: every detector metric's score."""
    f1 = 1.0 if total_ref + total_cand == 0 else 2 * hits / (total_ref + total_cand)
    details = {
        "precision": hits / total_cand if total_cand else 1.0,
        "recall": hits / total_ref if total_ref else 1.0,
        "boxes": float(total_ref),
    }
    return f1, details


def detection(
    reference: np.ndarray, candidate: np.ndarray, labels: Labels, classes: int | None = None, table: bool = False
) -> Measure:
    del labels  # class labels per image do not say where the boxes are: agreement with the original
    layout = yolo_layout(reference, classes, table)
    assert layout is not None
    total_ref = total_cand = hits = 0
    for ref_sample, cand_sample in zip(reference, candidate, strict=True):
        ref, cand = detections(ref_sample, layout), detections(cand_sample, layout)
        total_ref, total_cand = total_ref + len(ref[0]), total_cand + len(cand[0])
        hits += matched(ref, cand)
    return Measure(*matched_f1(hits, total_ref, total_cand))


def no_boxes(reference: np.ndarray, classes: int | None = None, table: bool = False) -> str | None:
    """When the original finds no box in any sample: a candidate that never finds one agrees in full."""
    layout = yolo_layout(reference, classes, table)
    if layout is None or len(reference) < VARIED_SAMPLES:
        return None
    if any(len(detections(sample, layout)[0]) for sample in reference):
        return None
    return f"finds no box in any of the {len(reference)} samples"


DETECTION = register(
    Metric(
        "detection",
        "YOLO-style boxes after threshold 0.25 and NMS, matched at IoU 0.5 with the same class: F1",
        detection,
        _fits,
        blind_spot=no_boxes,
    )
)

ULTRALYTICS_TASKS = frozenset({"detect", "segment", "pose", "obb"})


def ultralytics_export(metadata: Mapping[str, str]) -> tuple[str, dict | list, dict] | None:
    """(task, class names, export arguments) an Ultralytics export's metadata gives, or None for other models."""
    task = metadata.get("task")
    if task not in ULTRALYTICS_TASKS:
        return None
    try:
        names = ast.literal_eval(metadata.get("names", ""))
        args = ast.literal_eval(metadata.get("args", "{}"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(names, dict | list) or not names:
        return None
    return task, names, args if isinstance(args, dict) else {}


def exported_detector(metadata: Mapping[str, str]) -> Metric | None:
    """``detection`` for the boxes of an Ultralytics export, from the metadata it writes (``task``,
    ``names``, ``args``). Its raw ``[4+classes+extra, anchors]`` has rows after the class scores that are
    no scores: an oriented-box model's angle row (0.8-0.9 rad, inside [0, 1]) was read as an 81st class,
    the original "found" 75-80 boxes per image on it, and every quantized model lost them all. With NMS
    inside, its output is a table of kept boxes, which had been scored as a dense map. None for other
    models, and for oriented boxes with NMS inside (their table holds rotated boxes)."""
    export = ultralytics_export(metadata)
    if export is None:
        return None
    task, names, args = export
    if args.get("nms"):
        if task == "obb":
            return None
        layout: dict[str, Any] = {"table": True}
        what = "the table of boxes its own NMS kept"
    else:
        layout, what = {"classes": len(names)}, f"the {len(names)} class rows its names give"
    return replace(
        DETECTION,
        summary=f"{DETECTION.summary}; an Ultralytics {task} export: {what}",
        measure=partial(detection, **layout),
        fits=partial(_fits, **layout),
        blind_spot=partial(no_boxes, **layout),
    )
