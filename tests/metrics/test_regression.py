"""Regression outputs: R² against the data's targets, chosen when the targets fit an output, and budgets on it."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

from onnxsat.errors import DataError
from onnxsat.metrics import METRICS, Budget
from onnxsat.metrics.selection import choose

RNG = np.random.default_rng(7)


def regression(count: int = 200, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """(targets ``[N]`` of both signs, a model's predictions ``[N, 1]`` close to them)."""
    targets = RNG.normal(size=count)
    return targets, (targets + RNG.normal(scale=noise, size=count))[:, None]


def test_r2_is_sklearns_against_targets_with_rmse_and_mae_beside() -> None:
    targets, predicted = regression()
    measure = METRICS["r2"].measure(predicted, predicted, targets)
    assert measure.value == pytest.approx(r2_score(targets, predicted[:, 0]))
    assert measure.details["rmse"] == pytest.approx(np.sqrt(mean_squared_error(targets, predicted[:, 0])))
    assert measure.details["mae"] == pytest.approx(mean_absolute_error(targets, predicted[:, 0]))
    assert measure.per_sample is not None and measure.per_sample.mean() == pytest.approx(measure.value)


def test_r2_of_several_targets_is_variance_weighted() -> None:
    targets = RNG.normal(size=(100, 3)) * [1.0, 10.0, 0.1]
    predicted = targets + RNG.normal(scale=0.2, size=targets.shape)
    measure = METRICS["r2"].measure(predicted, predicted, targets)
    assert measure.value == pytest.approx(r2_score(targets, predicted, multioutput="variance_weighted"))


def test_r2_without_targets_is_against_the_original_and_one_when_unchanged() -> None:
    _, predicted = regression()
    assert METRICS["r2"].measure(predicted, predicted, None).value == 1.0
    moved = predicted + 0.1
    assert METRICS["r2"].measure(predicted, moved, None).value == pytest.approx(r2_score(predicted, moved))


def test_targets_of_another_size_and_a_candidate_giving_nan_are_said() -> None:
    targets, predicted = regression()
    with pytest.raises(DataError, match=r"r2: 2 target\(s\) per sample but the output has 1 value"):
        METRICS["r2"].measure(predicted, predicted, np.stack([targets, targets], axis=1))
    broken = predicted.copy()
    broken[3] = np.nan
    assert METRICS["r2"].measure(predicted, broken, targets).value == 0.0


def test_auto_scores_a_regression_of_both_signs_against_its_targets_not_as_decisions() -> None:
    """Without targets, one value of both signs reads as a logit (``binary``); with float targets it is what it
    is, and a prediction that doubles its error shows as the R² it loses (binary saw the same signs)."""
    targets, predicted = regression()
    assert choose("y", predicted, 0).metric.name == "binary"
    choice = choose("y", predicted, 0, labels=targets)
    assert choice.metric.name == "r2" and "regression targets" in choice.why
    budget = Budget({"y": predicted}, {}, labels=targets)
    assert budget.baseline.kind == "accuracy"
    assert budget.baseline.value == pytest.approx(r2_score(targets, predicted[:, 0]))
    worse = targets[:, None] + 2 * (predicted - targets[:, None])
    score = budget.score({"y": worse})
    assert score.drop == pytest.approx(r2_score(targets, predicted[:, 0]) - r2_score(targets, worse[:, 0]))
    assert score.drop > 0.05 and not score.fits(0.01)


def test_whole_number_labels_an_output_follows_are_its_targets() -> None:
    """An age model with ages saved as whole numbers: its output follows them, so R² against them; a second
    head's score beside digit classes does not follow the classes, and binary would read them as 0 or not."""
    ages = RNG.integers(1, 90, size=300)
    estimate = (ages + RNG.normal(scale=4, size=300))[:, None]
    choice = choose("age", estimate, 0, labels=ages)
    assert choice.metric.name == "r2" and choice.metric.uses_labels and "follows the whole-number labels" in choice.why
    digits = RNG.integers(0, 10, size=300)
    score = RNG.normal(size=(300, 1))
    other = choose("score", score, 0, labels=digits)
    assert other.metric.name == "binary" and not other.metric.uses_labels and "beyond 0 and 1" in other.why
    budget = Budget({"score": score}, {}, labels=digits)
    assert budget.baseline.kind == "agreement" and budget.baseline.value == 1.0


def test_targets_an_output_does_not_fit_leave_it_to_agreement_and_are_said_unused() -> None:
    targets, _ = regression(64)
    logits = RNG.normal(size=(64, 10))
    budget = Budget({"logits": logits}, {}, labels=targets)
    assert budget.metrics["logits"].name == "top1" and budget.baseline.kind == "agreement"
    (note,) = budget.blind_spots()
    assert note.startswith("the data's labels are not used")


def test_binary_given_labels_beyond_zero_and_one_is_one_line() -> None:
    with pytest.raises(DataError, match="binary scores against labels 0 and 1; the data's labels hold 2"):
        Budget({"p": RNG.uniform(size=(4, 1))}, {}, labels=np.array([0, 1, 2, 1]), metric="binary")


def test_a_class_metric_asked_for_on_regression_targets_is_one_line() -> None:
    """Asked for top1 with targets, the budget fell back to agreement, said only in a note."""
    targets, _ = regression(8)
    with pytest.raises(DataError, match="--metric top1 scores against class labels, and the data's labels are a"):
        Budget({"logits": RNG.normal(size=(8, 10))}, {}, labels=targets, metric="top1")


def test_a_regression_word_inside_a_decision_name_is_no_regression() -> None:
    """``target_prob``: a probability (of the target class), read as decisions against 0/1 labels."""
    probability = RNG.uniform(size=(200, 1))
    labels = (probability[:, 0] > 0.5).astype(np.int64)
    assert choose("target_prob", probability, 0, labels=labels).metric.name == "binary"
    assert choose("target", RNG.normal(size=(200, 1)), 0).metric.name == "r2"


def test_a_regression_never_negative_with_exact_zeros_is_no_decision() -> None:
    """A ReLU regression head (9% exact zeros): as ``binary`` at threshold 0 every answer was "yes", and a
    model with every weight zeroed stayed inside a 1% budget."""
    values = np.maximum(RNG.normal(loc=2.0, scale=2.0, size=(300, 1)), 0.0)
    assert (values == 0).any() and values.max() > 1
    choice = choose("pixel", values, 0)
    assert choice.metric.name == "r2" and "all of one sign" in choice.why


def test_skl2onnx_gaussian_process_outputs_are_regressions() -> None:
    """``GPmean`` (both signs) and ``GPcovstd`` (tiny, in [0, 1]) were scored as decisions at 0 and 0.5."""
    assert choose("GPmean", RNG.normal(size=(50, 1)), 0).metric.name == "r2"
    assert choose("GPcovstd", RNG.uniform(0, 1e-5, size=(50, 1)), 0).metric.name == "r2"


def test_several_values_of_one_sign_one_always_largest_are_a_regression_not_classes() -> None:
    """DNSMOS's [signal, background, overall] opinion scores (1 to 5): read as three classes, "class 0" won in
    every sample and top1 saw no damage. Logits (both signs), probabilities, or scores whose best varies stay
    class scores."""
    scores = np.column_stack([RNG.uniform(3.2, 4.5, 40), RNG.uniform(2.0, 3.0, 40), RNG.uniform(1.5, 3.0, 40)])
    choice = choose("Identity:0", scores, 0)
    assert choice.metric.name == "r2" and "value 0 the largest in every sample" in choice.why
    assert not choice.metric.uses_labels
    assert choose("logits", RNG.normal(size=(40, 3)), 0).metric.name == "top1"
    probabilities = np.column_stack([np.full(40, 0.8), np.full(40, 0.15), np.full(40, 0.05)])
    assert choose("probs", probabilities, 0).metric.name == "top1"
    assert choose("relu_scores", RNG.uniform(1.5, 4.5, (40, 3)), 0).metric.name == "top1"  # the best one varies
