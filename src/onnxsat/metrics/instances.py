"""Detectors whose post-processing is inside the model (torchvision's Faster, Mask and Keypoint R-CNN,
RetinaNet, SSD, FCOS): per image, K kept detections spread over several outputs, scored together as one
answer.

Such a model returns ``boxes`` ``[K, 4]`` (x1, y1, x2, y2), ``scores`` ``[K]`` (best first) and ``labels``
``[K]``, with ``masks`` ``[K, 1, H, W]`` or ``keypoints`` ``[K, J, 3]`` (and ``keypoints_scores``) beside them
for Mask and Keypoint R-CNN. Each output alone means little: the scores are no class scores (``top1`` read
them as "is the first box still the best"), the keypoints no class map, and the i-th box of the candidate
need not be the original's i-th (two boxes of close scores swap). A trained detector also keeps a different K
per image, so its outputs are per-sample arrays of different sizes, which no output-by-output metric reads.

So they are scored as the YOLO-style ``detection`` scores boxes: the candidate's detections scoring
``SCORE`` or more are matched to the original's (same label, box IoU >= 0.5, best first), and the score is
F1 over every detection of every image (two empty answers agree). A Mask R-CNN's match also needs the two
masks, cut at 0.5, to overlap by IoU 0.5 or more (COCO's loosest mask threshold); a Keypoint R-CNN's needs
the keypoints' OKS to be 0.5 or more (COCO's keypoint similarity, with its 17 person sigmas, the box's area as
the object's). Keypoint scores are carried along, not scored: the positions are the answer.

``SCORE`` is 0.5, not YOLO's 0.25: these models keep every box down to 0.05 (torchvision's
``box_score_thresh``), up to 100 per image, and the ones a user shows or counts are those above a
threshold, 0.5 in Detectron2's demo and the usual cut for torchvision's. Below it the scores of an R-CNN's
many weak boxes shuffle under any change, and an F1 over them would spend the budget on noise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from onnxsat.metrics.base import VARIED_SAMPLES, Labels, Measure, Metric, shape_text
from onnxsat.metrics.detection import DETECTION, MATCH_IOU, iou, matched_f1, pairs

SCORE = 0.5
"""Detections scoring this much or more are the model's answer (see the module doc)."""
MASK_CUT = 0.5
"""A mask's probabilities are cut here into the instance's pixels (torchvision's own examples cut there)."""
MASK_IOU = 0.5
OKS = 0.5
PERSON_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87,
                          0.89, 0.89]) / 10  # fmt: skip
"""COCO's per-keypoint falloff for its 17 person keypoints (nose, eyes, ears, shoulders, ... ankles); other
keypoint counts get their mean."""

ROLES = ("boxes", "scores", "labels", "masks", "keypoints", "keypoints_scores")


def detector_role(name: str) -> str | None:
    """The part of a detector's answer an output's name says it holds, or None."""
    lowered = name.lower()
    words = set(re.split(r"[^a-z0-9]+", lowered))
    if "keypoint" in lowered and "score" in lowered:
        return "keypoints_scores"
    if "keypoint" in lowered:
        return "keypoints"
    if "mask" in lowered:
        return "masks"
    if "box" in lowered:
        return "boxes"
    if "score" in lowered or words & {"conf", "confidence", "confidences"}:
        return "scores"
    if "label" in lowered or "class" in lowered:
        return "labels"
    return None


def _samples(output: np.ndarray) -> list[np.ndarray]:
    """Each sample's array (an output of different sizes per sample is an object array of them)."""
    return [np.asarray(sample) for sample in output]


def _fits_role(role: str, samples: list[np.ndarray], counts: list[int] | None) -> bool:
    """Whether every sample's array has the shape ``role`` takes (and, given ``counts``, that many rows)."""
    shapes = {
        "boxes": lambda a: a.ndim == 2 and a.shape[1] == 4,
        "scores": lambda a: a.ndim == 1,
        "labels": lambda a: a.ndim == 1,
        "masks": lambda a: a.ndim == 3 or (a.ndim == 4 and a.shape[1] == 1),
        "keypoints": lambda a: a.ndim == 3 and a.shape[2] in (2, 3),
        "keypoints_scores": lambda a: a.ndim == 2,
    }
    if not samples or not all(shapes[role](a) for a in samples):
        return False
    if counts is not None and [len(a) for a in samples] != counts:
        return False
    numeric = all(np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_ for a in samples)
    if role == "labels":
        return numeric and all(not a.size or np.all(np.isfinite(a) & (a == np.round(a))) for a in samples)
    if not numeric or role == "masks":
        return numeric
    if not all(np.issubdtype(a.dtype, np.floating) for a in samples):
        return False
    if role == "scores":
        values = np.concatenate([a.ravel() for a in samples]).astype(np.float64)
        finite = values[np.isfinite(values)]
        return not finite.size or (finite.min() >= 0.0 and finite.max() <= 1.0)
    if role == "boxes":  # corners, x2 >= x1 and y2 >= y1 (a centre and a size would not hold to that)
        rows = np.concatenate([a.reshape(-1, 4) for a in samples]).astype(np.float64)
        rows = rows[np.all(np.isfinite(rows), axis=1)]
        return bool(np.all(rows[:, 2] >= rows[:, 0]) and np.all(rows[:, 3] >= rows[:, 1]))
    return True


def find(outputs: Mapping[str, np.ndarray], names: Sequence[str], need_scores: bool = True) -> Metric | None:
    """``detection`` over a detector's answer among the outputs ``names`` (see the module doc), or None when
    they hold none: exactly one output named like boxes, ``[K, 4]`` corners per sample, and (unless not
    ``need_scores``) one named like scores, ``[K]`` in [0, 1]; labels, masks, keypoints and their scores
    join when one output is named like each and has K rows in every sample."""
    by_role: dict[str, list[str]] = {}
    for name in names:
        role = detector_role(name)
        if role is not None:
            by_role.setdefault(role, []).append(name)
    boxes = by_role.get("boxes", [])
    if len(boxes) != 1 or not _fits_role("boxes", _samples(outputs[boxes[0]]), None):
        return None
    counts = [len(a) for a in _samples(outputs[boxes[0]])]
    joins = [("boxes", boxes[0])]
    for role in ROLES[1:]:
        found = [name for name in by_role.get(role, []) if _fits_role(role, _samples(outputs[name]), counts)]
        if len(found) == 1:
            joins.append((role, found[0]))
    roles = dict(joins)
    if need_scores and "scores" not in roles:
        return None
    return replace(
        DETECTION,
        summary=_summary(roles),
        measure=measure,
        fits=fits,
        blind_spot=no_detections,
        joins=tuple(joins),
    )


def _summary(roles: Mapping[str, str]) -> str:
    kept = f"scoring {SCORE:g} or more" if "scores" in roles else "(every one: no scores)"
    same = "the same label" if "labels" in roles else "any label (no labels)"
    extra = "".join(
        [
            f", masks cut at {MASK_CUT:g} overlapping by IoU {MASK_IOU:g}" if "masks" in roles else "",
            f", keypoints at OKS {OKS:g}" if "keypoints" in roles else "",
        ]
    )
    return f"detections {kept} matched to the original's at box IoU {MATCH_IOU:g} with {same}{extra}: F1"


def describe(metric: Metric, outputs: Mapping[str, np.ndarray]) -> str:
    """Why ``metric`` (from :func:`find`) scores these outputs: their parts and shapes, and how."""
    counts = sorted({len(a) for a in _samples(outputs[metric.joins[0][1]])})
    parts = []
    for _, name in metric.joins:
        shape = next(iter(_samples(outputs[name]))).shape
        parts.append(
            f"{name} " + (shape_text(shape) if len(counts) == 1 else "[K" + "".join(f", {d}" for d in shape[1:]) + "]")
        )
    per = "per sample" if len(counts) == 1 else f"per sample, K from {counts[0]} to {counts[-1]}"
    folded = [repr(name) for _, name in metric.joins[1:]]
    told = f"; {', '.join(folded)} scored with it" if folded else ""
    return f"a detector's answer per image ({', '.join(parts)} {per}{told}): {metric.summary}"


@dataclass(frozen=True)
class _Kept:
    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    masks: np.ndarray | None
    keypoints: np.ndarray | None

    def __len__(self) -> int:
        return len(self.boxes)


def _kept(sample: Mapping[str, np.ndarray]) -> _Kept:
    """One image's detections scoring ``SCORE`` or more (all without scores), best first."""
    boxes = np.asarray(sample["boxes"], dtype=np.float64).reshape(-1, 4)
    count = len(boxes)
    scores = np.asarray(sample.get("scores", np.ones(count)), dtype=np.float64).reshape(count)
    labels = np.rint(np.asarray(sample.get("labels", np.zeros(count)), dtype=np.float64)).astype(np.int64)
    keep = np.flatnonzero(np.nan_to_num(scores, nan=-1.0) >= (SCORE if "scores" in sample else -np.inf))
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    masks = sample.get("masks")
    keypoints = sample.get("keypoints")
    return _Kept(
        boxes[keep],
        scores[keep],
        labels.reshape(count)[keep],
        None if masks is None else np.asarray(masks).reshape(count, -1)[keep] >= MASK_CUT,
        None if keypoints is None else np.asarray(keypoints, dtype=np.float64)[keep],
    )


def mask_iou(one: np.ndarray, other: np.ndarray) -> float:
    union = np.count_nonzero(one | other)
    return 1.0 if union == 0 else np.count_nonzero(one & other) / union


def oks(reference: np.ndarray, candidate: np.ndarray, box: np.ndarray) -> float:
    """COCO's object keypoint similarity of ``candidate`` ``[J, 2+]`` against ``reference`` (its keypoints
    with a visibility above 0, when it gives one), the box's area standing for the object's."""
    sigmas = PERSON_SIGMAS if len(reference) == len(PERSON_SIGMAS) else np.full(len(reference), PERSON_SIGMAS.mean())
    visible = reference[:, 2] > 0 if reference.shape[1] > 2 else np.ones(len(reference), dtype=bool)
    if not np.any(visible):
        return 1.0
    area = max(float((box[2] - box[0]) * (box[3] - box[1])), np.finfo(np.float64).eps)
    squared = np.sum((reference[:, :2] - candidate[:, :2]) ** 2, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        similarity = np.exp(-squared / (2 * area * (2 * sigmas) ** 2))
    return float(np.mean(np.nan_to_num(similarity[visible], nan=0.0)))


def measure(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """F1 of the candidate's kept detections against the original's over all images (see the module doc);
    precision, recall, the original's count, and the mean box IoU (mask IoU, OKS) of box-matched pairs."""
    del labels  # class labels per image do not say where the objects are: agreement with the original
    total_ref = total_cand = hits = 0
    box_ious: list[float] = []
    mask_ious: list[float] = []
    similarities: list[float] = []
    for ref_sample, cand_sample in zip(reference, candidate, strict=True):
        ref, cand = _kept(ref_sample), _kept(cand_sample)
        total_ref, total_cand = total_ref + len(ref), total_cand + len(cand)
        for i, j in pairs((ref.boxes, ref.scores, ref.labels), (cand.boxes, cand.scores, cand.labels)):
            box_ious.append(float(iou(ref.boxes[i], cand.boxes[j : j + 1])[0]))
            kept = True
            if ref.masks is not None and cand.masks is not None:
                mask_ious.append(mask_iou(ref.masks[i], cand.masks[j]))
                kept = kept and mask_ious[-1] >= MASK_IOU
            if ref.keypoints is not None and cand.keypoints is not None:
                similarities.append(oks(ref.keypoints[i], cand.keypoints[j], ref.boxes[i]))
                kept = kept and similarities[-1] >= OKS
            hits += kept
    f1, details = matched_f1(hits, total_ref, total_cand)
    for key, values in (("box_iou", box_ious), ("mask_iou", mask_ious), ("oks", similarities)):
        if values:
            details[key] = float(np.mean(values))
    return Measure(f1, details)


def fits(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    if reference.dtype == object and len(reference) and isinstance(reference[0], Mapping):
        return None
    return "needs a detector's boxes [K, 4] with their scores [K] (and labels, masks, keypoints) as outputs"


def no_detections(reference: np.ndarray) -> str | None:
    """When the original keeps no detection in any sample: a candidate that keeps none agrees in full."""
    if len(reference) < VARIED_SAMPLES or any(len(_kept(sample)) for sample in reference):
        return None
    return f"keeps no detection scoring {SCORE:g} or more in any of the {len(reference)} samples"
