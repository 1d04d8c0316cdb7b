"""Ultralytics exports say what their outputs hold (metadata ``task``, ``names``, ``args``); auto scoring
reads it: only the class rows are scores, and an export with NMS inside gives a table of kept boxes."""

from __future__ import annotations

import numpy as np
import pytest

from onnxsat.metrics.budget import Budget

OBB = {"task": "obb", "names": "{0: 'plane', 1: 'ship'}", "args": "{'batch': 1, 'nms': None}"}
WITH_NMS = {"task": "detect", "names": "{0: 'person', 1: 'car'}", "args": "{'batch': 1, 'nms': True}"}


def oriented_boxes(samples: int = 12, anchors: int = 50) -> np.ndarray:
    """[N, 4 + 2 classes + angle, anchors]: boxes in pixels, weak class scores, an angle of 0.8-0.9 rad."""
    rng = np.random.default_rng(0)
    out = np.empty((samples, 7, anchors), np.float32)
    out[:, :2] = rng.uniform(20, 300, (samples, 2, anchors))
    out[:, 2:4] = rng.uniform(5, 40, (samples, 2, anchors))
    out[:, 4:6] = rng.uniform(0, 1e-4, (samples, 2, anchors))
    out[:, 6] = rng.uniform(0.8, 0.9, (samples, anchors))
    return out


def test_an_oriented_box_models_angle_row_is_not_read_as_a_class() -> None:
    reference = {"output0": oriented_boxes()}
    generic = Budget(reference, {"output0": 0})
    assert generic.metrics["output0"].name == "detection" and not generic.blind_spots()  # the angle "finds" boxes
    told = Budget(reference, {"output0": 0}, metadata=OBB)
    assert told.metrics["output0"].name == "detection" and "Ultralytics export" in told.reasons["output0"]
    (blind,) = told.blind_spots()
    assert "finds no box in any of the 12 samples" in blind
    faded = {"output0": reference["output0"] * np.array([1, 1, 1, 1, 1, 1, 0], np.float32)[None, :, None]}
    assert told.score(faded).drop == 0.0  # a lost angle is no lost box
    assert generic.score(faded).drop == pytest.approx(1.0)


def kept_boxes(kept: int, samples: int = 12) -> np.ndarray:
    """[N, 300, 6] rows x1, y1, x2, y2, score, class: ``kept`` boxes per sample, zeros after."""
    table = np.zeros((samples, 300, 6), np.float32)
    for index in range(kept):
        table[:, index] = [10 + 50 * index, 10, 40 + 50 * index, 60, 0.9 - 0.1 * index, index % 2]
    return table


def test_a_table_of_boxes_an_exports_own_nms_kept_is_scored_as_boxes() -> None:
    budget = Budget({"output0": kept_boxes(2)}, {"output0": 0}, metadata=WITH_NMS)
    assert budget.metrics["output0"].name == "detection" and not budget.blind_spots()
    assert budget.score({"output0": kept_boxes(2)}).drop == 0.0
    assert budget.score({"output0": kept_boxes(1)}).value == pytest.approx(2 / 3)  # F1: 1 of 2 boxes kept
    (blind,) = Budget({"output0": kept_boxes(0)}, {"output0": 0}, metadata=WITH_NMS).blind_spots()
    assert "finds no box" in blind


def test_metadata_of_other_exporters_or_unreadable_changes_nothing() -> None:
    reference = {"output0": oriented_boxes()}
    for metadata in ({"task": "classify", "names": "{0: 'a'}"}, {"task": "obb", "names": "not python {"}, {}):
        budget = Budget(reference, {"output0": 0}, metadata=metadata)
        assert "Ultralytics" not in budget.reasons["output0"]
