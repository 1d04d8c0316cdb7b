"""A detector with its post-processing inside (torchvision's R-CNNs, RetinaNet, SSD, FCOS) answers each image
with K boxes, labels and scores (and masks or keypoints): auto scoring takes them together as detections
matched to the original's, with K fixed or different per image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models import DETECTION_ROWS, detector
from onnx import numpy_helper

from onnxsat.data.sources import Dataset
from onnxsat.errors import DataError, SettingsError
from onnxsat.metrics.budget import Budget
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.metrics.selection import choose


def answer(samples: int = 8, count: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """Fixed-K outputs: ``count`` boxes per image well apart, scores from 0.95 down by 0.1, labels 1-3."""
    rng = np.random.default_rng(seed)
    boxes = np.zeros((samples, count, 4), np.float32)
    x = rng.uniform(0, 20, (samples, count)) + 60 * np.arange(count)
    y = rng.uniform(0, 200, (samples, count))
    boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3] = x, y, x + 40, y + 30
    scores = np.tile(0.95 - 0.1 * np.arange(count, dtype=np.float32), (samples, 1))
    labels = rng.integers(1, 4, (samples, count)).astype(np.int64)
    return {"boxes": boxes, "labels": labels, "scores": scores}


def axes(outputs: dict[str, np.ndarray]) -> dict[str, int]:
    return dict.fromkeys(outputs, 0)


def test_boxes_labels_and_scores_are_scored_together_as_detections() -> None:
    reference = answer()
    budget = Budget(reference, axes(reference))
    assert list(budget.metrics) == ["boxes"] and budget.metrics["boxes"].name == "detection"
    why = budget.reasons["boxes"]
    assert why.startswith("auto: a detector's answer per image (boxes [6, 4], scores [6], labels [6] per sample")
    assert "scoring 0.5 or more" in why and "IoU 0.5 with the same label" in why
    assert budget.describe()["scores"] == {"metric": "detection", "why": "scored with 'boxes', as one answer"}
    assert budget.baseline.value == 1.0 and not budget.baseline.outputs[0].sampled

    swapped = {name: value.copy() for name, value in reference.items()}  # the i-th box need not stay the i-th
    for name in ("boxes", "labels"):
        swapped[name][:, [0, 1]] = swapped[name][:, [1, 0]]
    swapped["scores"][:, [0, 1]] = [0.85, 0.86]
    assert budget.score(swapped).drop == 0.0

    weak = {name: value.copy() for name, value in reference.items()}  # boxes scoring below 0.5 are no answer
    weak["boxes"][:, 5] += 100.0
    weak["scores"][:, 5] = 0.3
    assert budget.score(weak).drop == 0.0

    lost = {name: value.copy() for name, value in reference.items()}
    lost["scores"][:, 0] = 0.4  # the best box of every image falls under 0.5: 8 of 40 kept boxes lost
    assert budget.score(lost).value == pytest.approx(2 * 32 / (40 + 32))
    relabelled = {name: value.copy() for name, value in reference.items()}
    relabelled["labels"][:, 1] = 7
    moved = {name: value.copy() for name, value in reference.items()}
    moved["boxes"][:, 2, [0, 2]] += 30.0  # IoU 10/70 with where it was
    for changed in (relabelled, moved):
        score = budget.score(changed)
        assert score.value == pytest.approx(2 * 32 / 80) and score.worst.details["recall"] == pytest.approx(0.8)


def test_a_different_count_per_image_is_gathered_and_scored(tmp_path: Path) -> None:
    """Per image K from 0 to 12: the runner keeps each image's rows (the first image has one box, the
    second none, which must not pass for a batch axis or for an empty output)."""
    path = detector(tmp_path / "d.onnx", threshold=0.3)
    rng = np.random.default_rng(1)
    images = np.zeros((6, DETECTION_ROWS, 6), np.float32)
    x, y = rng.uniform(0, 200, (2, 6, DETECTION_ROWS))
    images[..., 0], images[..., 1], images[..., 2], images[..., 3] = x, y, x + 30, y + 20
    images[..., 4] = rng.uniform(0, 1, (6, DETECTION_ROWS))
    images[..., 5] = rng.integers(1, 4, (6, DETECTION_ROWS))
    images[0, 1:, 4] = 0.1
    images[1, :, 4] = 0.1
    model = onnx.load(path)
    scorer = ModelScorer(model, "image", Dataset(images, None, "image"))
    boxes = scorer.reference["boxes"]
    assert boxes.dtype == object and [len(b) for b in boxes] == [int(np.sum(i[:, 4] > 0.3)) for i in images]
    assert scorer.budget.describe()["boxes"]["metric"] == "detection"
    assert "K from 0 to" in scorer.budget.reasons["boxes"]
    assert scorer.baseline.value == 1.0 and scorer.judge(model)[1] == 0.0

    weights = numpy_helper.to_array(model.graph.initializer[0]).copy()
    weights[4, 4] = 0.8  # every score x 0.8: boxes cross 0.5 and 0.3, K changes per image
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, "w"))
    score, distortion = scorer.judge(model)
    scores = images[..., 4]
    kept = int(np.sum(scores >= 0.5))
    assert score.value == pytest.approx(2 * np.sum(scores * 0.8 >= 0.5) / (kept + np.sum(scores * 0.8 >= 0.5)))
    assert 0.0 < distortion < 1.0


def test_a_fixed_count_per_image_from_a_model(tmp_path: Path) -> None:
    images = np.random.default_rng(2).uniform(0, 1, (4, DETECTION_ROWS, 6)).astype(np.float32) * [100, 100, 0, 0, 1, 3]
    images[..., 2:4] = images[..., :2] + 25
    scorer = ModelScorer(onnx.load(detector(tmp_path / "d.onnx", threshold=None)), "image", Dataset(images, None, "x"))
    assert scorer.reference["boxes"].shape == (4, DETECTION_ROWS, 4)
    assert scorer.budget.reasons["boxes"].startswith("auto: a detector's answer per image (boxes [12, 4], scores [12]")


def test_masks_and_keypoints_must_agree_on_a_matched_detection() -> None:
    reference = answer()
    count = reference["boxes"].shape[1]
    masks = np.zeros((8, count, 1, 16, 16), np.float32)
    masks[..., 4:12, 4:12] = 0.9
    keypoints = np.concatenate([reference["boxes"].reshape(8, count, 2, 2), np.ones((8, count, 2, 1))], axis=-1)
    with_masks = {**reference, "masks": masks}
    budget = Budget(with_masks, axes(with_masks))
    assert "masks [6, 1, 16, 16]" in budget.reasons["boxes"] and "masks cut at 0.5" in budget.reasons["boxes"]
    shrunk = masks.copy()
    shrunk[:, 0, :, 4:12, 8:12] = 0.1  # half of each image's first mask: IoU 0.5, still the same instance
    assert budget.score({**with_masks, "masks": shrunk}).drop == 0.0
    shrunk[:, 0, :, 4:12, 7] = 0.1  # IoU 3/8
    score = budget.score({**with_masks, "masks": shrunk})
    assert score.value == pytest.approx(2 * 32 / 80) and score.worst.details["box_iou"] == 1.0

    with_keypoints = {**reference, "keypoints": keypoints, "keypoints_scores": np.ones((8, count, 2))}
    budget = Budget(with_keypoints, axes(with_keypoints))
    assert set(budget.folded) == {"scores", "labels", "keypoints", "keypoints_scores"}
    near, far = keypoints.copy(), keypoints.copy()
    near[:, 0, :, :2] += 2.0  # a few pixels on a 40x30 box: OKS above 0.5
    far[:, 0, :, :2] += 15.0
    assert budget.score({**with_keypoints, "keypoints": near}).drop == 0.0
    score = budget.score({**with_keypoints, "keypoints": far})
    assert score.value == pytest.approx(2 * 32 / 80) and score.worst.details["oks"] < 1.0


def test_metric_detection_given_and_held_out_data_score_the_same_way() -> None:
    reference = answer()
    given = Budget(reference, axes(reference), metric="detection")
    assert given.reasons["boxes"] == "given" and list(given.metrics) == ["boxes"]
    held = Budget(answer(seed=3), axes(reference), metric=given.metrics)
    assert held.reasons["boxes"] == "as on the search data" and set(held.folded) == {"scores", "labels"}
    assert held.baseline.value == 1.0
    alone = Budget({"boxes": reference["boxes"]}, {"boxes": 0}, metric="detection")  # every box counts
    assert alone.metrics["boxes"].joins == (("boxes", "boxes"),)
    moved = reference["boxes"].copy()
    moved[:, 5, [0, 2]] += 30.0  # the box scoring 0.45 counts here
    assert alone.score({"boxes": moved}).value == pytest.approx(2 * 40 / 96)
    with pytest.raises(SettingsError, match="does not fit output 'boxes'"):
        Budget({"boxes": reference["boxes"][:, 0]}, {"boxes": 0}, metric="detection")


def test_outputs_of_several_sizes_that_are_no_detectors_answer_are_refused() -> None:
    ragged = np.empty(3, dtype=object)
    ragged[:] = [np.zeros((n, 3), np.int64) for n in (1, 2, 3)]
    with pytest.raises(DataError, match=r"'selected' has a different shape per sample \(\[1, 3\], \[2, 3\], \["):
        Budget({"selected": ragged, "y": np.zeros((3, 2))}, {"selected": 0, "y": 0})
    centres = answer()  # x2 < x1: a centre and a size, not corners
    centres["boxes"][..., 2] = 5.0
    assert "boxes" in Budget(centres, axes(centres)).metrics and "scores" in Budget(centres, axes(centres)).metrics


def test_a_detectors_scores_or_keypoints_alone_are_no_class_scores_or_maps() -> None:
    scores = np.tile(np.linspace(0.95, 0.05, 12), (8, 1))  # with boxes: see above
    assert choose("scores", scores, 0).metric.name == "r2"
    keypoints = np.random.default_rng(0).uniform(0, 320, (4, 100, 17, 3))
    assert choose("keypoints", keypoints, 0).metric.name == "snr"
    assert choose("logits", scores, 0).metric.name == "top1"
    assert choose("scores", np.tile([0.7, 0.2, 0.1], (8, 1)), 0).metric.name == "top1"  # a classifier's, in one order


def test_no_detection_above_the_threshold_is_a_blind_spot() -> None:
    reference = answer()
    reference["scores"] = reference["scores"] * 0.4
    (note,) = Budget(reference, axes(reference)).blind_spots()
    assert "keeps no detection scoring 0.5 or more in any of the 8 samples" in note
