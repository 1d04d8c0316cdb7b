"""Metrics for accuracy budgets: one registry, used by every budgeted pass and by the reports.

Each module beside this one defines metrics for one kind of output and registers them; ``budget``
scores candidates with them, ``selection`` picks one per output for ``--metric auto``, and ``custom``
loads a user's own ``module:function``.
"""

from onnxsat.metrics import (  # noqa: F401
    classification,
    dense_maps,
    detection,
    instances,
    regression,
    sequence,
    similarity,
    tokens,
)
from onnxsat.metrics.base import METRICS, Measure, Metric
from onnxsat.metrics.budget import (
    AUTO,
    Budget,
    HeldOut,
    MetricSpec,
    OutputScore,
    Score,
    check_confidence,
    check_spec,
    collapse_warning,
    confidence_option,
    metric_names,
    metric_option,
    with_fidelity,
    with_score_headlines,
)

__all__ = [
    "AUTO",
    "METRICS",
    "Budget",
    "HeldOut",
    "Measure",
    "Metric",
    "MetricSpec",
    "OutputScore",
    "Score",
    "check_confidence",
    "check_spec",
    "collapse_warning",
    "confidence_option",
    "metric_names",
    "metric_option",
    "with_fidelity",
    "with_score_headlines",
]
