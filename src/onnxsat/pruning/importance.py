"""How important each channel of a group is: L1, L2, FPGM or HRank*, single-node or tree-level.

**Members.** Every slice of a group is a member: a matrix ``[channels, features]`` (the slice's
positions for each channel, every other axis flattened). Single-node mode scores the root filters only
(every root of a tied group: they are pruned together). Tree-level mode (the default, the paper's
equations 1-4) also scores the root biases, the associated tensors (BatchNormalization scale and
shift, per-channel constants, depthwise filters) and the leaf slices (the next layers' input
filters), so a channel whose filter is large but which the next layer ignores ranks low. Running
statistics (BatchNormalization mean and variance) describe data, not weights, and are left out.

**Per member.** ``l1``: sum of |w| per channel; ``l2``: its Euclidean norm; ``fpgm``: the sum of
Euclidean distances to every other channel's vector (a channel close to the geometric median is
replaceable by the others: lowest score, pruned first); ``hrank``: the average rank of the root's
output feature maps over calibration data (``feature_ranks``), for roots whose output is a map at least
2x2 (Conv), and L1 for Gemm/MatMul roots and every non-root member. A member with one value per
channel (a bias, a BatchNormalization scale) has no vector for FPGM or map for HRank, so it is scored
by magnitude (L1) under every criterion.

**Summing members.** Raw norms grow with a tensor's size (a 512x3x3 leaf slice would drown the
scalar BN scale and even the root's own 64x3x3 filter), and the paper sums them unweighted. Here each
member's per-channel vector is divided by its mean over the group's channels before summing: every
member then has mean 1 and weighs the same, and within a member the ratios between channels, which are
all a norm says, are kept. A member that is zero everywhere adds nothing. Ties keep channel order
(stable sort), so identical scores prune the lowest indices first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.pruning.trees import ASSOCIATED, LEAF, ROOT, ROOT_BIAS, ChannelGroup, ChannelSlice
from onnxsat.verify import session

CRITERIA = ("l1", "l2", "fpgm", "hrank")
TREE_ROLES = frozenset({ROOT, ROOT_BIAS, ASSOCIATED, LEAF})


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
    total = np.zeros(group.channels)
    roles = {ROOT} if single_node else TREE_ROLES
    for piece in group.slices:
        if piece.role not in roles:
            continue
        if criterion == "hrank" and piece.role == ROOT and ranks is not None and piece.node in ranks:
            scores = np.asarray(ranks[piece.node], dtype=np.float64)
        else:
            matrix = member_matrix(value(piece.initializer), piece, group.channels)
            scores = member_scores(matrix, "l1" if criterion == "hrank" else criterion)
        total += normalized(scores)
    return total


def channels_to_prune(channels: int, rate: float) -> int:
    """floor(rate * channels), keeping at least one channel (the epsilon absorbs 0.29 * 100 = 28.999...)."""
    return max(0, min(channels - 1, math.floor(rate * channels + 1e-9)))


def select_kept(scores: np.ndarray, rate: float) -> np.ndarray:
    """The channels kept at ``rate``: all but the lowest-scoring ones, in channel order."""
    count = channels_to_prune(len(scores), rate)
    order = np.argsort(scores, kind="stable")
    return np.sort(order[count:])


def feature_ranks(
    model: onnx.ModelProto,
    outputs: Mapping[str, str],
    batches: Iterable[dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """HRank: for each root (``outputs``: root node -> its output tensor) whose output is ``[N, C, H, W]``
    with H, W >= 2, the rank of each channel's HxW map averaged over every calibration sample.

    The outputs are exposed as extra graph outputs of a copy and computed by ONNX Runtime batch by batch;
    only running sums are kept. Roots with other outputs (Gemm, MatMul, 1x1 maps) are left out: the
    caller scores them by L1.
    """
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    names = sorted(set(outputs.values()))
    for name in names:
        if name not in present:
            exposed.graph.output.append(onnx.ValueInfoProto(name=name))
    runner = session(exposed, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
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
