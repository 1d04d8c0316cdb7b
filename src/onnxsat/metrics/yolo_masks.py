"""An Ultralytics segment export's masks: its boxes output ``[N, 4+classes+M, anchors]`` carries M mask
coefficients per anchor, and a second output ``[N, M, h, w]`` the M mask prototypes. A box's mask is the
sigmoid of its coefficients times the prototypes, cut to the box (the prototypes span the input at a
quarter of its size).

Scored alone, the prototypes are no class maps: ``map`` took the best of 32 prototypes per pixel, which
int8 rounding reshuffles while the masks built from them barely move (a YOLOv8 segmenter's prototypes agreed
at 48% where its masks did not change). So the prototypes are scored with the boxes, as one answer: a
candidate's box counts where ``detection`` matches it (same class, box IoU 0.5) and its mask overlaps the
original's by IoU 0.5 too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from onnxsat.metrics.base import Labels, Measure, Metric, per_sample_shape
from onnxsat.metrics.detection import (
    DETECTION,
    YoloLayout,
    kept_anchors,
    matched_f1,
    pairs,
    ultralytics_export,
    yolo_layout,
)
from onnxsat.metrics.instances import MASK_IOU, mask_iou

PROTOTYPE_STRIDE = 4
"""Input pixels per prototype pixel when the export does not give its input size (``imgsz``)."""


def exported_segmenter(
    metadata: Mapping[str, str], reference: Mapping[str, np.ndarray], names: Sequence[str]
) -> Metric | None:
    """``detection`` with masks over an Ultralytics segment export's boxes and prototypes among ``names``
    (joined: kept under the boxes' name), or None when the model is none or its outputs are not found."""
    export = ultralytics_export(metadata)
    if export is None or export[0] != "segment" or export[2].get("nms"):
        return None
    classes = len(export[1])
    boxes = [name for name in names if yolo_layout(reference[name], classes) is not None]
    if len(boxes) != 1:
        return None
    extra = per_sample_shape(reference[boxes[0]])[0] - 4 - classes
    prototypes = [
        name
        for name in names
        if len(shape := per_sample_shape(reference[name])) == 3 and shape[0] == extra and min(shape[1:]) > 1
    ]
    if extra < 1 or len(prototypes) != 1:
        return None
    stride = _stride(metadata.get("imgsz", ""), per_sample_shape(reference[prototypes[0]]))
    return replace(
        DETECTION,
        summary=f"{DETECTION.summary}, and masks at IoU {MASK_IOU} (an Ultralytics segment export's {extra} mask "
        "prototypes, scored with its boxes)",
        measure=partial(instance_masks, classes=classes, stride=stride),
        fits=_joined_fits,
        blind_spot=None,
        joins=(("boxes", boxes[0]), ("prototypes", prototypes[0])),
    )


def _joined_fits(reference: np.ndarray, batch_axis: int) -> str | None:
    """The joined parts were found to fit when the metric was made (:func:`exported_segmenter`)."""
    del reference, batch_axis
    return None


def _stride(imgsz: str, prototypes: tuple[int, ...]) -> float:
    """Input pixels per prototype pixel: the export's input height over the prototypes' height."""
    try:
        size = [int(v) for v in imgsz.strip("[]() ").split(",")]
    except ValueError:
        return float(PROTOTYPE_STRIDE)
    return size[0] / prototypes[1] if size and size[0] > 0 else float(PROTOTYPE_STRIDE)


def instance_masks(
    reference: np.ndarray, candidate: np.ndarray, labels: Labels, classes: int, stride: float
) -> Measure:
    """F1 over every box of every sample, a candidate's box counting where it matches an original box (class,
    IoU 0.5) and their masks overlap by IoU 0.5; the mean mask IoU of the matched boxes beside."""
    del labels  # class labels per image say nothing of where boxes and masks are
    layout = YoloLayout(channels_first=True, classes=classes)
    total_ref = total_cand = hits = 0
    overlaps: list[float] = []
    for ref_parts, cand_parts in zip(reference, candidate, strict=True):
        ref, cand = _masked(ref_parts, layout, classes, stride), _masked(cand_parts, layout, classes, stride)
        total_ref, total_cand = total_ref + len(ref[0]), total_cand + len(cand[0])
        for i, j in pairs(ref[:3], cand[:3]):
            overlap = mask_iou(ref[3][i], cand[3][j])
            overlaps.append(overlap)
            hits += overlap >= MASK_IOU
    f1, details = matched_f1(hits, total_ref, total_cand)
    details["mask_iou"] = float(np.mean(overlaps)) if overlaps else 1.0
    return Measure(float(f1), details)


def _masked(
    parts: Mapping[str, np.ndarray], layout: YoloLayout, classes: int, stride: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One sample's kept boxes, scores and classes, and each box's mask ``[K, h, w]`` (booleans)."""
    boxes, scores, kinds, anchors = kept_anchors(parts["boxes"], layout)
    prototypes = np.asarray(parts["prototypes"], dtype=np.float64)
    count, height, width = prototypes.shape
    coefficients = np.asarray(parts["boxes"], dtype=np.float64)[4 + classes : 4 + classes + count, anchors].T
    logits = (coefficients @ prototypes.reshape(count, -1)).reshape(len(anchors), height, width)
    rows, columns = np.arange(height)[:, None] + 0.5, np.arange(width)[None, :] + 0.5
    masks = np.empty(logits.shape, dtype=bool)
    for index, (x1, y1, x2, y2) in enumerate(boxes / stride):
        inside = (columns >= x1) & (columns < x2) & (rows >= y1) & (rows < y2)
        masks[index] = (logits[index] > 0) & inside  # sigmoid above 0.5
    return boxes, scores, kinds, masks
