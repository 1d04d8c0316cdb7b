"""Scoring candidates against the original on one dataset: the metric of every scored output, and a
drop that is the worst output's.

A budgeted pass builds one :class:`Budget` from the original's outputs, then asks it for each candidate's
:class:`Score`. The budget applies to the outputs the user names (all but fed-back state by default);
each is scored with its metric (``auto`` chooses per output), and the output that lost most counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from onnxsat.errors import DataError, SettingsError
from onnxsat.metrics import instances
from onnxsat.metrics.base import (
    METRICS,
    VARIED_SAMPLES,
    Labels,
    Metric,
    is_tags,
    is_targets,
    joined,
    ragged,
    reads,
    shape_text,
)
from onnxsat.metrics.custom import is_user_spec, user_metric
from onnxsat.metrics.detection import exported_detector
from onnxsat.metrics.selection import choose
from onnxsat.metrics.yolo_masks import exported_segmenter
from onnxsat.options import option

AUTO = "auto"
FIDELITY = "fidelity"
"""``--metric fidelity``: agreement with the original's outputs, labels ignored (as ``--fidelity``), each
output scored by the metric ``auto`` chooses for it."""

MetricSpec = str | Callable[[np.ndarray, np.ndarray, Labels], float]
"""A built-in metric's name, ``auto``, ``module:function``, or (Python API) a function."""


def metric_names() -> list[str]:
    return [AUTO, *METRICS]


def metric_option() -> Any:
    """The ``metric`` field of a budgeted pass's options (one declaration: its flag, help and default)."""
    return option(
        AUTO,
        metavar="METRIC",
        help="how outputs are scored: auto (default: chosen per output), fidelity (as auto, labels ignored:"
        " agreement with the original), "
        + ", ".join(n for n in metric_names() if n != AUTO)
        + ", or package.module:function (map: IoU of dense maps such as segmentation masks; boxes are"
        " detection's, F1 against the original's boxes)",
    )


def with_fidelity(spec: MetricSpec, fidelity: bool) -> tuple[MetricSpec, bool]:
    """(metric, fidelity) with ``--metric fidelity`` read as ``--metric auto --fidelity``."""
    return (AUTO, True) if spec == FIDELITY else (spec, fidelity)


def resolve(spec: MetricSpec) -> Metric | None:
    """The metric ``spec`` names (None for ``auto``); an unknown name or unimportable function is one line."""
    if is_user_spec(spec):
        return user_metric(spec)  # type: ignore[arg-type]
    if spec == AUTO:
        return None
    if str(spec) not in METRICS:  # the names --metric takes beside the registry's
        raise SettingsError(f"unknown metric {spec!r}; choose from {', '.join([AUTO, FIDELITY, *METRICS])}")
    return METRICS.lookup(str(spec))


def check_spec(spec: MetricSpec) -> None:
    """Refuse a metric that does not exist before any work (imports a user's module)."""
    resolve(spec)


@dataclass(frozen=True)
class OutputScore:
    output: str
    metric: str
    value: float
    baseline: float
    details: dict[str, float] = field(default_factory=dict)
    error: float = 0.0
    """Standard error of ``drop`` from the paired per-sample measures (0 when the metric has none): how
    far the drop on these samples may be from the drop on the data they were drawn from."""
    sampled: bool = True
    """The metric measures each sample (so ``error`` is known); False for a measure over all samples at once
    (F1 over boxes, SNR, a user's metric returning one score), whose drop is held as it is."""

    @property
    def drop(self) -> float:
        return self.baseline - self.value


COLLAPSE_DROP = 0.10
"""A drop this large at a level the user fixed (no budget to hold it to) is warned about, not only printed:
half the weights of a Paddle CNN zeroed took it from 95% to chance with "verification PASSED" and exit 0."""


def collapse_warning(score: Score | None, advice: str) -> str | None:
    """One line when ``score`` (a model made at a fixed level) dropped by ``COLLAPSE_DROP`` or more, else None."""
    if score is None or score.drop < COLLAPSE_DROP:
        return None
    worst = score.worst
    return (
        f"{worst.output}: {worst.metric} fell from {worst.baseline:.2%} to {worst.value:.2%} at this level on "
        f"{score.samples} samples: {advice}"
    )


@dataclass(frozen=True)
class Score:
    """One model's figures on the data: per scored output, and the worst output's as the whole."""

    outputs: tuple[OutputScore, ...]
    samples: int
    kind: str
    """``accuracy`` when a metric scored against labels, else ``agreement`` (with the original)."""
    z: float = 0.0
    """Standard errors added to each output's drop before it is held against a budget (see ``bound``)."""

    @property
    def bound(self) -> float:
        """The drop the budget is held against: each output's drop plus ``z`` standard errors, the worst.
        Many samples changing both ways can net out to a small drop on the search data by luck; a few
        changing cannot, and the bound tells those apart."""
        return max(min(o.drop + self.z * o.error, o.baseline) for o in self.outputs)  # a value cannot fall below 0

    def fits(self, max_drop: float) -> bool:
        """Inside the budget at the budget's confidence (``bound``)."""
        return within(self.bound, max_drop)

    @property
    def worst(self) -> OutputScore:
        return max(self.outputs, key=lambda o: (o.drop, -o.value))

    @property
    def value(self) -> float:
        return self.worst.value

    @property
    def drop(self) -> float:
        return self.worst.drop

    @property
    def metric(self) -> str:
        return self.worst.metric

    def detail(self, name: str) -> float | None:
        """A finer figure of the worst output (``top5`` beside ``top1``)."""
        return self.worst.details.get(name)

    def headline(self) -> dict[str, object]:
        """The figures a report's JSON puts beside the per-output ones: the worst output's metric, value, drop."""
        return {"metric": self.metric, "value": self.value, "drop": self.drop}

    def text(self) -> str:
        """``top1 98.24%`` or, for several outputs, each one: ``output: sequence 87.50%, ...``."""
        if len(self.outputs) == 1:
            return f"{self.outputs[0].metric} {self.outputs[0].value:.2%}"
        return ", ".join(f"{o.output}: {o.metric} {o.value:.2%}" for o in self.outputs)


class Budget:
    """The metrics of the scored outputs, fixed on the original's outputs; scores candidates."""

    def __init__(
        self,
        reference: Mapping[str, np.ndarray],
        batch_axes: Mapping[str, int | None],
        labels: Labels = None,
        metric: MetricSpec | Mapping[str, Metric] = AUTO,
        outputs: Sequence[str] = (),
        exclude: Collection[str] = (),
        confidence: float = 0.5,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """``outputs``: the scored outputs (default: all but ``exclude``, the fed-back state); ``metric``:
        a spec for all of them, or the choices of another budget (to score held-out data the same way);
        ``confidence``: how sure a candidate's ``Score.fits`` must be that its drop on data like these
        samples is inside the budget (0.5: the drop on the samples themselves); ``metadata``: the model's
        (an exporter's description of its outputs)."""
        self.reference = dict(reference)
        self.labels = labels
        self.z, self.confidence = confidence_z(confidence), confidence
        self.empty_outputs: list[str] = []
        """Outputs left unscored because the data gives them no element (set by the scorer that ran them)."""
        self._per_sample: dict[str, np.ndarray | None] = {}
        names = list(outputs) or [name for name in reference if name not in exclude]
        unknown = [name for name in names if name not in reference]
        if unknown:
            raise SettingsError(
                f"--metric-output {unknown[0]!r}: the model has no such output (it has: {', '.join(reference)})"
            )
        if not names:
            raise SettingsError("no output is left to score: every output is fed back as state")
        self.metrics: dict[str, Metric] = {}
        self.reasons: dict[str, str] = {}
        self.folded: dict[str, str] = {}
        """Outputs scored as part of another's answer (a detector's labels and scores, with its boxes): by name,
        the output whose metric scores them."""
        self._views: dict[str, np.ndarray] = {}
        fixed = None if isinstance(metric, Mapping) else resolve(metric)
        detector = exported_detector(metadata or {})
        if fixed is not None and detector is not None and fixed.name == detector.name:
            fixed = detector
        together = None
        if isinstance(metric, Mapping):
            joins = [m.joins for m in metric.values() if m.joins]
        else:
            together = self._detector(names, fixed)
            if together is None and (fixed is None or fixed.name == "detection"):
                together = exported_segmenter(metadata or {}, self.reference, names)
            joins = [together.joins] if together is not None else []
        for parts in joins:
            self.folded.update({name: parts[0][1] for _, name in parts[1:]})
        for name in names:
            output, axis = self.reference[name], batch_axes.get(name) or 0
            if name in self.folded:
                continue
            if isinstance(metric, Mapping) and metric[name].joins:
                self.metrics[name], self.reasons[name] = metric[name], "as on the search data"
                continue
            if together is not None and name == together.joins[0][1]:
                why = "given" if fixed is not None else f"auto: {instances.describe(together, self.reference)}"
                self.metrics[name], self.reasons[name] = together, why
                continue
            _one_array(name, output, len(reference))
            if isinstance(metric, Mapping):
                self.metrics[name], self.reasons[name] = metric[name], "as on the search data"
            elif fixed is None:
                choice = choose(name, output, axis, detector, labels)
                self.metrics[name], self.reasons[name] = choice.metric, f"auto: {choice.why}"
            else:
                if labels is not None and is_targets(labels) and fixed.uses_labels and not fixed.uses_targets:
                    raise DataError(
                        f"--metric {fixed.name} scores against class labels, and the data's labels are a regression's "
                        "targets (not whole numbers 0 or more, or several per sample): --metric r2 reads them, "
                        "--fidelity ignores them"
                    )
                if is_tags(labels) and (fixed.uses_labels or fixed.uses_targets) and not fixed.uses_tags:
                    raise DataError(
                        f"--metric {fixed.name} scores against one label per sample, and the data's labels are rows of "
                        "0 and 1 (several yes/no labels per sample): --metric tags reads them, --fidelity ignores them"
                    )
                why_not = fixed.fits(output, axis)
                if why_not is not None:
                    raise SettingsError(
                        f"--metric {fixed.name} does not fit output {name!r}: {why_not}"
                        + ("; name the outputs to score with --metric-output" if len(reference) > 1 else "")
                    )
                self.metrics[name], self.reasons[name] = fixed, "given"
        self.baseline = self._score(self.reference, None)
        self._signal: float | None = None

    def _detector(self, names: Sequence[str], fixed: Metric | None) -> Metric | None:
        """``detection`` over a detector's boxes, labels and scores (see ``instances``) among ``names``, for
        ``auto`` or a given ``detection`` (which then takes boxes without scores too), else None."""
        if fixed is not None and fixed.name != "detection":
            return None
        if fixed is not None and any(fixed.fits(self.reference[name], 0) is None for name in names):
            return None  # a YOLO-style output the given metric reads as it is
        return instances.find(self.reference, names, need_scores=fixed is None)

    def _view(self, outputs: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        """What output ``name``'s metric reads of ``outputs``: the output, or the parts it joins."""
        metric = self.metrics[name]
        if outputs is self.reference and name in self._views:
            return self._views[name]
        view = joined(outputs, metric.joins) if metric.joins else outputs[name]
        if outputs is self.reference:
            self._views[name] = view
        return view

    def score(self, outputs: Mapping[str, np.ndarray]) -> Score:
        return self._score(outputs, self.baseline)

    def drop(self, outputs: Mapping[str, np.ndarray]) -> tuple[float, Score]:
        score = self.score(outputs)
        return score.drop, score

    def _score(self, outputs: Mapping[str, np.ndarray], baseline: Score | None) -> Score:
        scored = []
        for name, metric in self.metrics.items():
            labels = self.labels if reads(metric, self.labels) else None
            if not metric.joins:  # joined parts (a detector's K boxes) may differ in size from the original's
                _same_size(name, self.reference[name], outputs[name], metric)
            measure = metric.measure(self._view(self.reference, name), self._view(outputs, name), labels)
            if baseline is None:
                self._per_sample[name] = measure.per_sample
                base = measure.value
            else:
                base = next(o.value for o in baseline.outputs if o.output == name)
            error = paired_error(self._per_sample.get(name), measure.per_sample)
            sampled = measure.per_sample is not None
            scored.append(OutputScore(name, metric.name, measure.value, base, dict(measure.details), error, sampled))
        kind = "accuracy" if self._reads_labels() else "agreement"
        samples = len(next(iter(self.reference.values())))
        return Score(tuple(scored), samples, kind, self.z)

    def _reads_labels(self) -> bool:
        return any(reads(metric, self.labels) for metric in self.metrics.values())

    def distortion(self, outputs: Mapping[str, np.ndarray]) -> float:
        """How far ``outputs`` moved from the original's: ||outputs - original|| / ||original|| over every
        scored output. Unlike a metric (steps of one sample) it moves smoothly, so it can rank what hurts."""
        names = [part for name in self.metrics for part in self._moving(name)]
        if self._signal is None:
            self._signal = sum(_sum_of_squares(self.reference[name]) for name in names)
        noise = sum(_sum_of_squares(self.reference[name], outputs[name]) for name in names)
        return float(np.sqrt(noise) / max(np.sqrt(self._signal), 1e-12))

    def _moving(self, name: str) -> list[str]:
        """The outputs the distortion of output ``name`` is measured on: it, or the real-valued parts it joins
        (a detector's labels are classes, no values to move)."""
        metric = self.metrics[name]
        if not metric.joins:
            return [name]
        return [part for _, part in metric.joins if _real(self.reference[part])]

    def blind_spots(self, max_drop: float | None = None) -> list[str]:
        """Warnings for the report: scored outputs whose agreement with the original cannot see damage,
        because the original gives (nearly) every sample of the data the same answer and there are no labels;
        with labels, outputs the original gets right on every sample, as on the data it was trained on; too few
        samples to say anything, or (given ``max_drop``) to confirm that budget."""
        notes = [
            f"{name}: no element on the data (an empty output), so it is not scored" for name in self.empty_outputs
        ]
        names = [m.name for m in self.metrics.values()]
        few = few_samples_note(self.baseline.samples, names, self.confidence)
        coarse = resolution_note(self.baseline.samples, names, self.confidence, max_drop) if max_drop else None
        notes += [note for note in (few, coarse) if note]
        if self.labels is not None and self.metrics and not self._reads_labels():
            scored = ", ".join(f"{name} by {m.name}" for name, m in self.metrics.items())
            notes.append(
                f"the data's labels are not used: no scored output is scored against labels ({scored}, agreement "
                "with the original); --metric names a metric that reads them, where one fits an output"
            )
        elif self.labels is not None:
            return notes + self._perfect_on_labels()
        for name, metric in self.metrics.items():
            same = metric.blind_spot(self._view(self.reference, name)) if metric.blind_spot is not None else None
            if same is not None:
                notes.append(
                    f"{name}: the original {same}, so {metric.name} agreement with it cannot see a model that "
                    "breaks its other answers; give data with varied answers, or labels"
                )
        return notes

    def _perfect_on_labels(self) -> list[str]:
        """A model right on every labelled sample was most likely trained on them: there its margins are
        wide, and a candidate loses few of them where it loses more on new data (a ResNet trained on 1,400
        digits: a candidate 0.21% down on them was 1.01% down on the 397 it never saw)."""
        samples = len(self.labels) if self.labels is not None else 0
        scored = self.baseline.outputs
        perfect = [o.output for o in scored if reads(self.metrics[o.output], self.labels) and o.value >= 1.0]
        if not perfect or samples < VARIED_SAMPLES:
            return []
        return [
            f"{', '.join(perfect)}: the original is right on all {samples} labelled samples, as on data it was "
            "trained on; drops measured there can understate the drop on new data: give data it was not trained on"
        ]

    def describe(self) -> dict[str, dict[str, str]]:
        """Per scored output, its metric and why it was chosen (for reports)."""
        described = {name: {"metric": m.name, "why": self.reasons[name]} for name, m in self.metrics.items()}
        for name, owner in self.folded.items():
            described[name] = {"metric": self.metrics[owner].name, "why": f"scored with {owner!r}, as one answer"}
        return described


def _real(output: np.ndarray) -> bool:
    """Whether ``output`` (an object array: its first sample) holds real numbers."""
    sample = np.asarray(output[0]) if ragged(output) and len(output) else output
    return np.issubdtype(sample.dtype, np.floating)


def _one_array(name: str, output: np.ndarray, outputs: int) -> None:
    """Refuse, in one line, an output whose samples differ in size (no part of a detector's answer)."""
    if not ragged(output):
        return
    sizes = ", ".join(str(list(s)) for s in sorted({np.shape(sample) for sample in output})[:3])
    raise DataError(
        f"output {name!r} has a different shape per sample ({sizes}): it cannot be scored as one array"
        + ("; name the outputs to score with --metric-output" if outputs > 1 else "")
    )


def _same_size(name: str, reference: np.ndarray, candidate: np.ndarray, metric: Metric) -> None:
    """Refuse, in one line, a candidate's output whose size is not the original's: a size the model computes
    from its data (a detector's count of boxes: 100 from the float Keypoint R-CNN, 38 from its int8 form),
    which no built-in metric compares element by element (cosine ended in numpy's broadcast error). A user's
    metric gets the two as they are."""
    if reference.shape == candidate.shape or metric.name not in METRICS:
        return
    raise DataError(
        f"output {name!r} has {shape_text(candidate.shape[1:])} per sample from a candidate and "
        f"{shape_text(reference.shape[1:])} from the original (a size the model computes from its data, as a "
        f"detector's count of boxes): {metric.name} compares outputs of one size; score other outputs with "
        "--metric-output, or give a metric of your own (--metric package.module:function)"
    )


DEFAULT_CONFIDENCE = 0.9
"""The confidence a budgeted search holds candidates to by default. Held to the drop alone, compress on a
Keras MobileNetV2 (1,438 search digits, 0.5% budget) chose candidates whose held-out drops on three seeds
were 2.79%, 1.11% and 0.00%, netted from dozens of samples changing both ways; at 0.9 they were 1.95%,
0.56% and -0.28%, at the same speed. A search still keeps the luckiest of many close candidates, which no
per-candidate bound undoes; the held-out figure says what it cost."""


def confidence_option(default: float = DEFAULT_CONFIDENCE) -> Any:
    """The ``confidence`` field of a budgeted search's options (one declaration: its flag, help and default;
    a search that compares many candidates on the same samples asks for more)."""
    return option(
        default,
        type=float,
        help="how sure a candidate must be to be inside --max-drop on data like --data: its drop plus the "
        f"matching number of standard errors (paired, per sample) must fit (default {default:g}; 0.5: the drop alone)",
    )


def check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1.0:
        raise SettingsError(f"--confidence must be in [0.5, 1), got {confidence:g}")


def confidence_z(confidence: float) -> float:
    """Standard errors a one-sided bound at ``confidence`` adds (normal approximation): 1.28 at 0.9."""
    check_confidence(confidence)
    return NormalDist().inv_cdf(confidence)


def paired_error(baseline: np.ndarray | None, candidate: np.ndarray | None) -> float:
    """Standard error of mean(baseline - candidate) over paired samples: 0 without per-sample measures,
    with fewer than two samples, or when no sample changed."""
    if baseline is None or candidate is None or len(baseline) != len(candidate) or len(baseline) < 2:
        return 0.0
    differences = np.asarray(baseline, np.float64) - np.asarray(candidate, np.float64)
    return float(np.std(differences, ddof=1) / np.sqrt(len(differences)))


FEW_SAMPLES = 30
"""Below this many samples, a bound from the paired error (a normal approximation) says little: no changed
answer among them makes it 0, where the exact bound for no event seen is ``1 - (1 - c)^(1/n)`` (13 face crops:
"bound 0.00% at 99% confidence", 30% exactly; 3 held out then changed one). The report says so."""
RIGHT_OR_WRONG = frozenset({"top1", "top5", "label", "binary", "exact"})
"""Metrics whose per-sample measure is 0 or 1 (an answer kept or changed)."""


def few_samples_note(samples: int, metrics: Collection[str], confidence: float) -> str | None:
    """What a budget judged on fewer than ``FEW_SAMPLES`` samples of right-or-wrong answers cannot tell."""
    if not 0 < samples < FEW_SAMPLES or not set(metrics) & RIGHT_OR_WRONG or confidence <= 0.5:
        return None
    unseen = 1 - (1 - confidence) ** (1 / samples)
    return (
        f"{samples} samples: with no answer changed among them, up to {unseen:.0%} may change on data like them "
        f"({confidence:.0%} confidence); the budget's bound cannot see that (give {FEW_SAMPLES} samples or more)"
    )


def resolution_note(samples: int, metrics: Collection[str], confidence: float, max_drop: float) -> str | None:
    """What a budget on ``samples`` (``FEW_SAMPLES`` or more) right-or-wrong answers cannot confirm: a candidate
    changing none of them has a bound of 0, yet the exact bound for no event seen, ``1 - (1 - c)^(1/n)``, may
    exceed the budget (175 digits: 2.6% against 0.5%; a pruned ShuffleNet kept at "0.00%" lost 2 points on
    new digits). The search still ranks candidates by the answers they change; the held-out figure checks."""
    if samples < FEW_SAMPLES or not set(metrics) & RIGHT_OR_WRONG or confidence <= 0.5 or max_drop <= 0:
        return None
    unseen = 1 - (1 - confidence) ** (1 / samples)
    if unseen <= max_drop:
        return None
    needed = math.ceil(math.log(1 - confidence) / math.log(1 - max_drop)) if max_drop < 1 else samples
    return (
        f"{samples} scored samples: a candidate that changes none of their answers may still change up to "
        f"{unseen:.1%} on data like them ({confidence:.0%} confidence), more than the {max_drop:.2%} budget; "
        f"about {needed:,} samples confirm the budget (the held-out figure is the check)"
    )


SQUARES_CHUNK = 1 << 22
"""Elements per float64 step of ``_sum_of_squares``: GPT-2's logits on 32 samples are 206 million values,
1.6 GB in float64 at once, and took 12 s per candidate that way."""


def _sum_of_squares(reference: np.ndarray, value: np.ndarray | None = None) -> float:
    """sum((value - reference)²), or sum(reference²) without ``value``, accumulated in float64 a chunk at a
    time."""
    if ragged(reference) or (value is not None and (ragged(value) or value.shape != reference.shape)):
        return _padded_squares(reference, value)
    flat = np.asarray(reference).reshape(-1)
    other = None if value is None else np.asarray(value).reshape(-1)
    total = 0.0
    for start in range(0, flat.size, SQUARES_CHUNK):
        chunk = flat[start : start + SQUARES_CHUNK].astype(np.float64)
        if other is not None:
            chunk = other[start : start + SQUARES_CHUNK].astype(np.float64) - chunk
        total += float(np.dot(chunk, chunk))
    return total


def _padded_squares(reference: np.ndarray, value: np.ndarray | None) -> float:
    """:func:`_sum_of_squares` sample by sample, the one with fewer rows (a detector's K boxes) padded with
    zeros to the other's."""
    total = 0.0
    for index, sample in enumerate(reference):
        ref = np.asarray(sample, dtype=np.float64)
        if value is None:
            total += float(np.sum(ref**2))
            continue
        other = np.asarray(value[index], dtype=np.float64)
        rows = max(len(ref), len(other))
        ref, other = (np.concatenate([a, np.zeros((rows - len(a), *a.shape[1:]))]) for a in (ref, other))
        total += float(np.sum((other - ref) ** 2))
    return total


DROP_ROUNDING = 1e-9
"""Drops are differences of fractions: 397/400 - 393/400 is 0.010000000000000009 in float, and 4 of 400
samples is exactly a 1% budget."""


def within(drop: float, max_drop: float) -> bool:
    """``drop`` is at most ``max_drop``, up to the rounding of the fractions it is computed from."""
    return drop <= max_drop + DROP_ROUNDING


@dataclass
class HeldOut:
    """The chosen model on data the search never used: the honest figure beside the search's."""

    data: str
    baseline: Score
    score: Score
    drop: float
    within_budget: bool
    refuted: bool = False
    """The held-out data shows the result outside the budget beyond its own sampling error (the drop less
    the standard errors of the budget's confidence is still over it): the result is not written unless
    forced. A drop over the budget within that error (2 of 397 digits against 0.5%; 1 of 6 samples) cannot
    tell, and is a warning."""

    @property
    def as_is(self) -> bool:
        """An output's metric scores all samples at once (no sampling error to allow): its drop is held as it is."""
        return any(not o.sampled for o in self.score.outputs)

    @classmethod
    def of(cls, data: str, baseline: Score, score: Score, max_drop: float | None, confidence: float) -> HeldOut:
        if max_drop is None:
            return cls(data, baseline, score, score.drop, True)
        least = max(o.drop - confidence_z(confidence) * o.error for o in score.outputs)
        return cls(data, baseline, score, score.drop, within(score.drop, max_drop), not within(least, max_drop))


def with_score_headlines(
    data: dict[str, Any], baseline: Score | None, accuracy: Score | None, held_out: HeldOut | None
) -> dict[str, Any]:
    """``data`` (a report's ``asdict``) with each score's headline figures beside its per-output ones."""
    for key, score in (("baseline", baseline), ("accuracy", accuracy)):
        if score is not None:
            data[key].update(score.headline())
    if held_out is not None:
        for key in ("baseline", "score"):
            data["held_out"][key].update(getattr(held_out, key).headline())
    return data
