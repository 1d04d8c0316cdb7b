"""Each built-in metric on hand-made outputs whose right answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from onnxsat.metrics import METRICS
from onnxsat.metrics.sequence import ctc_decode

RNG = np.random.default_rng(0)


def measure(name: str, reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None = None):
    return METRICS[name].measure(reference, candidate, labels)


def test_top1_and_top5_against_labels_and_as_agreement() -> None:
    reference = np.array([[3.0, 1, 0, 0, 0, 0], [0, 5, 1, 0, 0, 0], [0, 0, 0, 0, 0, 9]])
    candidate = reference.copy()
    candidate[1] = [6, 5, 1, 0, 0, 0]  # sample 1 now says class 0, class 1 second
    assert measure("top1", reference, candidate).value == pytest.approx(2 / 3)
    assert measure("top5", reference, candidate).value == 1.0
    labels = np.array([0, 0, 4])  # the original is right on sample 0 only
    assert measure("top1", reference, reference, labels).value == pytest.approx(1 / 3)
    assert measure("top1", reference, candidate, labels).value == pytest.approx(2 / 3)
    assert measure("top1", reference, candidate, labels).details["top5"] == pytest.approx(2 / 3)


def test_top1_reads_a_convolutional_head_and_refuses_sequences() -> None:
    reference = RNG.normal(size=(4, 10, 1, 1))
    assert measure("top1", reference, reference).value == 1.0
    assert "per sample it is [40, 6625]" in METRICS["top1"].fits(np.zeros((2, 40, 6625)), 0)


def test_binary_cuts_probabilities_at_half_and_logits_at_zero() -> None:
    probabilities = np.array([[0.1], [0.6], [0.9], [0.4]])
    moved = np.array([[0.55], [0.6], [0.2], [0.4]])
    found = measure("binary", probabilities, moved)
    assert found.value == 0.5 and found.details["threshold"] == 0.5
    logits = np.array([-2.0, 1.0, 3.0, -1.0])[:, None]
    assert measure("binary", logits, logits * 0.5).value == 1.0
    assert measure("binary", logits, -logits).value == 0.0


def test_ctc_decoding_collapses_repeats_then_drops_blanks() -> None:
    assert ctc_decode(np.array([0, 3, 3, 0, 3, 5, 5, 0])) == (3, 3, 5)
    assert ctc_decode(np.array([0, 0])) == ()


def one_hot(best: list[list[int]], classes: int = 6) -> np.ndarray:
    best_array = np.array(best)
    scores = np.full((*best_array.shape, classes), 0.01)
    np.put_along_axis(scores, best_array[..., None], 0.95, axis=-1)
    return scores


def test_sequence_counts_samples_read_the_same_and_positions_beside() -> None:
    reference = one_hot([[1, 1, 0, 2], [3, 0, 3, 0]])
    candidate = one_hot([[1, 0, 1, 2], [3, 3, 0, 3]])  # sample 0 reads 1,1,2 (was 1,2); sample 1 reads 3,3 as before
    found = measure("sequence", reference, candidate)
    assert found.value == 0.5
    assert found.details["per-position"] == pytest.approx(3 / 8)


def yolo_v8(boxes: list[tuple[float, float, float, float, int, float]], classes: int = 3, anchors: int = 50):
    """One sample [4+C, A]: the given boxes (cx, cy, w, h, class, score) at the first anchors, the rest faint."""
    sample = np.zeros((4 + classes, anchors))
    sample[:4] = RNG.uniform(10, 100, size=(4, anchors))
    sample[4:] = 0.01
    for anchor, (cx, cy, w, h, cls, score) in enumerate(boxes):
        sample[:4, anchor] = cx, cy, w, h
        sample[4 + cls, anchor] = score
    return sample


def test_detection_matches_boxes_by_class_and_overlap() -> None:
    original = [(50, 50, 20, 20, 0, 0.9), (150, 40, 30, 30, 1, 0.8), (52, 51, 20, 20, 0, 0.7)]  # third: NMS'd
    reference = yolo_v8(original)[None]
    assert measure("detection", reference, reference).value == 1.0
    shifted = yolo_v8([(80, 50, 20, 20, 0, 0.9), (150, 40, 30, 30, 1, 0.8)])[None]  # first box moved off
    found = measure("detection", reference, shifted)
    assert found.details["boxes"] == 2  # NMS kept two of the original's three
    assert found.value == pytest.approx(0.5)  # 1 of 2 matched on each side
    relabelled = yolo_v8([(50, 50, 20, 20, 2, 0.9), (150, 40, 30, 30, 1, 0.8)])[None]
    assert measure("detection", reference, relabelled).value == pytest.approx(0.5)
    faint = yolo_v8([(50, 50, 20, 20, 0, 0.2), (150, 40, 30, 30, 1, 0.8)])[None]  # under the 0.25 threshold
    assert measure("detection", reference, faint).details["recall"] == pytest.approx(0.5)


def test_detection_reads_yolov5_rows_with_objectness() -> None:
    sample = np.zeros((40, 5 + 2))
    sample[:, :4] = RNG.uniform(10, 100, size=(40, 4))
    sample[:, 4:] = 0.05
    sample[0] = [60, 60, 30, 30, 0.9, 0.1, 0.9]  # objectness 0.9 x class 1 0.9
    candidate = sample.copy()
    candidate[0, 4] = 0.2  # objectness falls: 0.18 < 0.25, the box is lost
    reference = sample[None]
    assert measure("detection", reference, reference).details["boxes"] == 1
    assert measure("detection", reference, candidate[None]).value == 0.0


def test_map_iou_of_thresholded_and_best_class_regions() -> None:
    reference = np.zeros((2, 1, 8, 8))
    reference[0, 0, 2:6, 2:6] = 0.9
    candidate = reference.copy()
    candidate[0, 0, 2:6, 4:6] = 0.3  # half the region falls under 0.5
    found = measure("map", reference, candidate)
    assert found.value == pytest.approx((0.5 + 1.0) / 2)  # sample 1: both empty, agree
    classes = np.zeros((1, 3, 4, 4))
    classes[0, 1, :2] = 1.0
    classes[0, 2, 2:] = 1.0
    swapped = classes[:, [0, 2, 1]]
    assert measure("map", classes, swapped).value == 0.0


def test_cosine_snr_and_exact() -> None:
    reference = RNG.normal(size=(5, 16))
    noise = RNG.normal(size=(5, 16))
    variation = reference - reference.mean(axis=1, keepdims=True)
    noise *= 0.1 * np.linalg.norm(variation) / np.linalg.norm(noise)  # 20 dB of each sample's variation
    found = measure("snr", reference, reference + noise)
    assert found.value == pytest.approx(0.99) and found.details["snr_db"] == pytest.approx(20.0)
    depth = 10.0 + reference  # a depth map: its energy mostly its mean, which the signal leaves out
    assert measure("snr", depth, depth + 10 * noise).value == pytest.approx(0.0)  # noise as loud as the variation
    assert measure("snr", depth[:, :1], depth[:, :1] + 0.1).value > 0.99  # one value per sample: its whole energy
    assert measure("cosine", reference, reference).value == pytest.approx(1.0)
    assert measure("cosine", reference, -reference).value == 0.0
    assert measure("cosine", np.zeros((2, 3)), np.zeros((2, 3))).value == 1.0
    ids = np.array([[1, 2], [3, 4]])
    assert measure("exact", ids, np.array([[1, 2], [3, 5]])).value == 0.5


def test_tags_score_each_yes_no_value_against_rows_of_labels_or_the_original() -> None:
    logits = np.array([[2.0, -1.0, 0.5, -3.0], [-2.0, 1.0, 0.5, 3.0]])
    moved = logits.copy()
    moved[0, 2] = -0.1  # one of the first sample's four decisions flips
    found = measure("tags", logits, moved)
    assert found.value == pytest.approx(7 / 8) and found.details["threshold"] == 0.0
    assert found.details["rows all right"] == 0.5
    np.testing.assert_allclose(found.per_sample, [0.75, 1.0])
    labels = np.array([[1, 0, 1, 0], [0, 1, 1, 0]], bool)  # the original misses the second sample's last tag
    assert measure("tags", logits, logits, labels).value == pytest.approx(7 / 8)
    assert measure("tags", logits, moved, labels).value == pytest.approx(6 / 8)
    assert "several float values" in METRICS["tags"].fits(np.zeros((2, 1)), 0)
