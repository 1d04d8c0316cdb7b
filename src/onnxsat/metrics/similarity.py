"""Metrics for any output: cosine and signal-to-noise against the original, exact equality for integers.

The fallbacks when nothing more specific fits (embeddings, hidden states, regression heads, outputs
of unknown meaning). Both are agreement with the original; labels are not used.
"""

from __future__ import annotations

import numpy as np

from onnxsat.metrics.base import Labels, Measure, Metric, register


def _any(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    return None if reference.size else "the output is empty"


def _rows(output: np.ndarray) -> np.ndarray:
    return np.asarray(output, dtype=np.float64).reshape(len(output), -1)


def cosine(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """Mean over samples of the cosine between the two outputs (negative counted as 0; two zero outputs
    agree). Outputs of one value per sample are compared as one vector over all samples."""
    del labels
    ref, cand = _rows(reference), _rows(candidate)
    whole = ref.shape[1] == 1
    if whole:
        ref, cand = ref.reshape(1, -1), cand.reshape(1, -1)
    dots = np.sum(ref * cand, axis=1)
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1)
    both_zero = (np.linalg.norm(ref, axis=1) == 0) & (np.linalg.norm(cand, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    cos = np.where(both_zero, 1.0, np.nan_to_num(np.clip(cos, 0.0, 1.0), nan=0.0))
    return Measure(float(np.mean(cos)), {"min": float(np.min(cos))}, None if whole else cos.astype(np.float64))


def snr(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """1 - noise energy / signal energy over the whole output (0 when the noise is as loud as the signal):
    a drop of 1% is a signal-to-noise ratio of 20 dB. The ratio in dB is a detail.

    The signal is each sample's variation about its own mean: a depth map's or an image's energy is mostly
    its mean, and against it a depth model kept "inside a 1% budget" had 58% of its depth variation as error
    (each map correlating 0.61 with the original's). Outputs of one value per sample, or none varying, are
    held to their whole energy."""
    del labels
    ref = np.asarray(reference, dtype=np.float64)
    noise = float(np.sum((np.asarray(candidate, dtype=np.float64) - ref) ** 2))
    rows = ref.reshape(len(ref), -1)
    signal = float(np.sum((rows - rows.mean(axis=1, keepdims=True)) ** 2)) if rows.shape[1] > 1 else 0.0
    if signal == 0.0:
        signal = float(np.sum(ref**2))
    if not np.isfinite(noise):
        return Measure(0.0, {"snr_db": float("-inf")})
    if noise == 0.0:
        return Measure(1.0, {"snr_db": float("inf")})
    if signal == 0.0:
        return Measure(0.0, {"snr_db": float("-inf")})
    return Measure(max(0.0, 1.0 - noise / signal), {"snr_db": 10.0 * float(np.log10(signal / noise))})


def exact(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    """Share of samples whose output is exactly the original's: for integer and boolean outputs
    (labels chosen inside the model, token ids)."""
    del labels
    ref, cand = reference.reshape(len(reference), -1), candidate.reshape(len(candidate), -1)
    same = np.all(ref == cand, axis=1).astype(np.float64)
    return Measure(float(np.mean(same)), per_sample=same)


register(Metric("cosine", "mean cosine similarity of each sample's output with the original's", cosine, _any))
register(
    Metric(
        "snr",
        "1 - noise/signal energy against the original, the signal about each sample's mean (0.01 = 20 dB)",
        snr,
        _any,
    )
)
register(Metric("exact", "share of samples whose output is exactly the original's (integer outputs)", exact, _any))
