"""What a metric is: a score in [0, 1] of a candidate model's outputs against the original's (or labels).

Every budgeted pass measures the same way: run the original and the candidate on the same data, hand
one output's per-sample arrays of both (batch first, ``[N, ...]``) to a metric, and read back a score
where 1 is "as good as the original could be" and the budget is a drop from the original's own score.
A metric also says whether an output fits it, so a wrong choice is one line naming the output, not a
traceback from inside numpy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxsat.registry import Registry

Labels = np.ndarray | None
"""The data's labels, when it has them: int64 ``[N]`` classes, or float64 ``[N, ...]`` targets (a regression's
values: numbers that are not whole, negative, or several per sample); ``is_targets`` tells them apart."""


def is_targets(labels: Labels) -> bool:
    """Whether ``labels`` are a regression's targets rather than classes."""
    return labels is not None and np.issubdtype(labels.dtype, np.floating)


def is_tags(labels: Labels) -> bool:
    """Whether ``labels`` are yes/no rows, several per sample (a multi-label classifier's tags, a watermark's
    bits): the data's labels hold them as booleans ``[N, K]``."""
    return labels is not None and labels.dtype == np.bool_ and labels.ndim == 2


@dataclass(frozen=True)
class Measure:
    """One metric on one output: ``value`` in [0, 1] is what a budget spends; ``details`` are finer
    figures for the report (top-5 beside top-1, per-position agreement beside whole sequences)."""

    value: float
    details: dict[str, float] = field(default_factory=dict)
    per_sample: np.ndarray | None = field(default=None, compare=False)
    """Each sample's own measure when ``value`` is their mean (1 or 0 for a right or wrong top-1): a budget
    pairs them with the original's to bound the drop's sampling error. None for a measure over all samples
    at once (F1 over boxes, SNR)."""


Measurer = Callable[[np.ndarray, np.ndarray, Labels], Measure]
"""(the original's output ``[N, ...]``, the candidate's, labels or None) -> the candidate's measure."""
Fit = Callable[[np.ndarray, int], str | None]
"""(the original's output ``[N, ...]``, the axis the model's batch dim had) -> None if the metric
applies to it, else why not, in a few words ("needs [N, classes]; per sample it is [40, 6625]")."""
BlindSpot = Callable[[np.ndarray], str | None]
"""(the original's output ``[N, ...]`` on the data) -> what agreement with it cannot see, when the original
answers alike for (nearly) every sample ("answers class 0 for 47 of the 48 samples"), else None."""
VARIED_SAMPLES = 8
"""Fewer samples than this may well share one answer by chance: no blind spot is reported for them."""
DOMINANT_SHARE = 0.95
"""One answer for this share of the samples leaves agreement all but blind to the others."""


@dataclass(frozen=True)
class Metric:
    """A named way of scoring one output; ``uses_labels``: against class labels when the data has them,
    ``uses_targets``: against regression targets when it has those, ``uses_tags``: against yes/no rows (else
    agreement with the original)."""

    name: str
    summary: str
    measure: Measurer
    fits: Fit
    uses_labels: bool = False
    uses_targets: bool = False
    uses_tags: bool = False
    blind_spot: BlindSpot | None = None
    """Scored by agreement with the original (no labels), an output whose answer (nearly) never varies on
    the data cannot show damage to the other answers; this says when that is so."""
    joins: tuple[tuple[str, str], ...] = ()
    """For a metric that scores several outputs as one answer (a detector's boxes, labels and scores): each
    part's role and the output that holds it. The metric is kept under the first output's name, and its
    ``measure``, ``fits`` and ``blind_spot`` get :func:`joined` outputs, not that output alone."""


METRICS: Registry[Metric] = Registry("metric", "metric")
"""Built-in metrics by name, filled by the modules beside this one; ``module:function`` names a user's own."""


def joined(outputs: Mapping[str, np.ndarray], joins: Sequence[tuple[str, str]]) -> np.ndarray:
    """Per sample, each part's array by role: an object array ``[N]`` of dicts (``{"boxes": [K, 4], ...}``).
    An output whose rows per sample differ from sample to sample (a detector's K boxes per image) is itself
    an object array of per-sample arrays; either form is read sample by sample."""
    count = len(outputs[joins[0][1]])
    packed = np.empty(count, dtype=object)
    for index in range(count):
        packed[index] = {role: np.asarray(outputs[name][index]) for role, name in joins}
    return packed


def ragged(output: np.ndarray) -> bool:
    """Whether ``output`` is an object array of per-sample arrays whose sizes differ (see :func:`joined`)."""
    return output.dtype == object


def reads(metric: Metric, labels: Labels) -> bool:
    """Whether ``metric`` scores against ``labels`` (classes or targets, as it takes them)."""
    if labels is None:
        return False
    if is_tags(labels):
        return metric.uses_tags
    return metric.uses_targets if is_targets(labels) else metric.uses_labels


def register(metric: Metric) -> Metric:
    return METRICS.register(metric.name, metric)


def dominant_answer(answers: Sequence[Hashable], show: Callable[[Any], str]) -> str | None:
    """ "answers <show(answer)> for C of the N samples" when one answer covers ``DOMINANT_SHARE`` of them
    (the blind spots of the metrics that score answers), else None."""
    if len(answers) < VARIED_SAMPLES:
        return None
    value, count = Counter(answers).most_common(1)[0]
    if count < DOMINANT_SHARE * len(answers):
        return None
    share = "all" if count == len(answers) else f"{count} of the"
    return f"answers {show(value)} for {share} {len(answers)} samples"


def per_sample_shape(output: np.ndarray) -> tuple[int, ...]:
    return tuple(int(d) for d in output.shape[1:])


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def unit_interval(values: np.ndarray) -> bool:
    """Whether every finite value lies in [0, 1] (probabilities, sigmoid scores)."""
    finite = values[np.isfinite(values)]
    return finite.size > 0 and float(finite.min()) >= 0.0 and float(finite.max()) <= 1.0
