"""The trained digits CNN pruned at 0.3: it keeps accuracy, and least-squares reconstruction recovers more."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, feeds, prune, run

from onnxsat.data.metrics import evaluate
from onnxsat.data.sources import DIGITS, DIGITS_SPLIT, Dataset, load_dataset
from onnxsat.pruning.prune import PruneOptions, prune_model
from onnxsat.zoo.digits_cnn import bundled_digits_cnn, test_split


@pytest.fixture(scope="module")
def digits() -> tuple[onnx.ModelProto, Dataset, Dataset]:
    """The model, its training digits (calibration: never the test digits), its held-out digits."""
    everything = load_dataset(DIGITS, [None, 1, 8, 8])
    train = DIGITS_SPLIT.indices(len(everything))[0]
    assert everything.labels is not None
    calibration = Dataset(everything.inputs[train], everything.labels[train], "digits:train")
    return onnx.load(str(bundled_digits_cnn())), calibration, test_split()


def test_digits_cnn_pruned_keeps_accuracy_and_reconstruction_helps(
    digits: tuple[onnx.ModelProto, Dataset, Dataset],
) -> None:
    model, calibration, test = digits
    baseline = evaluate(model, test).top1
    plain, report = prune_model(model, PruneOptions(rate=0.3))
    refit, refit_report = prune_model(model, PruneOptions(rate=0.3, reconstruct=True), dataset=calibration)
    assert report.params["pruned"] < 0.6 * report.params["original"]
    assert refit_report.verification is not None and refit_report.verification.ok
    assert [fit.node for fit in refit_report.reconstruction] == ["conv2", "fc1", "fc2"]
    assert all(
        fit.held_out and fit.accepted == (fit.error_after < fit.error_before) for fit in refit_report.reconstruction
    )
    assert all(fit.accepted for fit in refit_report.reconstruction[:2])  # the classifier (fc2) may gain nothing
    plain_top1, refit_top1 = evaluate(plain, test).top1, evaluate(refit, test).top1
    assert 0.8 < plain_top1 < refit_top1 <= baseline + 0.01


def test_with_data_the_pruned_model_is_scored_on_a_part_calibration_never_saw() -> None:
    """``--data`` with labels: the refit calibrates on 80% of it, and the report gives top-1 before and after
    on the other 20%, the figures computed here by hand on that same part. Without calibration (l1, no
    refit) every sample is scored."""
    model = onnx.load(str(bundled_digits_cnn()))
    refit, report = prune_model(model, PruneOptions(rate=0.5, reconstruct=True, data=DIGITS))
    calibrated, held = load_dataset(DIGITS, [None, 1, 8, 8]).split(0.2)
    assert held is not None and report.scored_on == held.name and report.data is not None
    assert report.data == f"digits (calibration part) ({len(calibrated)} samples)"
    assert report.baseline is not None and report.accuracy is not None
    assert report.baseline.samples == report.accuracy.samples == len(held)
    assert report.baseline.outputs[0].metric == "top1"
    assert report.baseline.outputs[0].value == pytest.approx(evaluate(model, held).top1)
    assert report.accuracy.outputs[0].value == pytest.approx(evaluate(refit, held).top1)
    table = report.to_table()
    assert f"on {held.name} ({len(held)} samples)" in table and "top1" in table
    assert any("top1" in line for line in report.summary())
    assert report.to_dict()["accuracy"]["outputs"][0]["value"] == report.accuracy.outputs[0].value
    assert f"verification compared the outputs on the first 16 samples of {held.name}, not on random inputs" in (
        report.notes
    )

    _, plain_report = prune_model(model, PruneOptions(rate=0.5, data=DIGITS))
    assert plain_report.accuracy is not None and plain_report.accuracy.samples == len(
        load_dataset(DIGITS, [None, 1, 8, 8])
    )
    # 18 points lost without the refit (0 with it): warned about, with what to do
    assert report.collapsed is None and plain_report.collapsed is not None
    assert plain_report.collapsed.startswith("logits: top1 fell from 99.83% to 81.58%")
    assert "--reconstruct to refit what is kept" in plain_report.collapsed
    assert f"warning: {plain_report.collapsed}" in plain_report.notes
    _, no_score = prune_model(model, PruneOptions(rate=0.5, reconstruct=True, data=DIGITS, holdout=0.0))
    assert no_score.accuracy is None and no_score.scored_on is None


def test_reconstruction_refits_a_strided_padded_conv_exactly() -> None:
    """When the pruned channels are linear combinations of the kept ones (here: scaled copies of kept filters), the
    refit recovers the leaf's output exactly: im2col and the weight layout agree."""
    b = Builder()
    w = np.random.default_rng(0).normal(size=(6, 3, 3, 3)).astype(np.float32)
    w[3:] = 0.5 * w[:3]  # channels 3-5 are half of 0-2: the smaller, pruned, and exactly replaceable
    c1 = b.node("Conv", ["x", b.const("c1_w", w)], "c1", pads=[1, 1, 1, 1])
    c2 = b.node(
        "Conv", [c1, b.random("c2_w", 4, 6, 3, 3), b.random("c2_b", 4)], "c2", pads=[1, 0, 1, 0], strides=[2, 1]
    )
    model = b.model([c2])
    inputs = np.random.default_rng(1).normal(size=(16, 3, 8, 8)).astype(np.float32)
    calibration = Dataset(inputs, None, "random")
    pruned, report = prune_model(model, PruneOptions(rate=0.5, reconstruct=True, single_node=True), dataset=calibration)
    assert report.reconstruction[0].error_after < 1e-3  # the ridge term costs a little
    after, before = run(pruned)[0], run(model)[0]
    assert np.linalg.norm(after - before) < 1e-3 * np.linalg.norm(before)
    assert run(pruned, feeds(5))[0].shape == (2, 4, 4, 6)


def test_reconstruction_without_data_uses_random_inputs_and_says_so() -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    model = b.model([b.conv("c2", r, 8, 2)])
    _, report = prune(model, rate=0.5, reconstruct=True)
    assert any("random" in note for note in report.notes)
    assert report.reconstruction and "reconstruction on random" in report.to_table()
