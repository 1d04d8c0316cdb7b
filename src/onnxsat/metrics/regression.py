"""A metric for regression outputs: the coefficient of determination (R²) against the data's targets.

A regression's quality is its error against the truth, relative to how much the truth varies: an age
estimate off by 5 years is good among ages 0-90 and useless among ages 40-45. ``snr`` (error against
the output's energy) cannot see that: the energy of values far from zero is mostly their mean, so a
price model could double its error inside a 1% ``snr`` budget. R² is 1 - SSE / SST, so a budget of 1%
lets R² fall by 0.01; without targets it is measured against the original's outputs, which then stand for
the truth (1 when the candidate gives them back exactly).
"""

from __future__ import annotations

import numpy as np

from onnxsat.errors import DataError
from onnxsat.metrics.base import Labels, Measure, Metric, per_sample_shape, register, shape_text


def r2(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """R² of ``candidate`` against the targets (``labels``, one or several values per sample), or against the
    original's outputs without them; several values per sample are pooled (variance-weighted R²). Each
    sample's measure is 1 - its squared error over the targets' variance, so their mean is R² and a budget
    can bound the drop's sampling error. RMSE and MAE, in the targets' units, are details."""
    predicted = np.asarray(candidate, dtype=np.float64).reshape(len(candidate), -1)
    truth = np.asarray(reference if labels is None else labels, dtype=np.float64).reshape(len(predicted), -1)
    if truth.shape != predicted.shape:
        raise DataError(
            f"r2: {truth.shape[1]} target(s) per sample but the output has {predicted.shape[1]} value(s) per sample"
        )
    squared = (predicted - truth) ** 2
    spread = float(np.sum(np.var(truth, axis=0)))
    scale = spread if spread > 0 else float(np.mean(truth**2)) or 1.0
    per_sample = 1.0 - np.sum(squared, axis=1) / scale
    if not np.all(np.isfinite(per_sample)):  # a candidate that gives NaN or infinity: no better than the mean
        return Measure(0.0, {"rmse": float("inf"), "mae": float("inf")})
    details = {"rmse": float(np.sqrt(np.mean(squared))), "mae": float(np.mean(np.abs(predicted - truth)))}
    return Measure(float(np.mean(per_sample)), details, per_sample)


def _fits_values(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    if not np.issubdtype(reference.dtype, np.floating):
        return f"needs real values; the output holds {reference.dtype}"
    if not reference.size:
        return f"the output is empty ({shape_text(per_sample_shape(reference))} per sample)"
    return None


register(
    Metric(
        "r2",
        "R² (1 - squared error / the targets' variance) against regression targets, or against the original's "
        "outputs without them",
        r2,
        _fits_values,
        uses_labels=True,
        uses_targets=True,
    )
)
