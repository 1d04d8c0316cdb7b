"""An Ultralytics segment export's boxes and mask prototypes, scored as one answer."""

from __future__ import annotations

import numpy as np

from onnxsat.metrics import Budget

METADATA = {"task": "segment", "names": "{0: 'gap'}", "args": "{'nms': False}", "imgsz": "[32, 32]"}


def segmenter_outputs(samples: int = 2) -> dict[str, np.ndarray]:
    """Boxes ``[N, 4+1+2, 12]`` (one class, two mask coefficients, twelve anchors) with one confident box per sample,
    centred at (16, 16), 16 pixels wide; prototypes ``[N, 2, 8, 8]`` (a quarter of the 32-pixel input): the
    first positive over the box's left half, the second everywhere."""
    boxes = np.zeros((samples, 7, 12), np.float32)
    boxes[:, :4, :] = 4.0  # tiny boxes, all below the threshold
    boxes[:, :4, 2] = 16.0
    boxes[:, 4, 2] = 0.9
    boxes[:, 5:, 2] = [1.0, 0.0]  # the box's mask is the first prototype
    prototypes = np.full((samples, 2, 8, 8), -1.0, np.float32)
    prototypes[:, 0, 2:6, 2:4] = 1.0
    prototypes[:, 1] = 1.0
    return {"output0": boxes, "output1": prototypes}


def test_the_prototypes_are_scored_through_the_masks_of_the_boxes() -> None:
    reference = segmenter_outputs()
    budget = Budget(reference, {}, metadata=METADATA)
    assert list(budget.metrics) == ["output0"] and budget.folded == {"output1": "output0"}
    assert "masks at IoU 0.5" in budget.reasons["output0"]
    reshuffled = {**reference, "output1": reference["output1"][:, ::-1].copy()}  # prototypes swapped
    reshuffled["output0"] = reference["output0"].copy()
    reshuffled["output0"][:, 5:, 2] = [0.0, 1.0]  # ...and the coefficients with them: the same masks
    assert budget.score(reshuffled).outputs[0].value == 1.0
    grown = {**reference, "output1": reference["output1"].copy()}
    grown["output1"][:, 0, 2:6, 2:6] = 1.0  # the mask now fills the box: IoU 0.5 -> still matched
    assert budget.score(grown).outputs[0].details["mask_iou"] == 0.5
    assert budget.score(grown).outputs[0].value == 1.0
    lost = {**reference, "output1": reference["output1"].copy()}
    lost["output1"][:, 0, 2:6, 3] = -1.0  # half the mask gone...
    lost["output1"][:, 0, 2:4, 2] = -1.0  # ...and half the rest: IoU 0.25, the box no longer counts
    found = budget.score(lost).outputs[0]
    assert found.value == 0.0 and found.details["mask_iou"] == 0.25


def test_a_detector_export_without_prototypes_is_scored_by_its_boxes_alone() -> None:
    reference = segmenter_outputs()
    budget = Budget({"output0": reference["output0"]}, {}, metadata={**METADATA, "task": "detect"})
    assert budget.metrics["output0"].name == "detection" and "masks" not in budget.reasons["output0"]
