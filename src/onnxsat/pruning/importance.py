"""How important each channel of a group is: L1, L2, FPGM or HRank*, single-node or tree-level.

**Members.** Every slice of a group is a member: a matrix ``[channels, features]`` (the slice's
positions for each channel, every other axis flattened), scored per channel:

- ``l1``: sum of |w|; ``l2``: Euclidean norm;
- ``fpgm``: sum of Euclidean distances to every other channel's vector (a channel near the geometric
  median is replaceable by the others: lowest score, pruned first);
- ``hrank``: the average rank of the root's output feature maps over calibration data
  (``feature_ranks``) for roots whose output is a map at least 2x2 (Conv); L1 for Gemm/MatMul roots and
  every other member.

A member with one value per channel (a BatchNormalization scale) has no vector for FPGM, so it is
scored by magnitude (L1). Each member's scores are divided by their mean over the group's channels
(``normalized``): a norm only says how channels compare, and raw norms grow with a tensor's size
(a 512x3x3 leaf slice would drown a 64x3x3 root filter and the scalar BN scale).

**Single-node** mode scores the root filters only: the normalized scores of every root of the group
summed (tied roots are pruned together; the paper's baseline).

**Tree-level** mode (the default) scores the whole node association tree. The paper sums the norms
of all members (its equations 1-4); here the members are combined the way a channel's output actually
reaches the next layers, to first order: channel ``c`` adds ``W_leaf[:, c] * a_c`` to each leaf, with
``a_c`` proportional to the root filter times any per-channel gain between them. So

    score_c = P_c * G_c * L_c

- ``P``: the root filters, summed over the roots (many-to-one: the tied roots' outputs add up);
- ``G``: the mean of the gain members (BatchNormalization/InstanceNormalization scales, Mul constants,
  depthwise filters), 1 when there are none;
- ``L``: the leaf slices (the next layers' input filters), summed over the leaves (one-to-many: the
  channel feeds each of them), 1 when there are none.

**Attention heads.** A head group's channels are heads: every member's row for head ``h`` holds the
``D`` features of that head (``block = D``), so a head scores the sum over its features, here of the Q,
K and V projection columns (``P``, summed over the three roots) times the output projection's rows
(``L``); single-node mode scores the Q, K and V columns only.

Every member counts, as in the paper, but a channel that any stage zeroes (a zero filter, or a next
layer that ignores it) scores zero, which a sum would hide behind the other members. Additive members
(biases, BN shifts, Add constants) and BN running statistics are sliced but not scored: a bias's size
says nothing about a channel's contribution (a large negative bias under ReLU means a dead channel).
Measured on the digits CNN (L1, top-1 on digits-test at rates 0.3/0.5/0.7): the paper's normalized sum
with biases 82/56/12%, without biases 94/85/64%, this product 96/92/61%, single-node 98/85/44%.

Ties keep channel order (stable sort): identical scores prune the lowest indices first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.pruning.trees import GAIN, LEAF, ROOT, ChannelGroup, ChannelSlice
from onnxsat.verify import session, with_outputs

CRITERIA = ("l1", "l2", "fpgm", "hrank")


def member_matrix(value: np.ndarray, piece: ChannelSlice, channels: int) -> np.ndarray:
    """``[channels, features]``: channel ``c``'s entries of the slice, in float64."""
    moved = np.moveaxis(np.asarray(value, dtype=np.float64), piece.axis, 0)
    rows = (piece.offset + np.arange(channels)[:, None] * piece.block + np.arange(piece.block)[None, :]).reshape(-1)
    return moved[rows].reshape(channels, -1)


def member_scores(matrix: np.ndarray, criterion: str) -> np.ndarray:
    """One member's per-channel scores under ``criterion`` (``hrank`` is handled by the caller)."""
    if criterion == "l2":
        return np.sqrt(np.sum(matrix * matrix, axis=1))
    if criterion == "fpgm" and matrix.shape[1] > 1:
        return fpgm_scores(matrix)
    return np.sum(np.abs(matrix), axis=1)


def fpgm_scores(matrix: np.ndarray) -> np.ndarray:
    """Sum of Euclidean distances from each row to every other row (small: near the geometric median)."""
    squares = np.sum(matrix * matrix, axis=1)
    distances = squares[:, None] + squares[None, :] - 2.0 * (matrix @ matrix.T)
    return np.sum(np.sqrt(np.maximum(distances, 0.0)), axis=1)


def normalized(scores: np.ndarray) -> np.ndarray:
    """``scores`` divided by their mean (all zero: all zero)."""
    mean = float(np.mean(scores)) if scores.size else 0.0
    return scores / mean if mean > 0 and math.isfinite(mean) else np.zeros_like(scores)


def group_scores(
    group: ChannelGroup,
    value: Callable[[str], np.ndarray],
    criterion: str,
    single_node: bool = False,
    ranks: Mapping[str, np.ndarray] | None = None,
) -> np.ndarray:
    """Per-channel importance of ``group`` (higher: more important; see the module docstring).

    ``value`` reads an initializer; ``ranks`` maps a root node to its feature-map ranks (``hrank``).
    """
    stages: dict[str, list[np.ndarray]] = {ROOT: [], GAIN: [], LEAF: []}
    for piece in group.slices:
        if piece.role not in stages or (single_node and piece.role != ROOT):
            continue
        if criterion == "hrank" and piece.role == ROOT and ranks is not None and piece.node in ranks:
            # ranks are per output channel of the root: the slice's positions pick (and sum) this group's
            per_channel = np.asarray(ranks[piece.node], dtype=np.float64)
            scores = member_matrix(per_channel, replace(piece, axis=0), group.channels).sum(axis=1)
        else:
            matrix = member_matrix(value(piece.initializer), piece, group.channels)
            scores = member_scores(matrix, "l1" if criterion == "hrank" else criterion)
        stages[piece.role].append(normalized(scores))
    total = np.sum(stages[ROOT], axis=0) if stages[ROOT] else np.ones(group.channels)
    if stages[GAIN]:
        total = total * np.mean(stages[GAIN], axis=0)
    if stages[LEAF]:
        total = total * np.sum(stages[LEAF], axis=0)
    return total


def channels_to_prune(channels: int, rate: float, multiple: int = 1) -> int:
    """floor(rate * channels), keeping at least one channel (the epsilon absorbs 0.29 * 100 = 28.999...).

    With ``multiple`` above 1, a group whose channel count is a multiple of it (and at least four times
    it: rounding 16 channels to 8 would halve or void the rate) keeps a multiple of it too, rounding the
    kept count up. ONNX Runtime runs convolutions in a layout
    blocked by 8 or 16 channels: MobileNetV2 pruned at 0.3 ran at 0.78x the dense model with counts
    such as 23 and 1.36x with them rounded to multiples of 8 (same machine, same run).
    """
    count = max(0, min(channels - 1, math.floor(rate * channels + 1e-9)))
    if multiple > 1 and channels % multiple == 0 and channels >= 4 * multiple:
        count = channels - math.ceil((channels - count) / multiple) * multiple
    return count


def select_kept(scores: np.ndarray, rate: float, multiple: int = 1) -> np.ndarray:
    """The channels kept at ``rate``: all but the lowest-scoring ones, in channel order."""
    count = channels_to_prune(len(scores), rate, multiple)
    order = np.argsort(scores, kind="stable")
    return np.sort(order[count:])


def feature_ranks(
    model: onnx.ModelProto,
    outputs: Mapping[str, str],
    batches: Iterable[dict[str, np.ndarray]],
    base_dir: Path | None = None,
) -> dict[str, np.ndarray]:
    """HRank: for each root (``outputs``: root node -> its output tensor) whose output is ``[N, C, H, W]``
    with H, W >= 2, the rank of each channel's HxW map averaged over every calibration sample.

    The outputs are exposed as extra graph outputs of a copy and computed by ONNX Runtime batch by batch;
    only running sums are kept. Roots with other outputs (Gemm, MatMul, 1x1 maps) are left out: the
    caller scores them by L1.
    """
    names = sorted(set(outputs.values()))
    runner = session(with_outputs(model, names), ort.GraphOptimizationLevel.ORT_DISABLE_ALL, base_dir=base_dir)
    sums: dict[str, np.ndarray] = {}
    samples = 0
    for feeds in batches:
        values = dict(zip(names, runner.run(names, feeds), strict=True))
        for name, value in values.items():
            if value.ndim == 4 and min(value.shape[2:]) >= 2:
                ranks = np.linalg.matrix_rank(value.astype(np.float32)).sum(axis=0)
                sums[name] = sums.get(name, 0.0) + ranks
        samples += len(next(iter(feeds.values())))
    return {root: sums[name] / max(samples, 1) for root, name in outputs.items() if name in sums}
