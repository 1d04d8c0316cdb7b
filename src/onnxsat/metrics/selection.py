"""Which metric fits an output, chosen from its shape, values and name (``--metric auto``).

The rules, first match wins, each with the reason the report prints:
- one integer or boolean per sample: ``label`` (a predicted class, scored against the labels);
- other integer or boolean values: ``exact``;
- as many real values per sample as the data's regression targets, which the original predicts better than
  their mean: ``r2`` against them; one value per sample that follows whole-number labels other than 0 and 1
  (an age in years: R² 0.5 or more for the original): ``r2`` against them too;
- one value per sample: ``binary`` (a probability or a logit), unless its values are all of one sign outside
  [0, 1] (a regression: an intensity, an age, a price) or its name is a regression's (``variable``, ``value``,
  ``target``): ``r2`` against the original's values; ``binary`` reads labels only when they are 0 and 1;
- named like an embedding (``embed``, ``hidden``, ``feature``, ``pooler``, ``vector``) or a latent
  (``latent``, or the word ``mu``, ``logvar``, ``z``: a VAE's encoder): ``cosine``;
- named like a recurrent state (the whole word ``state``, ``cell``, ``hn``, ``cn``...), unless also like scores:
  ``cosine``;
- named like a reconstruction (``recon``: a VAE's decoded pixels): ``snr``;
- the boxes of an Ultralytics export (its metadata names the task and the classes): ``detection`` over
  those class rows only;
- one channel of values along a last axis (``[N, 1, T]``: a vocoder's waveform, a speech model's
  embedding), unless its rows are probabilities or its name says scores: ``snr``, since the position of
  the loudest sample is no class;
- a detector's answer per image, boxes ``[K, 4]`` with scores ``[K]`` (labels, masks, keypoints), as
  torchvision's R-CNNs, RetinaNet, SSD and FCOS export it: chosen by the budget over those outputs together
  (``instances``), not here; scored without its boxes, scores sorted best first get ``r2`` against the
  original's and keypoints ``[K, J, 2 or 3]`` ``snr``;
- one score per class (``[N, C]``, ``[N, C, 1, 1]``): ``top1``, unless the values are all of one sign outside
  [0, 1] and the same one is the largest in every sample (several regression values: a speech-quality model's
  signal, background and overall scores): ``r2`` against the original's values;
- ``[N, K, A]`` with a short axis of box coordinates in pixels then scores in [0, 1]: ``detection``;
- ``[N, T, V]`` scores (not probabilities) over a vocabulary of 10,000 or more: ``tokens``;
- ``[N, T, C]`` whose rows are probabilities or log-probabilities, whose time axis came before the batch
  (``[T, N, C]``, as CTC models export), or named like logits: ``sequence``;
- other ``[N, T, C]`` scores with a clear best class at most steps, several classes used (a tagger's
  emissions): ``tokens``, the share of steps whose best class is kept;
- maps ``[N, C, H, W]`` (or ``[N, H, W]`` of probabilities) that show classes: class probabilities per
  pixel, five channels or more (segmentation logits), a name like a mask or scores, or one channel of
  values mostly near 0 or 1 (a text detector's probability map): ``map``;
- other maps (an image, a diffusion model's latents or noise, a depth map): ``snr``, the error's energy
  against the image's variation about its mean, since the best class of R, G and B or a threshold at 0.5 of
  a grey image means nothing;
- anything else: ``cosine``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import numpy as np

from onnxsat.metrics.base import (
    METRICS,
    Labels,
    Metric,
    is_tags,
    is_targets,
    per_sample_shape,
    shape_text,
    unit_interval,
)
from onnxsat.metrics.classification import class_scores, decision_labels
from onnxsat.metrics.dense_maps import map_shape
from onnxsat.metrics.detection import boxes_in_pixels, yolo_layout
from onnxsat.metrics.instances import detector_role

_ROW_TOLERANCE = 1e-3
LANGUAGE_MODEL_VOCABULARY = 10_000
"""Per-step scores over at least this many classes, not probabilities, are a language model's next-token
logits (GPT-2: 50,257; BERT: 30,522). Text recognizers read fewer characters (PP-OCR's Chinese one 6,625)
and export probabilities."""
PROBABILITIES = "probabilities per step"
_SEQUENCE_NAMES = ("logit", "ctc", "softmax", "prob")
_EMBEDDING_NAMES = ("embed", "hidden", "feature", "pooler", "vector")
_STATE_WORDS = frozenset({"state", "states", "cell", "hn", "cn", "h0", "c0", "hx", "cx"})
"""Whole words that name a recurrent net's state (madmom's ``lstm_cell_squeeze_1_19``, ``hn``/``cn``): values the
next step reads, compared by direction, not 25 classes whose best one flips at any change."""
_LATENT_WORDS = frozenset({"mu", "logvar", "log_var", "z", "z_mean", "z_log_var"})
"""Whole words (split at anything but letters and digits) that name a VAE encoder's outputs: too short to
look for inside other names (``mul``, ``zoom``)."""
_REGRESSION_WORDS = frozenset({"variable", "value", "values", "target", "regression", "regressor", "price"})
"""Whole words naming a one-value output as a regression's, whatever the sign of its values: ``variable`` is
what skl2onnx and onnxmltools call every regressor's output (a scikit-learn MLP, LightGBM, XGBoost)."""
_REGRESSOR_OUTPUTS = frozenset({"gpmean", "gpcovstd"})
"""Whole names converters give regressors' outputs: skl2onnx's Gaussian process (its mean and standard deviation;
the mean's values are of both signs, the deviation's all in [0, 1e-5] on training rows: no rule on values tells)."""
_DECISION_WORDS = frozenset(
    {"prob", "probs", "probability", "probabilities", "logit", "logits", "score", "scores", "class", "label"}
)
"""Words that make a name with a regression's word in it a decision's (``target_prob``, ``value_logits``)."""
_MAP_NAMES = ("seg", "mask", "logit", "class", "prob", "label", "sigmoid", "softmax", "score", "heatmap")
"""Names of outputs that hold per-pixel classes or scores (PP-OCR's ``sigmoid_0.tmp_0``)."""
MAP_CLASSES = 5
"""From this many channels on, a map is read as per-pixel class scores (VOC 21, Cityscapes 19); fewer may
be an image's channels (3) or a latent's (4)."""
DECIDED_SHARE = 0.75
"""A one-channel map in [0, 1] is a probability map when at least this share of its values lies below 0.1
or above 0.9; an image's grey levels fill the middle."""
_CACHE_NAMES = ("present", "past_key", "key_cache", "value_cache", "kv_cache")
"""Names exporters give a decoder's key/value cache (optimum's ``present.0.key``): activations the next step
reads, compared by direction like any hidden state, never as a map of values in [0, 1]."""


FOLLOWS_LABELS = 0.5
"""The R² of the original against whole-number labels from which a one-value output reads as a regression on
them (an age model's years) rather than a score beside a classifier's labels (another head's digit classes
have no such fit)."""


@dataclass(frozen=True)
class Choice:
    metric: Metric
    why: str


def choose(
    name: str, reference: np.ndarray, batch_axis: int, detector: Metric | None = None, labels: Labels = None
) -> Choice:
    """The metric for output ``name`` of the original (``reference``, samples first; ``batch_axis``: where
    the model had the batch), with the reason. ``detector``: the ``detection`` the model's exporter
    describes (``detection.exported_detector``), taken for an output it fits; ``labels``: the data's, when
    it has them (the chosen metric reads them only where they fit this output)."""
    shape = per_sample_shape(reference)
    text = shape_text(shape)
    if not np.issubdtype(reference.dtype, np.floating):
        if int(np.prod(shape, dtype=np.int64)) == 1:
            return Choice(METRICS["label"], f"one {reference.dtype} class per sample")
        return Choice(METRICS["exact"], f"{reference.dtype} values")
    if is_tags(labels):
        if METRICS["tags"].fits(reference, batch_axis) is None and labels.shape[1] == np.prod(shape, dtype=np.int64):
            why = f"{labels.shape[1]} yes/no labels per sample in the data, one per value ({text} per sample)"
            return Choice(METRICS["tags"], why)
        labels = None  # rows of tags for another output: this one is compared with the original
    regression = _regression_on(reference, labels)
    if regression is not None:
        return regression
    if int(np.prod(shape, dtype=np.int64)) == 1:
        if _one_sign_beyond_unit(np.asarray(reference, dtype=np.float64)):
            return Choice(
                _unlabelled(METRICS["r2"]),
                "one value per sample, all of one sign and not in [0, 1] (a regression, not a probability or a "
                "logit): R² against the original's values",
            )
        words = set(re.split(r"[^a-z0-9]+", name.lower()))
        if (_REGRESSION_WORDS & words and not _DECISION_WORDS & words) or name.lower() in _REGRESSOR_OUTPUTS:
            return Choice(
                _unlabelled(METRICS["r2"]),
                f"one value per sample, named like a regression's ({name!r}): R² against the original's values",
            )
        if labels is not None and not is_targets(labels) and not decision_labels(labels):
            return Choice(
                _unlabelled(METRICS["binary"]),
                "one value per sample; the labels go beyond 0 and 1, so decisions are compared with the original's",
            )
        return Choice(METRICS["binary"], "one value per sample")
    lowered = name.lower()
    if any(word in lowered for word in _EMBEDDING_NAMES):
        return Choice(METRICS["cosine"], f"named like an embedding ({name!r}, {text} per sample)")
    words = set(re.split(r"[^a-z0-9]+", lowered))
    if _STATE_WORDS & words and not _DECISION_WORDS & words and not any(word in lowered for word in _MAP_NAMES):
        return Choice(METRICS["cosine"], f"named like a recurrent state ({name!r}, {text} per sample)")
    if "latent" in lowered or _LATENT_WORDS & words:
        return Choice(METRICS["cosine"], f"named like a latent ({name!r}, {text} per sample)")
    if "recon" in lowered:
        return Choice(METRICS["snr"], f"named like a reconstruction ({name!r}, {text} per sample)")
    if any(word in lowered for word in _CACHE_NAMES):
        return Choice(METRICS["cosine"], f"named like a key/value cache ({name!r}, {text} per sample)")
    if detector is not None and detector.fits(reference, batch_axis) is None:
        return Choice(detector, f"the boxes of an Ultralytics export ({text} per sample)")
    if _one_channel(shape) and not _named_scores(lowered) and _sequence_reason(name, reference, 0) is None:
        return Choice(
            METRICS["snr"],
            f"one channel of {shape[-1]:,} values per sample ({text}: a signal or an embedding, not one score per "
            "class): its error against its variation",
        )
    alone = _detector_part(name, reference)
    if alone is not None:
        return alone
    if class_scores(reference) is not None:
        return _values_or_classes(reference, text)
    if len(shape) == 2:
        layout = yolo_layout(reference)
        if layout is not None and boxes_in_pixels(reference, layout):
            order = "[4+classes, anchors]" if layout.channels_first else "[anchors, 5+classes]"
            return Choice(METRICS["detection"], f"YOLO-style {order} per sample ({text}), boxes in pixels")
        why = _sequence_reason(name, reference, batch_axis)
        if shape[1] >= LANGUAGE_MODEL_VOCABULARY and why != PROBABILITIES:
            return Choice(METRICS["tokens"], f"next-token scores over a vocabulary of {shape[1]:,} ({text} per sample)")
        if why is not None:
            return Choice(METRICS["sequence"], f"{why} ({text} per sample)")
        if unit_interval(np.asarray(reference, dtype=np.float64)) and map_shape(reference) is not None:
            return _map_or_image(lowered, reference, f"a map of values in [0, 1] per sample ({text})", text)
        clear = _clear_classes(reference)
        if clear is not None:
            return Choice(METRICS["tokens"], f"per-step class scores ({text} per sample): {clear}")
    elif len(shape) == 3 and map_shape(reference) is not None:
        return _map_or_image(lowered, reference, f"{shape[0]}-channel maps per sample ({text})", text)
    return Choice(METRICS["cosine"], f"no specific metric fits {text} per sample")


SORTED_DETECTIONS = 10
"""Scores named so, this many or more per sample and sorted best first in every sample, are a detector's (100
from a torchvision R-CNN); a classifier's few class scores can be in one order on every sample (a two-class
model whose first class always wins)."""


def _detector_part(name: str, reference: np.ndarray) -> Choice | None:
    """For a detector's scores or keypoints scored without its boxes (``--metric-output``; with them, the budget
    scores them all as detections): the scores of its K detections, best first, are no class scores, and its
    keypoints' coordinates no class map."""
    shape = per_sample_shape(reference)
    role = detector_role(name)
    if role == "scores" and len(shape) == 1 and shape[0] >= SORTED_DETECTIONS:
        values = np.asarray(reference, dtype=np.float64)
        if unit_interval(values) and np.all(np.diff(values, axis=1) <= 0):
            return Choice(
                _unlabelled(METRICS["r2"]),
                f"a detector's scores, best first ({shape_text(shape)} per sample), not one score per class: R² "
                "against the original's values",
            )
    if role == "keypoints" and len(shape) == 3 and shape[2] in (2, 3):
        return Choice(
            METRICS["snr"],
            f"a detector's keypoints ({shape_text(shape)} per sample: coordinates, not a class map): their error "
            "against their variation",
        )
    return None


def _regression_on(reference: np.ndarray, labels: Labels) -> Choice | None:
    """``r2`` against the labels when they are this output's regression targets (see ``choose``), else None."""
    if labels is None or not len(labels):
        return None
    values = int(np.prod(per_sample_shape(reference), dtype=np.int64))
    wanted = int(np.prod(labels.shape[1:], dtype=np.int64))
    if values != wanted or (not is_targets(labels) and (values != 1 or decision_labels(labels))):
        return None
    fit = _fit(reference, labels)
    if is_targets(labels) and fit > 0:
        count = "one value" if values == 1 else f"{values} values"
        why = f"{count} per sample, as the data's regression targets: R² against them (the original's {fit:.3f})"
        return Choice(METRICS["r2"], why)
    if not is_targets(labels) and fit >= FOLLOWS_LABELS:
        return Choice(
            METRICS["r2"],
            f"one value per sample that follows the whole-number labels (R² {fit:.3f} for the original): a regression "
            "on them, R² against them",
        )
    return None


def _fit(reference: np.ndarray, labels: np.ndarray) -> float:
    """The original's R² against ``labels`` (0 when it gives NaN or infinity: no fit)."""
    with np.errstate(all="ignore"):
        value = METRICS["r2"].measure(np.asarray(labels, np.float64), reference, None).value
    return value if np.isfinite(value) else float("-inf")


def _values_or_classes(reference: np.ndarray, text: str) -> Choice:
    """``top1`` for one score per class, or ``r2`` for several regression values per sample: all of one sign
    outside [0, 1] (neither probabilities nor logits, which take both signs) with the same one the largest in
    every sample, where ``top1`` could see no damage anyway. DNSMOS's [signal, background, overall] mean
    opinion scores (1 to 5) were read as three classes, "class 0" in every sample."""
    values = np.asarray(class_scores(reference), dtype=np.float64)
    if len(values) >= 2 and _one_sign_beyond_unit(values) and np.ptp(np.argmax(values, axis=1)) == 0:
        return Choice(
            _unlabelled(METRICS["r2"]),
            f"{values.shape[1]} values per sample ({text}), all of one sign and not in [0, 1], value "
            f"{int(np.argmax(values[0]))} the largest in every sample: regression values, not class scores; R² "
            "against the original's values",
        )
    return Choice(METRICS["top1"], f"one score per class per sample ({text})")


def _one_sign_beyond_unit(values: np.ndarray) -> bool:
    """Whether the finite values are all of one sign and not all in [0, 1]: a regression's, neither a probability's
    nor a logit's."""
    finite = values[np.isfinite(values)]
    return bool(finite.size) and not unit_interval(values) and (finite.min() >= 0 or finite.max() < 0)


def _unlabelled(metric: Metric) -> Metric:
    """``metric`` scoring agreement with the original only: for an output the data's labels do not describe."""
    return replace(metric, uses_labels=False, uses_targets=False)


CLEAR_GAP = 1.75
"""How many times the median gap between a step's best and second score (in units of the step's spread) must
exceed that of random rows of as many values for ``[N, T, C]`` scores to read as a class per step: a tagger's
emissions over 59 tags, 0.69-0.80 against 0.31; a random projection over 4 values, 0.86 against 0.86."""
CLEAR_STEPS = 4096
"""Steps the gap is measured on (the first ones): enough for a median, cheap on any output."""
ONE_CLASS_SHARE = 0.95
"""A best class at more than this share of the steps is one feature that always wins, not a class per step (a
tagger's commonest tag, "outside" in named-entity tagging, can be 80-90%)."""


def _clear_classes(reference: np.ndarray) -> str | None:
    """Why ``[N, T, C]`` values are a class per step (a tagger's emissions: cosine over them let half the sentences
    change their tags inside a 1% "drop"), or None: a clear best class at most steps, and several classes used
    (a hidden state whose one large feature wins at every step is no class)."""
    rows = np.asarray(reference).reshape(-1, reference.shape[-1])[:CLEAR_STEPS].astype(np.float64)
    if rows.shape[-1] < 2 or len(rows) < 2:
        return None
    gap, chance = _median_gap(rows), _random_gap(rows.shape[-1])
    counts = np.bincount(rows.argmax(axis=-1), minlength=rows.shape[-1])
    used, commonest = int(np.count_nonzero(counts)), float(counts.max() / len(rows))
    if gap < CLEAR_GAP * chance or used < 3 or commonest > ONE_CLASS_SHARE:
        return None
    return (
        f"a clear best class at most steps (median gap {gap:.2f} of a step's spread, {chance:.2f} for random rows), "
        f"{used} classes used"
    )


def _median_gap(rows: np.ndarray) -> float:
    """Median over rows of (best - second best) / the row's standard deviation."""
    ordered = np.sort(rows, axis=-1)
    return float(np.median((ordered[:, -1] - ordered[:, -2]) / np.maximum(rows.std(axis=-1), 1e-12)))


@functools.cache
def _random_gap(width: int) -> float:
    """:func:`_median_gap` of seeded standard-normal rows of ``width`` values: what no class structure gives."""
    return _median_gap(np.random.default_rng(0).standard_normal((2048, width)))


def _one_channel(shape: tuple[int, ...]) -> bool:
    """``[1, T]`` (or ``[1, 1, T]``) per sample: the values lie along the last axis behind a channel axis of
    one; a classifier's scores come first (``[C]``, ``[C, 1, 1]``)."""
    return len(shape) >= 2 and shape[-1] >= 2 and all(d == 1 for d in shape[:-1])


def _named_scores(lowered: str) -> bool:
    return any(word in lowered for word in (*_SEQUENCE_NAMES, "score", "class", "label"))


def _map_or_image(lowered: str, reference: np.ndarray, why: str, text: str) -> Choice:
    """``map`` for a map that shows classes (see the module doc), ``snr`` for an image-like one."""
    shape = map_shape(reference)
    assert shape is not None
    values = np.asarray(reference, dtype=np.float64).reshape(len(reference), shape[0], -1)
    channels = shape[0]
    if any(word in lowered for word in _MAP_NAMES) or channels >= MAP_CLASSES:
        return Choice(METRICS["map"], why)
    if channels > 1 and values.min() >= 0 and np.allclose(values.sum(axis=1), 1.0, atol=_ROW_TOLERANCE):
        return Choice(METRICS["map"], f"class probabilities per pixel ({text} per sample)")
    if channels == 1 and unit_interval(values):
        decided = np.count_nonzero((values < 0.1) | (values > 0.9)) / values.size
        if decided >= DECIDED_SHARE:
            return Choice(METRICS["map"], f"a probability map, {decided:.0%} of it near 0 or 1 ({text} per sample)")
    return Choice(METRICS["snr"], f"an image-like map ({text} per sample): its error against its variation")


def _sequence_reason(name: str, reference: np.ndarray, batch_axis: int) -> str | None:
    values = np.asarray(reference, dtype=np.float64)
    if batch_axis == 1:
        return "time-major scores [T, N, classes]"
    sums = values.sum(axis=-1)
    if values.min() >= 0 and np.allclose(sums, 1.0, atol=_ROW_TOLERANCE):
        return PROBABILITIES
    if values.max() <= 0:
        top = values.max(axis=-1, keepdims=True)
        log_sums = np.log(np.exp(values - top).sum(axis=-1)) + top[..., 0]
        if np.allclose(log_sums, 0.0, atol=_ROW_TOLERANCE):
            return "log-probabilities per step"
    lowered = name.lower()
    if any(word in lowered for word in _SEQUENCE_NAMES):
        return f"scores per step named {name!r}"
    return None
