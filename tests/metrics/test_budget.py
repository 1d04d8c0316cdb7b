"""Auto-selection, several outputs (the worst counts), and a user's own metric, loaded and checked."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from onnxsat.errors import DataError, SettingsError
from onnxsat.metrics import Budget, check_spec
from onnxsat.metrics.budget import resolution_note
from onnxsat.metrics.selection import choose

RNG = np.random.default_rng(1)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def yolo_like(count: int = 2) -> np.ndarray:
    out = np.empty((count, 4 + 3, 60))
    out[:, :4] = RNG.uniform(0, 320, size=(count, 4, 60))
    out[:, 4:] = RNG.uniform(0, 1, size=(count, 3, 60))
    return out


def tagger_scores(always: int | None = None, count: int = 8, steps: int = 16, tags: int = 59) -> np.ndarray:
    """``[count, steps, tags]`` emissions whose best tag per step stands out (a trained tagger's), or, with
    ``always``, one feature far above the rest at every step (a hidden state's outlier feature)."""
    scores = RNG.normal(size=(count, steps, tags))
    best = np.full((count, steps), always) if always is not None else RNG.integers(0, tags, size=(count, steps))
    np.put_along_axis(scores, best[..., None], 4.0, axis=-1)
    return scores


@pytest.mark.parametrize(
    ("name", "output", "batch_axis", "expected"),
    [
        ("logits", RNG.normal(size=(4, 10)), 0, "top1"),
        ("head", RNG.normal(size=(4, 10, 1, 1)), 0, "top1"),
        ("speech", RNG.uniform(size=(4, 1)), 0, "binary"),
        ("score", RNG.normal(size=(4, 1)), 0, "binary"),  # logits of both signs
        ("variable", RNG.normal(size=(4, 1)), 0, "r2"),  # skl2onnx's name for a regressor's output
        ("intensity", RNG.uniform(2.5, 3.5, size=(4, 1)), 0, "r2"),  # a regression: no threshold to cross
        ("label", RNG.integers(0, 5, size=(4,)), 0, "label"),
        ("tokens", RNG.integers(0, 5, size=(4, 7)), 0, "exact"),
        ("output0", yolo_like(), 0, "detection"),
        ("softmax_0.tmp_0", softmax(RNG.normal(size=(2, 40, 97))), 0, "sequence"),
        ("output", RNG.normal(size=(2, 40, 97)), 1, "sequence"),  # [T, N, C] as exported, batch on axis 1
        ("output", np.log(softmax(RNG.normal(size=(2, 40, 97)))), 0, "sequence"),
        ("logits", RNG.normal(size=(2, 8, 12_000)).astype(np.float32), 0, "tokens"),  # a language model's
        ("probs", softmax(RNG.normal(size=(2, 8, 12_000))), 0, "sequence"),  # a recognizer with many characters
        ("sigmoid_0.tmp_0", RNG.uniform(size=(2, 1, 32, 32)), 0, "map"),  # named like scores
        ("output", (RNG.uniform(size=(2, 1, 32, 32)) > 0.8) * 0.98 + 0.01, 0, "map"),  # mostly near 0 or 1
        ("output", RNG.uniform(size=(2, 1, 32, 32)), 0, "snr"),  # grey levels: a super-resolved image
        ("seg", RNG.normal(size=(2, 5, 16, 16)), 0, "map"),
        ("out", RNG.normal(size=(2, 21, 16, 16)), 0, "map"),  # 21 classes: segmentation logits
        ("out", softmax(RNG.normal(size=(2, 16, 16, 3))).transpose(0, 3, 1, 2), 0, "map"),  # probabilities
        ("sample", RNG.normal(size=(2, 4, 16, 16)), 0, "snr"),  # a diffusion UNet's predicted noise
        ("image", RNG.uniform(-1, 1, size=(2, 3, 32, 32)), 0, "snr"),  # a VAE decoder's RGB image
        ("last_hidden_state", RNG.normal(size=(2, 16, 32)), 0, "cosine"),
        ("present.0.key", RNG.normal(size=(2, 4, 9, 32)), 0, "cosine"),  # a decoder's cache: not a map
        ("present.1.value", RNG.uniform(size=(2, 4, 9, 32)), 0, "cosine"),
        ("audio", np.tanh(RNG.normal(size=(2, 1, 4096))), 0, "snr"),  # a vocoder's waveform, not 4,096 classes
        ("output", RNG.normal(size=(2, 1, 1, 96)), 0, "snr"),  # a speech embedding
        ("logits", RNG.normal(size=(2, 1, 50)), 0, "top1"),  # one step's scores, named so
        ("mu", RNG.normal(size=(2, 8)), 0, "cosine"),  # a VAE encoder's latent mean, not 8 classes
        ("logvar", RNG.normal(size=(2, 8)), 0, "cosine"),
        ("recon", RNG.uniform(size=(2, 64)), 0, "snr"),  # its decoded pixels
        ("mul_out", RNG.normal(size=(2, 8)), 0, "top1"),  # "mu" inside a word names no latent
        ("lstm_cell_squeeze_1_19", RNG.normal(size=(2, 25)), 0, "cosine"),  # a recurrent state, not 25 classes
        ("cell_logits", RNG.normal(size=(2, 25)), 0, "top1"),  # a table cell's class scores
        ("cells", RNG.normal(size=(2, 25)), 0, "top1"),  # "cell" only as a whole word
        ("cell_heatmap", RNG.normal(size=(2, 8, 16, 16)), 0, "map"),  # a table detector's cell centres
        ("output", softmax(RNG.normal(size=(2, 1, 50))), 0, "top1"),  # probabilities: classes after all
        ("fetch_name_0", tagger_scores(), 0, "tokens"),  # a tagger's emissions: a class per step
        ("output", RNG.normal(size=(8, 16, 59)), 0, "cosine"),  # features: no class structure
        ("output", RNG.normal(size=(8, 16, 4)), 0, "cosine"),  # a random projection to 4 values
        ("output", tagger_scores(always=3), 0, "cosine"),  # one feature wins at every step: no class per step
    ],
)
def test_auto_chooses_from_shape_values_and_name(name: str, output: np.ndarray, batch_axis: int, expected: str) -> None:
    assert choose(name, output, batch_axis).metric.name == expected


def test_the_worst_output_counts_and_each_is_reported() -> None:
    reference = {"logits": RNG.normal(size=(20, 5)), "embedding": RNG.normal(size=(20, 8))}
    budget = Budget(reference, {"logits": 0, "embedding": 0})
    assert budget.describe()["logits"]["metric"] == "top1"
    assert budget.describe()["embedding"]["metric"] == "cosine"
    assert budget.baseline.drop == 0.0 and budget.baseline.kind == "agreement"
    candidate = {"logits": reference["logits"].copy(), "embedding": -reference["embedding"]}
    drop, score = budget.drop(candidate)
    assert drop == pytest.approx(1.0) and score.metric == "cosine"
    assert {o.output: o.value for o in score.outputs}["logits"] == 1.0
    only = Budget(reference, {}, outputs=["logits"])
    assert only.drop(candidate)[0] == 0.0


def test_state_outputs_are_left_out_unless_named() -> None:
    reference = {"prob": RNG.uniform(size=(6, 1)), "stateN": RNG.normal(size=(6, 2, 8))}
    assert list(Budget(reference, {}, exclude={"stateN"}).metrics) == ["prob"]
    assert list(Budget(reference, {}, outputs=["stateN"], exclude={"stateN"}).metrics) == ["stateN"]


def test_a_metric_that_does_not_fit_or_an_unknown_output_is_one_line() -> None:
    reference = {"maps": RNG.uniform(size=(2, 1, 8, 8)), "logits": RNG.normal(size=(2, 4))}
    with pytest.raises(SettingsError, match=r"--metric top1 does not fit output 'maps'.*--metric-output"):
        Budget(reference, {}, metric="top1")
    with pytest.raises(SettingsError, match="no such output"):
        Budget(reference, {}, outputs=["boxes"])
    with pytest.raises(SettingsError, match="unknown metric 'accuracy'"):
        check_spec("accuracy")


def test_labels_make_it_accuracy_for_the_metrics_that_use_them() -> None:
    logits = np.eye(4)[[0, 1, 2, 3]] * 5
    budget = Budget({"logits": logits}, {}, labels=np.array([0, 1, 2, 0]))
    assert budget.baseline.kind == "accuracy" and budget.baseline.value == 0.75


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_scores.py").write_text(
        "import numpy as np\n"
        "def close(reference, candidate, labels):\n"
        "    return float(np.mean(np.abs(reference - candidate) < 0.1))\n"
        "def text(reference, candidate, labels):\n"
        "    return 'good'\n"
        "def large(reference, candidate, labels):\n"
        "    return 3\n"
        "def broken(reference, candidate, labels):\n"
        "    raise KeyError('boxes')\n"
        "NOT_A_FUNCTION = 3\n"
    )
    monkeypatch.chdir(tmp_path)  # found in the current folder, as the command line finds it
    yield "my_scores"
    sys.modules.pop("my_scores", None)


def test_a_users_module_function_scores_every_output(user_module: str) -> None:
    reference = {"y": np.zeros((4, 3))}
    budget = Budget(reference, {}, metric=f"{user_module}:close")
    assert budget.baseline.value == 1.0 and budget.describe()["y"]["metric"] == "my_scores:close"
    assert budget.drop({"y": np.array([[0.0] * 3, [0.0] * 3, [1.0] * 3, [1.0] * 3])})[0] == 0.5


def test_a_callable_from_the_python_api() -> None:
    budget = Budget({"y": np.ones((3, 2))}, {}, metric=lambda r, c, labels: float(np.allclose(r, c)))
    assert budget.drop({"y": np.zeros((3, 2))})[0] == 1.0


def test_a_users_metric_of_one_score_per_sample_gets_the_sampling_error_its_single_score_lacks() -> None:
    """The same agreement returned whole or per sample: the same drop, but only per sample does the budget
    know its error (and a held-out refusal names which it was: a drop held as it is, or beyond its error)."""
    from onnxsat.metrics import HeldOut
    from onnxsat.metrics.text import held_out_text

    labels = np.arange(400) % 10
    original, candidate = flipped(labels, 10, 8, 0)

    def each(reference: np.ndarray, changed: np.ndarray, _: object) -> np.ndarray:
        return (reference.argmax(1) == changed.argmax(1)).astype(np.float64)

    scores = {}
    for name, metric in (("each", each), ("whole", lambda r, c, labels: float(each(r, c, labels).mean()))):
        budget = Budget({"logits": original}, {"logits": 0}, metric=metric, confidence=0.9)
        scores[name] = budget.score({"logits": candidate})
    assert scores["each"].drop == pytest.approx(scores["whole"].drop) == pytest.approx(0.02)
    assert scores["each"].bound > scores["each"].drop and scores["whole"].bound == scores["whole"].drop
    whole = HeldOut.of("held", scores["whole"], scores["whole"], 0.01, confidence=0.9)
    assert whole.refuted and whole.as_is and "no per-sample measure" in held_out_text(whole)
    each_held = HeldOut.of("held", scores["each"], scores["each"], 0.01, confidence=0.9)
    assert not each_held.as_is
    with pytest.raises(DataError, match=r"per-sample scores outside \[0, 1\]"):
        Budget({"y": np.zeros((3, 2))}, {}, metric=lambda r, c, labels: np.full(3, 2.0))


@pytest.mark.parametrize(
    ("function", "error", "message"),
    [
        ("missing_module_xyz:f", SettingsError, "cannot import missing_module_xyz"),
        ("{m}:nothing", SettingsError, "has no nothing"),
        ("{m}:NOT_A_FUNCTION", SettingsError, "not a function"),
        ("{m}:text", DataError, r"returned str 'good', not a score in \[0, 1\]"),
        ("{m}:large", DataError, r"returned 3.0, not a score"),
        ("{m}:broken", DataError, "failed: KeyError"),
        (":f", SettingsError, "package.module:function"),
    ],
)
def test_a_users_metric_that_cannot_be_used_is_one_line(
    user_module: str, function: str, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        Budget({"y": np.zeros((2, 2))}, {}, metric=function.format(m=user_module))


def test_distortion_is_the_relative_norm_over_every_scored_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accumulated a chunk at a time (chunks much smaller than the outputs here), the same as at once."""
    monkeypatch.setattr("onnxsat.metrics.budget.SQUARES_CHUNK", 7)
    reference = {"a": RNG.normal(size=(4, 10)).astype(np.float32), "b": RNG.normal(size=(4, 3, 5)).astype(np.float32)}
    budget = Budget(reference, {"a": 0, "b": 0})
    moved = {
        name: value + np.float32(0.1) * RNG.normal(size=value.shape).astype(np.float32)
        for name, value in reference.items()
    }
    noise = sum(np.sum((moved[n].astype(np.float64) - reference[n].astype(np.float64)) ** 2) for n in reference)
    signal = sum(np.sum(reference[n].astype(np.float64) ** 2) for n in reference)
    assert budget.distortion(moved) == pytest.approx(np.sqrt(noise / signal), rel=1e-12)
    assert budget.distortion(reference) == 0.0


def test_tokens_is_the_share_of_positions_whose_best_token_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranked a few positions at a time (fewer than there are here): the same shares as at once."""
    from onnxsat.metrics import METRICS

    monkeypatch.setattr("onnxsat.metrics.tokens.ROWS_PER_STEP", 3)
    reference = RNG.normal(size=(2, 5, 40)).astype(np.float32)
    candidate = reference.copy()
    best = reference.argmax(-1)
    candidate[0, 1, best[0, 1]] = -10.0  # position (0, 1): its best token falls out of the top 5
    second = np.argsort(-reference[1, 3])[1]
    candidate[1, 3, second] = reference[1, 3].max() + 1.0  # position (1, 3): now second best
    measure = METRICS["tokens"].measure(reference, candidate, None)
    assert measure.value == pytest.approx(8 / 10)
    assert measure.details == {"top1": pytest.approx(8 / 10), "top5": pytest.approx(9 / 10)}
    assert METRICS["tokens"].fits(RNG.normal(size=(4, 10)), 0) is not None  # one vector per sample


def test_a_classifier_that_always_gives_one_answer_on_the_data_is_a_blind_spot() -> None:
    """Scored by agreement with the original, an output whose answer never varies on the data cannot show
    damage to the other answers: the budget says so. With labels, or varied answers, it does not."""
    rng = np.random.default_rng(0)
    one_class = rng.normal(size=(16, 4)).astype(np.float32)
    one_class[:, 2] += 10.0
    varied = rng.normal(size=(16, 4)).astype(np.float32)
    decided = np.full((16, 1), 0.9, dtype=np.float32)
    budget = Budget({"logits": one_class, "varied": varied, "p": decided}, {}, metric="auto")
    notes = budget.blind_spots()
    assert len(notes) == 2
    assert notes[0].startswith("logits: the original answers class 2 for all 16 samples, so top1 agreement")
    assert notes[1].startswith("p: the original answers yes for all 16 samples")
    odd = np.eye(4, dtype=np.float32)[:1] * 20.0  # one sample of class 0
    nearly = np.concatenate([one_class, one_class, odd])
    (note,) = Budget({"logits": nearly}, {}, metric="top1").blind_spots()
    assert note.startswith("logits: the original answers class 2 for 32 of the 33 samples")
    assert Budget({"logits": np.concatenate([one_class, odd, odd])}, {}, metric="top1").blind_spots() == []
    labelled = Budget({"logits": one_class}, {}, labels=np.arange(16) % 4, metric="top1")
    assert labelled.blind_spots() == []
    assert Budget({"logits": one_class[:4]}, {}, metric="top1").blind_spots() == []  # too few to tell


def test_labels_no_scored_output_reads_are_said_to_be_unused() -> None:
    """An embedder's output is scored by cosine with the original: labels given with its data were ignored
    silently, where a user may expect them to count."""
    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=(64, 32)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    (note,) = Budget({"embedding": embeddings}, {}, labels=np.arange(64) % 10, metric="auto").blind_spots()
    assert note.startswith("the data's labels are not used: no scored output is scored against labels (embedding by")
    logits = rng.normal(size=(64, 10)).astype(np.float32)
    assert Budget({"logits": logits}, {}, labels=np.arange(64) % 10, metric="auto").blind_spots() == []


def test_a_detector_that_finds_nothing_on_the_data_is_a_blind_spot() -> None:
    """YOLO-style scores all under the threshold: no box in any sample, so any candidate "agrees"."""
    quiet = np.zeros((8, 6, 30), dtype=np.float32)  # [N, 4 + 2 classes, anchors]
    quiet[:, 2:4, :] = 10.0  # box sizes, in pixels
    budget = Budget({"output0": quiet}, {}, metric="detection")
    (note,) = budget.blind_spots()
    assert note.startswith("output0: the original finds no box in any of the 8 samples")
    found = quiet.copy()
    found[3, 4, 7] = 0.9  # one confident box in one sample
    assert Budget({"output0": found}, {}, metric="detection").blind_spots() == []


def test_a_recognizer_that_reads_nothing_on_the_data_is_a_blind_spot() -> None:
    """CTC scores whose best class is the blank at every step: every sample reads nothing."""
    blank = np.zeros((10, 12, 5), dtype=np.float32)  # [N, steps, classes]
    blank[:, :, 0] = 5.0
    (note,) = Budget({"logits": blank}, {}, metric="sequence").blind_spots()
    assert note.startswith("logits: the original answers nothing for all 10 samples, so sequence agreement")
    read = blank.copy()
    read[: len(read) // 2, 3, 2] = 9.0  # half the samples read one symbol
    assert Budget({"logits": read}, {}, metric="sequence").blind_spots() == []


def test_a_class_label_output_is_scored_against_the_labels() -> None:
    """A scikit-learn label output (or an ArgMax) was scored as agreement with the original ('exact 100%'
    beside the classifier's real 98%): with labels it is now the share of right classes."""
    from onnxsat.metrics.base import METRICS

    reference = np.array([0, 1, 2, 2], dtype=np.int64)
    candidate = np.array([0, 1, 2, 1], dtype=np.int64)
    labels = np.array([0, 1, 1, 1], dtype=np.int64)
    label = METRICS["label"]
    assert label.measure(reference, candidate, labels).value == 0.75
    assert label.measure(reference, candidate, None).value == 0.75
    assert label.measure(reference, reference, labels).value == 0.5
    assert label.blind_spot(np.zeros(40, dtype=np.int64)) == "answers class 0 for all 40 samples"


def flipped(labels: np.ndarray, classes: int, lost: int, won: int) -> tuple[np.ndarray, np.ndarray]:
    """(original, candidate) one-hot logits: the original wrong on the first ``won`` samples (which the
    candidate gets right), the candidate wrong on the next ``lost`` ones (which the original got right)."""
    original = np.eye(classes)[labels]
    candidate = original.copy()
    original[:won] = np.eye(classes)[(labels[:won] + 1) % classes]
    candidate[won : won + lost] = np.eye(classes)[(labels[won : won + lost] + 1) % classes]
    return original, candidate


def test_the_bound_adds_the_paired_sampling_error_of_the_drop() -> None:
    """1,000 samples, both at a 0.5% drop: 5 lost and none won is a drop the samples pin down; 30 lost and
    25 won nets the same by luck, and its bound at 90% confidence is over a 1% budget."""
    labels = np.arange(1000) % 10
    for lost, won, fits in ((5, 0, True), (30, 25, False)):
        original, candidate = flipped(labels, 10, lost, won)
        budget = Budget({"logits": original}, {"logits": 0}, labels, confidence=0.9)
        score = budget.score({"logits": candidate})
        assert score.drop == pytest.approx(0.005)
        differences = np.r_[np.ones(lost), -np.ones(won), np.zeros(1000 - lost - won)]
        error = np.std(differences, ddof=1) / np.sqrt(1000)
        assert score.bound == pytest.approx(0.005 + 1.2816 * error, rel=1e-3)
        assert score.fits(0.01) is fits
        assert Budget({"logits": original}, {"logits": 0}, labels).score({"logits": candidate}).bound == score.drop


def test_metrics_over_all_samples_at_once_have_no_bound_beyond_the_drop() -> None:
    """A detector's F1 is not a mean over samples: the drop is held against the budget as it is."""
    reference = yolo_like(4)
    budget = Budget({"output0": reference}, {"output0": 0}, confidence=0.95)
    candidate = reference.copy()
    candidate[:, 4:] *= 0.5
    score = budget.score({"output0": candidate})
    assert score.bound == score.drop


@pytest.mark.parametrize("confidence", [0.4, 1.0, 1.5])
def test_a_confidence_outside_half_to_one_is_refused(confidence: float) -> None:
    with pytest.raises(SettingsError, match="--confidence must be in"):
        Budget({"logits": RNG.normal(size=(4, 3))}, {"logits": 0}, confidence=confidence)


def test_labelled_data_the_original_gets_all_right_is_said_to_look_like_its_training_data() -> None:
    labels = np.arange(40) % 4
    perfect = Budget({"logits": np.eye(4)[labels]}, {"logits": 0}, labels)
    (note,) = perfect.blind_spots()
    assert "right on all 40 labelled samples" in note and "trained on" in note
    wrong_once = np.eye(4)[labels]
    wrong_once[0] = np.eye(4)[1]
    assert Budget({"logits": wrong_once}, {"logits": 0}, labels).blind_spots() == []


def test_held_out_data_refutes_a_budget_only_beyond_its_sampling_error() -> None:
    """2 of 397 held-out digits lost (0.504%) under a 0.5% budget, or 1 of 6 samples (16.67%) under 1%: the
    samples cannot tell, and the result is written with a warning. A drop well past its error is refuted."""
    from onnxsat.metrics.budget import HeldOut, OutputScore, Score

    def held(drop: float, error: float, samples: int, max_drop: float) -> HeldOut:
        score = Score((OutputScore("y", "top1", 1.0 - drop, 1.0, error=error),), samples, "agreement")
        return HeldOut.of("held", score, score, max_drop, confidence=0.99)

    flips = np.zeros(397)
    flips[:2] = 1
    digits = held(2 / 397, float(np.std(flips, ddof=1) / np.sqrt(397)), 397, 0.005)
    assert not digits.within_budget and not digits.refuted
    few = np.array([0, 0, 0, 0, 0, 1.0])
    assert held(1 / 6, float(np.std(few, ddof=1) / np.sqrt(6)), 6, 0.01).refuted is False
    pages = held(0.117, 0.01, 4, 0.01)  # IoU lost on every held-out page alike
    assert pages.refuted and not pages.within_budget
    assert held(0.0, 0.0, 10, 0.01).within_budget and HeldOut.of("h", pages.score, pages.score, None, 0.9).within_budget
    from onnxsat.metrics.text import held_out_text

    assert held_out_text(digits).endswith("(OUTSIDE the budget, within its sampling error)")
    assert held_out_text(pages).endswith("(OUTSIDE the budget beyond its sampling error)")
    assert "(4 samples the search never used)" in held_out_text(pages)
    assert held_out_text(held(0.0, 0.0, 10, 0.01)).endswith("drop 0.00% (inside the budget)")
    # 4 of 400 samples lost is a 1% drop, though 397/400 - 393/400 is 0.010000000000000009 in float.
    exact = Score((OutputScore("y", "top1", 393 / 400, 397 / 400),), 400, "accuracy")
    assert exact.fits(0.01) and HeldOut.of("held", exact, exact, 0.01, confidence=0.9).within_budget
    assert not Score((OutputScore("y", "top1", 392 / 400, 397 / 400),), 400, "accuracy").fits(0.01)


def test_metric_fidelity_is_auto_with_labels_ignored_in_every_budgeted_command() -> None:
    from onnxsat.compression.compress import CompressOptions
    from onnxsat.pruning.prune import PruneOptions
    from onnxsat.quantization.quantize import QuantizeOptions
    from onnxsat.sparsity.sparsify import SparsifyOptions

    for options in (
        QuantizeOptions(metric="fidelity"),
        SparsifyOptions(metric="fidelity"),
        PruneOptions(metric="fidelity"),
    ):
        options.check()
        assert (options.metric, options.fidelity) == ("auto", True), type(options).__name__
    compress = CompressOptions(data="digits", metric="fidelity")
    compress.check()
    assert (compress.metric, compress.fidelity) == ("auto", True)


def test_a_budget_on_few_samples_says_what_no_changed_answer_leaves_open() -> None:
    """13 face crops with no changed answer read "bound 0.00% at 99% confidence"; 3 held out then changed one.
    Below 30 samples of right-or-wrong answers the report says how many may change unseen (the exact bound for no
    event seen); the budget still judges the bound it has. A bound never passes 100%."""
    logits = RNG.normal(size=(13, 5))
    budget = Budget({"logits": logits}, {"logits": 0}, confidence=0.99)
    (note,) = budget.blind_spots()
    assert note.startswith(f"13 samples: with no answer changed among them, up to {1 - 0.01 ** (1 / 13):.0%} may")
    assert Budget({"logits": RNG.normal(size=(40, 5))}, {"logits": 0}, confidence=0.99).blind_spots() == []
    embedding = RNG.normal(size=(10, 8))  # a continuous measure: its own paired error, no note
    assert Budget({"embedding": embedding}, {"embedding": 0}, confidence=0.99).blind_spots() == []
    flipped = Budget({"logits": np.eye(5)[:4]}, {"logits": 0}, confidence=0.99)
    assert flipped.score({"logits": np.eye(5)[1:5]}).bound <= 1.0


def test_a_budget_finer_than_the_data_can_confirm_is_said() -> None:
    """No changed answer among 175 samples bounds the drop at 2.6% (99%, exact), not at the 0.00% the paired
    error gives: a 0.5% budget cannot be confirmed there, and the note says how many samples would."""
    note = resolution_note(175, ["top1"], 0.99, 0.005)
    assert note is not None and "up to 2.6% on data like them" in note and "about 919 samples" in note
    assert resolution_note(2000, ["top1"], 0.99, 0.005) is None  # enough samples
    assert resolution_note(175, ["snr"], 0.99, 0.005) is None  # not right-or-wrong answers
    assert resolution_note(20, ["top1"], 0.99, 0.005) is None  # the few-samples note covers it


def test_a_candidate_output_of_another_size_is_one_line_naming_it() -> None:
    """A detector's box count follows the data: 100 boxes from the float model, 38 from its int8 form, and
    cosine ended in numpy's broadcast error (exit 1, an internal error)."""
    boxes = RNG.uniform(0, 320, size=(1, 100, 4))
    budget = Budget({"boxes": boxes}, {})
    with pytest.raises(DataError, match=r"output 'boxes' has \[38, 4\] per sample from a candidate and \[100, 4\]"):
        budget.score({"boxes": boxes[:, :38]})


def test_rows_of_yes_no_labels_score_the_output_they_fit_and_leave_the_others_to_agreement() -> None:
    """A watermark decoder's 32 bits (or a tagger's tags): rows of 0 and 1 per sample, read as booleans."""
    bits = RNG.normal(size=(6, 32)) * 5
    labels = bits >= 0
    labels[0, :3] = ~labels[0, :3]  # the original gets three of 192 bits wrong
    budget = Budget({"bits": bits, "embedding": RNG.normal(size=(6, 16))}, {}, labels)
    assert budget.metrics["bits"].name == "tags" and budget.metrics["embedding"].name == "cosine"
    assert budget.baseline.kind == "accuracy"
    assert next(o for o in budget.baseline.outputs if o.output == "bits").value == pytest.approx(189 / 192)
    with pytest.raises(DataError, match="--metric tags reads them"):
        Budget({"bits": bits}, {}, labels, metric="top1")
