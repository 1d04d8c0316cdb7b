"""A language model's next-token scores (``[N, positions, vocabulary]``): the share of positions whose
best token is the original's.

A decoder's logits score each position's next token on its own (the inputs are given, not generated), so
there is no reading to decode: whole-sequence equality over 128 positions would call GPT-2 small quantized
to int8 a total loss (0% of sequences the same) while 92.5% of its positions agree. The share of positions
is the figure that matters, top-5 (the original's best token among the candidate's five best) beside it.
"""

from __future__ import annotations

import numpy as np

from onnxsat.data.metrics import class_ranks
from onnxsat.metrics.base import Labels, Measure, Metric, per_sample_shape, register, shape_text

ROWS_PER_STEP = 256
"""Positions ranked at a time: a full vocabulary compared at once is 50257 booleans per position."""


def _fits(reference: np.ndarray, batch_axis: int) -> str | None:
    del batch_axis
    shape = per_sample_shape(reference)
    if len(shape) < 2 or shape[-1] < 2:
        return f"needs [N, positions, vocabulary] scores; per sample it is {shape_text(shape)}"
    return None


def tokens(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
    del labels  # labels name one class per sample; next tokens are one per position
    vocabulary = reference.shape[-1]
    original = reference.reshape(-1, vocabulary)
    scores = candidate.reshape(-1, vocabulary)
    ranks = np.concatenate(
        [
            class_ranks(scores[start : start + ROWS_PER_STEP], np.argmax(original[start : start + ROWS_PER_STEP], -1))
            for start in range(0, len(original), ROWS_PER_STEP)
        ]
    )
    top1, top5 = float(np.mean(ranks == 0)), float(np.mean(ranks < 5))
    per_sample = (ranks == 0).reshape(len(reference), -1).mean(axis=1)  # positions' share, per sample
    return Measure(top1, {"top1": top1, "top5": top5}, per_sample)


register(
    Metric(
        "tokens",
        "next-token scores: share of positions whose best token is the original's (top-5 beside it)",
        tokens,
        _fits,
    )
)
