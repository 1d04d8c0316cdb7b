"""Sequence outputs (CTC recognizers, per-step class scores ``[N, T, classes]``): greedy decoding.

A text recognizer is right when it reads the same string, not when its scores are close: decoding takes
the best class at every step, collapses repeats and drops the blank (class 0, as PaddleOCR and PyTorch's
CTC loss put it), and the score is the share of samples whose decoded sequence is unchanged. The
share of steps whose best class is unchanged is a finer figure beside it.
"""

from __future__ import annotations

import numpy as np

from onnxsat.metrics.base import Labels, Measure, Metric, dominant_answer, per_sample_shape, register, shape_text

BLANK = 0


def ctc_decode(best: np.ndarray, blank: int = BLANK) -> tuple[int, ...]:
    """Best classes per step -> the sequence: repeats collapsed, then blanks dropped."""
    if best.size == 0:
        return ()
    keep = np.ones(len(best), dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    return tuple(int(c) for c in best[keep] if c != blank)


def _fits(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    shape = per_sample_shape(reference)
    if len(shape) != 2 or shape[1] < 2:
        return f"needs [N, steps, classes] scores; per sample it is {shape_text(shape)}"
    return None


def sequence(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    del labels  # integer labels cannot name a sequence: agreement with the original's reading
    best_ref = np.argmax(reference, axis=-1)
    best = np.argmax(candidate, axis=-1)
    same = np.array([ctc_decode(a) == ctc_decode(b) for a, b in zip(best_ref, best, strict=True)], np.float64)
    return Measure(float(np.mean(same)), {"per-position": float(np.mean(best_ref == best))}, same)


def one_reading(reference: np.ndarray) -> str | None:
    """The reading the original gives (nearly) every sample, when it does (an OCR reading nothing)."""
    readings = [ctc_decode(best) for best in np.argmax(reference, axis=-1)]
    return dominant_answer(readings, lambda text: f"the same reading of {len(text)} symbols" if text else "nothing")


register(
    Metric(
        "sequence",
        "greedy/CTC decoding (repeats collapsed, blank 0 dropped): share of samples read the same",
        sequence,
        _fits,
        blind_spot=one_reading,
    )
)
