"""How important each channel of a group is: L1, L2, FPGM or HRank*, single-node or tree-level.

**Members.** Every slice of a group is a member: a matrix ``[channels, features]`` (the slice's
positions for each channel, every other axis flattened), scored per channel:

- ``l1``: sum of |w|; ``l2``: Euclidean norm;
- ``fpgm``: sum of Euclidean distances to every other channel's vector (a channel near the geometric
  median is replaceable by the others: lowest score, pruned first);
- ``hrank``: the average rank of the channel's feature maps over calibration data (``feature_ranks``)
  where they are maps at least 2x2 (Conv); L1 for Gemm/MatMul roots and every other member. The maps
  ranked are the ones the next layer reads (``ranked_maps``): the root's output carried through the
  activation, normalization and residual Add right after it, as HRank's reference code ranks ReLU
  outputs. The raw Conv output with its bias is almost always full rank: on the digits CNN every
  channel of both convolutions averaged rank 7.96 or 8.00 of 8, so HRank tied everywhere and the
  stable sort pruned the lowest channel indices.

A member with one value per channel (a BatchNormalization scale) has no vector for FPGM, so it is
scored by magnitude (L1). Each member's scores are divided by their mean over the group's channels
(``normalized``): a norm only says how channels compare, and raw norms grow with a tensor's size
(a 512x3x3 leaf slice would drown a 64x3x3 root filter and the scalar BN scale).

**Single-node** mode scores the root filters only: the normalized scores of every root of the group
summed (tied roots are pruned together; the paper's baseline).

**Tree-level** mode (the default) scores the whole node association tree: the root filters and the
slices of every associated node, as the paper's equations 1-4 do (the paper adds the members' norms).
Here the members are combined the way a channel's output reaches the next layers, to first order:
channel ``c`` adds ``W_leaf[:, c] * a_c`` to each leaf, with ``a_c`` proportional to the root filter
times any per-channel gain between them. So

    score_c = P_c * G_c * sqrt(L_c)

- ``P``: the root filters, summed over the roots (many-to-one: the tied roots' outputs add up);
- ``G``: the mean of the gain members (BatchNormalization/InstanceNormalization scales, Mul constants,
  depthwise filters), 1 when there are none;
- ``L``: the leaf slices (the next layers' input filters), summed over the leaves (one-to-many: the
  channel feeds each of them), 1 when there are none.

**Why the square root.** The plain product ``P * G * L`` is the first-order estimate, and on
random-weight models it does as well as this (output errors within a few hundredths, either way). In
a trained network it does not: a ReLU unit that died early in training gets no gradient from then on,
so its root filter stays at its initial scale while live filters grow (the root norm ranks the dead
units lowest), but its leaf slice keeps its initial-scale weights too, which are as large as many
live units'. In the digits CNN 20-35 of fc1's 64 units are dead (five training seeds); the root L1
puts all but one of them among its lowest scores, ``P * L`` only 14-31 of them, so tree-level pruned
live units where single-node pruned dead ones.
Weighting the leaves half as much as the activation path in the log-score (``sqrt(L)``) keeps
their information (a channel the next layer barely reads still scores low) without letting their
initial-scale noise override the root.

Measured (each form swapped in for this function; top-1 on all 397 digits-test samples, mean over
five digits CNNs trained with seeds 0-4, rates 0.3/0.5/0.7): L1 single-node 97.2/79.6/57.9%, ``P*L``
94.5/72.6/60.2%, this 95.5/74.7/61.1%, the paper's normalized sum ``P+L`` 94.3/70.3/57.5% (with
biases 77.7/39.2/22.8%), raw norms added 87.4/59.1/33.4%; L2 single 96.4/78.4/57.3%, ``P*L``
90.7/70.1/54.9%, this 95.2/71.7/56.5%; FPGM single 97.2/79.1/56.0%, this 96.3/76.4/47.8%; HRank single
93.6/72.4/55.1%, this 93.4/64.2/46.3%. The same order holds on digits-train. So on these Adam-trained
CNNs single-node keeps more accuracy than any tree-level form tried at 0.3 and 0.5 (tree-level wins
only L1 at 0.7); with ``--reconstruct`` tree-level has the lower output error in all 12 settings.
Trained the paper's way instead (SGD, weight decay 5e-4, 300 epochs: ``tools.zoo.digits_cnn``'s
``sgd`` recipe), dead units' roots and leaves shrink together and tree-level is never behind at any
rate on five seeds (L1 99.35/98.79/91.39% vs 99.35/98.64/91.28%, mostly ties; HRank 99.3/98.0/91.1%
vs 98.6/81.4/65.3%); with BatchNorm (``sgd-bn``) it is behind again for L1, L2 and FPGM. On
random-weight zoo models (``bench prune``, median relative output error on 64 random inputs, L1)
tree-level keeps more at 0.3 on seven of eight (SqueezeNet 0.89 vs 0.95, ViT 0.70 vs 0.77, VGG-11
0.82 vs 0.83, MobileNetV2 0.54 vs 0.55, ResNet-18 0.73 vs 0.74, ResNet-50, BERT; GoogLeNet 0.454 vs
0.446), and above 0.3 the two are within a few hundredths, either way. ``benchmarks/prune_digits.md``
(per seed) and ``prune_*.md`` hold the tables.

**Recurrent roots.** An LSTM/GRU/RNN's hidden unit ``c`` has one ``ROOT`` member per gate block of
``W`` and of ``R`` (the weights computing it: ``P`` sums them) and its ``R`` column (the recurrence
reading it back) counts as a leaf beside the next layer's input columns. HRank ranks no maps for them
(a ``[seq, dirs, batch, H]`` output is no image): they are scored by L1.

**Attention heads.** A head group's channels are heads: every member's row for head ``h`` holds the
``D`` features of that head (``block = D``), so a head scores the sum over its features, here of the Q,
K and V projection columns (``P``, summed over the three roots) times the square root of the output
projection's rows (``L``); single-node mode scores the Q, K and V columns only.

Every member counts, as in the paper, but a channel that any stage zeroes (a zero filter, or a next
layer that ignores it) scores zero, which a sum would hide behind the other members. Additive members
(biases, BN shifts, Add constants) and BN running statistics are sliced but not scored: a bias's size
says nothing about a channel's contribution (a large negative bias under ReLU means a dead channel).

Ties keep channel order (stable sort): identical scores prune the lowest indices first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.op_kinds import ELEMENTWISE_UNARY
from onnxsat.pruning.trees import GAIN, LEAF, RECURRENCE, RECURRENT, ROOT, ChannelGroup, ChannelSlice, TreeEdge
from onnxsat.registry import Registry
from onnxsat.verification import session, with_outputs


@dataclass(frozen=True)
class Criterion:
    """How a channel's importance is read from one member's ``[channels, features]`` weights, and whether
    root channels are instead ranked on the feature maps they produce (HRank: needs calibration data)."""

    name: str
    member_scores: Callable[[np.ndarray], np.ndarray]
    ranks_roots: bool = False


CRITERIA: Registry[Criterion] = Registry("pruning criterion", "criterion")
"""Criterion name -> criterion, in registration order (the order ``--criterion`` lists them)."""


def register_criterion(criterion: Criterion) -> Criterion:
    return CRITERIA.register(criterion.name, criterion)


get_criterion = CRITERIA.lookup


def member_matrix(value: np.ndarray, piece: ChannelSlice, channels: int) -> np.ndarray:
    """``[channels, features]``: channel ``c``'s entries of the slice, in float64."""
    moved = np.moveaxis(np.asarray(value, dtype=np.float64), piece.axis, 0)
    rows = (piece.offset + np.arange(channels)[:, None] * piece.block + np.arange(piece.block)[None, :]).reshape(-1)
    return moved[rows].reshape(channels, -1)


def member_scores(matrix: np.ndarray, criterion: str) -> np.ndarray:
    """One member's per-channel scores under ``criterion`` (root ranks for HRank are the caller's)."""
    return get_criterion(criterion).member_scores(matrix)


def l1_scores(matrix: np.ndarray) -> np.ndarray:
    return np.sum(np.abs(matrix), axis=1)


def l2_scores(matrix: np.ndarray) -> np.ndarray:
    return np.sqrt(np.sum(matrix * matrix, axis=1))


def fpgm_scores(matrix: np.ndarray) -> np.ndarray:
    """Sum of Euclidean distances from each row to every other row (small: near the geometric median);
    L1 for single-feature rows, where every distance is a difference of two numbers."""
    if matrix.shape[1] <= 1:
        return l1_scores(matrix)
    squares = np.sum(matrix * matrix, axis=1)
    distances = squares[:, None] + squares[None, :] - 2.0 * (matrix @ matrix.T)
    return np.sum(np.sqrt(np.maximum(distances, 0.0)), axis=1)


register_criterion(Criterion("l1", l1_scores))
register_criterion(Criterion("l2", l2_scores))
register_criterion(Criterion("fpgm", fpgm_scores))
register_criterion(Criterion("hrank", l1_scores, ranks_roots=True))


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
    chosen = get_criterion(criterion)
    stages: dict[str, list[np.ndarray]] = {ROOT: [], GAIN: [], LEAF: []}
    for piece in group.slices:
        if piece.role == RECURRENCE:  # the recurrence reads a hidden unit back as the next layer does
            piece = replace(piece, role=LEAF)
        if piece.role not in stages or (single_node and piece.role != ROOT):
            continue
        if chosen.ranks_roots and piece.role == ROOT and ranks is not None and piece.node in ranks:
            # ranks are per output channel of the root: the slice's positions pick (and sum) this group's
            per_channel = np.asarray(ranks[piece.node], dtype=np.float64)
            scores = member_matrix(per_channel, replace(piece, axis=0), group.channels).sum(axis=1)
        else:
            matrix = member_matrix(value(piece.initializer), piece, group.channels)
            scores = chosen.member_scores(matrix)
        stages[piece.role].append(normalized(scores))
    total = np.sum(stages[ROOT], axis=0) if stages[ROOT] else np.ones(group.channels)
    if stages[GAIN]:
        total = total * np.mean(stages[GAIN], axis=0)
    if stages[LEAF]:
        total = total * np.sqrt(np.sum(stages[LEAF], axis=0))
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


MAP_KEEPING = frozenset(
    {*ELEMENTWISE_UNARY, "Identity", "Dropout", "BatchNormalization", "InstanceNormalization"}
    | {"Add", "Sub", "Mul", "Div", "PRelu", "Sum", "Max", "Min", "Mean"}
)
"""Ops that keep a channel's feature map in place, value for value (activations, per-channel constants,
normalization, residual merges): HRank follows a root's output through them to the map it ranks."""


def ranked_maps(group: ChannelGroup, outputs: Mapping[str, str]) -> dict[str, str]:
    """For each root of ``group``, the tensor whose maps HRank ranks (``outputs``: node -> first output).

    From the root, the tree is followed while the current node has exactly one child and that child
    keeps the map (``MAP_KEEPING``); the first tensor read by anything else (a pool, the next layer, two
    consumers) is ranked. Conv -> Relu -> Conv ranks the Relu output; a residual block's last Conv ranks
    the Relu after the Add, as HRank's reference code does.
    """
    children: dict[str, list[TreeEdge]] = {}
    for edge in group.edges:
        children.setdefault(edge.parent, []).append(edge)
    maps = {}
    for root in group.roots:
        if root.op_type in RECURRENT:  # no feature maps: hidden units are scored by their weights
            continue
        node = root.node
        while len(children.get(node, [])) == 1 and children[node][0].op_type in MAP_KEEPING:
            node = children[node][0].child
        maps[root.node] = outputs.get(node, root.output)
    return maps


def feature_ranks(
    model: onnx.ModelProto,
    outputs: Mapping[str, str],
    batches: Iterable[dict[str, np.ndarray]],
    base_dir: Path | None = None,
) -> dict[str, np.ndarray]:
    """HRank: for each root (``outputs``: root node -> the tensor ranked, see ``ranked_maps``) whose maps
    are ``[N, C, H, W]`` with H, W >= 2, the rank of each channel's HxW map averaged over every sample.

    The outputs are exposed as extra graph outputs of a copy and computed by ONNX Runtime batch by batch;
    only running sums are kept. Roots with other outputs (Gemm, MatMul, 1x1 maps) are left out: the
    caller scores them by L1.
    """
    names = sorted(set(outputs.values()))
    if not names:  # only recurrent roots: nothing to rank
        return {}
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
