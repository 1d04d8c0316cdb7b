"""Where a root's channels sit in a tensor downstream of it, and how reshaping ops move them.

A tracked tensor has one channel axis. Along it, each **segment** holds the channels of one channel
space (a root, or roots already tied to it): channel ``c`` of the space occupies positions
``offset + c * block + [0, block)``. A root's own output is one segment ``(offset 0, block 1)``;
Concat shifts offsets; Flatten and Reshape merging the channel axis with the dims after it multiply
``offset`` and ``block`` by the size merged in (a channel becomes a block of H*W features for the
Gemm after it). Positions no segment covers belong to no root (e.g. a Concat input from the graph
input) and are never pruned. A space may have several segments on one axis: a Reshape merging the two
directions of a bidirectional RNN's output with its hidden units holds each unit twice (``merge_outer``).

A Reshape that **splits** the channel axis in two (``[B, S, H*D] -> [B, S, H, D]``: attention heads, or
a fused QKV projection ``[S, 3E] -> [S, 3, E]``) gives a layout with a ``Split``: the segments stay in
the coordinates of the flat axis (position ``p`` sits at ``p // D`` on ``axis`` and ``p % D`` on the
split's inner axis) until an op decides which dim the channels follow. A Gather or Split along the outer
dim picks **sections** (the flat positions ``[s*D, (s+1)*D)``: Q, K and V), and the channels follow the
inner dim; any other op treats the outer dim as the channel axis, a channel becoming a block of ``D``
contiguous features (a **head**; ``trees.py`` coarsens the channel spaces involved to that unit).

Dims are ints, symbol names (str) or None (unknown). Products over symbols compare as a multiset of
symbols times an int, so ``[batch, 64, 7, 7] -> [batch, 3136]`` is followed without knowing ``batch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

Dim = int | str | None


@dataclass(frozen=True)
class Segment:
    space: int
    """The channel space (an index the walk hands out per root; tied spaces are merged later)."""
    offset: int
    block: int
    count: int
    """Channels in the space."""

    def scaled(self, factor: int) -> Segment:
        """The segment after merging ``factor`` positions per channel position into the axis."""
        return replace(self, offset=self.offset * factor, block=self.block * factor)

    def shifted(self, by: int) -> Segment:
        return replace(self, offset=self.offset + by)


@dataclass(frozen=True)
class Split:
    """A channel axis reshaped into an outer dim (the layout's ``axis``) and an inner dim of ``inner``."""

    axis: int
    """Non-negative axis of the inner dim."""
    inner: int
    node_index: int
    """The Reshape that split it: its target entries count what pruning removes."""
    outer_entry: int | None
    """Position of the outer dim in that Reshape's literal target (None: -1 there, inferred)."""
    inner_entry: int | None


@dataclass(frozen=True)
class Layout:
    axis: int
    """Non-negative axis of the tensor that holds the channels (with ``split``: the outer dim)."""
    size: int
    """The tensor's size along ``axis`` (at least the segments' extent; more where untracked data sits).
    With ``split``: the size of the flat axis, outer times inner."""
    segments: tuple[Segment, ...]
    split: Split | None = None
    """Set while a split channel axis is pending (see the module docstring)."""
    outer: tuple[Dim, ...] | None = None
    """Heads merged with the dims before them (``[S, B, H*D] -> [S, B*H, D]``, as ``nn.MultiheadAttention``
    writes it): the axis holds ``outer x size`` positions, head ``h`` of outer entry ``o`` at ``o * size + h``;
    the segments count heads. A Reshape reads the axis as the dims ``outer`` and the heads."""

    @property
    def spaces(self) -> list[int]:
        return [s.space for s in self.segments]

    def moved(self, axis: int) -> Layout:
        return replace(self, axis=axis)

    def structure(self) -> tuple[int, tuple[tuple[int, int, int], ...], tuple[Dim, ...] | None]:
        """What two layouts must share for their channels to be paired position by position."""
        return self.size, tuple((s.offset, s.block, s.count) for s in self.segments), self.outer


def product(dims: Sequence[Dim]) -> tuple[int, tuple[str, ...]] | None:
    """``dims`` multiplied: (int factor, sorted symbols), or None when a dim is unknown."""
    factor, symbols = 1, []
    for dim in dims:
        if dim is None:
            return None
        if isinstance(dim, str):
            symbols.append(dim)
        else:
            factor *= dim
    return factor, tuple(sorted(symbols))


def int_product(dims: Sequence[Dim]) -> int | None:
    """The product when every dim is a known int, else None."""
    found = product(dims)
    return found[0] if found is not None and not found[1] else None


def merge_axis(in_shape: Sequence[Dim], out_shape: Sequence[Dim], axis: int) -> tuple[int, int] | None:
    """Follow the channel axis through a reshape: ``(out_axis, factor)`` or None when it cannot be followed.

    The channel axis survives when the output has a dim ``k`` whose prefix holds exactly the input dims
    before ``axis``, and which is the channel dim times the next few input dims (``factor``, their
    product, 1 when the dim is kept as is). A channel dim split apart (attention heads) or merged with
    dims before it (its channels would interleave with them) cannot be followed.
    """
    before = product(in_shape[:axis])
    size = in_shape[axis]
    if not isinstance(size, int):
        return None
    for k in range(len(out_shape)):
        if before is None or product(out_shape[:k]) != before or not isinstance(out_shape[k], int):
            continue
        for end in range(axis + 1, len(in_shape) + 1):
            factor = int_product(in_shape[axis + 1 : end])
            if factor is None:
                break
            if size * factor == out_shape[k]:
                return k, factor
    return _same_tail(in_shape, out_shape, axis)


def _same_tail(in_shape: Sequence[Dim], out_shape: Sequence[Dim], axis: int) -> tuple[int, int] | None:
    """``(k, factor)`` when output dim ``k`` is the channel dim times the ``factor`` of the next few input dims,
    and the dims after it hold as many elements as the input dims after those: a flat index is then
    ``rest * C * F * T + c * F * T + f * T + t`` on both sides, so each element keeps its channel whatever the
    dims before are (``[tokens, C] -> [batch, 49, C]`` under a dynamic batch, or attention heads merged back,
    ``[batch, seq, 4, 32] -> [batch, seq, 128]``, where inference names the batch and sequence apart)."""
    size = in_shape[axis]
    if not isinstance(size, int):
        return None
    for end in range(axis + 1, len(in_shape) + 1):
        factor, tail = int_product(in_shape[axis + 1 : end]), int_product(in_shape[end:])
        if factor is None:
            break
        if tail is None:
            continue
        for k in range(len(out_shape) - 1, -1, -1):
            if out_shape[k] == size * factor and int_product(out_shape[k + 1 :]) == tail:
                return k, factor
    return None


def merge_outer(in_shape: Sequence[Dim], out_shape: Sequence[Dim], axis: int) -> tuple[int, int, int, int] | None:
    """Follow the channel axis through a reshape merging it with the known dims just before it:
    ``(start, copies, out_axis, factor)``, or None.

    A bidirectional RNN's ``[seq, batch, 2, H] -> [seq, batch, 2H]`` puts the channels twice on the merged
    axis: position ``j * C + c`` holds channel ``c`` of copy ``j`` for the ``copies`` entries of the dims
    ``[start, axis)``. The merged axis is then followed as ``merge_axis`` does (``out_axis`` and ``factor``).
    """
    size = in_shape[axis]
    if not isinstance(size, int):
        return None
    for start in range(axis - 1, -1, -1):
        copies = int_product(in_shape[start:axis])
        if copies is None:
            return None
        if copies == 1:
            continue
        merged = merge_axis([*in_shape[:start], copies * size, *in_shape[axis + 1 :]], out_shape, start)
        if merged is not None:
            return start, copies, merged[0], merged[1]
    return None


def merge_into_outer(in_shape: Sequence[Dim], out_shape: Sequence[Dim], axis: int) -> tuple[int, int, int] | None:
    """``(start, k, inner)`` when a reshape merges the channel dim, in blocks of ``inner`` (heads), into the dims
    ``[start, axis)`` before it: output dim ``k`` is ``prod(in[start:axis]) * (C / inner)`` and the dims after it
    hold ``inner`` times the dims after the channels (``[S, B, H*D] -> [S, B*H, D]``: ``inner = D``; ``[B, H, S, D]
    -> [B*H, S, D]``: 1). The dims before must match ``in[:start]``, and at least one dim must merge."""
    size, tail = in_shape[axis], int_product(in_shape[axis + 1 :])
    if not isinstance(size, int) or tail is None:
        return None
    for start in range(axis - 1, -1, -1):
        before = product(in_shape[:start])
        if before is None or int_product(in_shape[start:axis]) == 1:
            continue
        for k in range(len(out_shape)):
            rest = int_product(out_shape[k + 1 :])
            if not rest or rest % tail or size % (rest // tail) or product(out_shape[:k]) != before:
                continue
            inner = rest // tail
            merged = int_product(in_shape[start:axis])
            if isinstance(out_shape[k], int) and (merged is None or out_shape[k] != merged * size // inner):
                continue
            return start, k, inner
    return None


def flatten_axis(in_shape: Sequence[Dim], flatten_at: int, axis: int) -> tuple[int, int] | None:
    """Follow the channel axis through ``Flatten(axis=flatten_at)``: ``(out_axis, factor)`` or None.

    Flatten's output is ``[prod(in[:flatten_at]), prod(in[flatten_at:])]`` whatever the dims are, so no output
    shape is needed: the channels lead output dim 1 when they are the first dim from ``flatten_at`` on (dims
    of 1 before them aside), or output dim 0 when only dims of 1 precede them. The dims merged after them must
    be known (``factor``); the dims before may be symbolic (timm's LinearNorm flattens ``[batch, tokens, C]``
    at axis 2 under a dynamic batch)."""
    leading = in_shape[flatten_at:axis] if axis >= flatten_at else in_shape[:axis]
    if any(dim != 1 for dim in leading):
        return None
    factor = int_product(in_shape[axis + 1 :] if axis >= flatten_at else in_shape[axis + 1 : flatten_at])
    return (1 if axis >= flatten_at else 0, factor) if factor is not None else None


def split_axis(in_shape: Sequence[Dim], out_shape: Sequence[Dim], axis: int) -> int | None:
    """The output dim ``k`` when a reshape splits the channel dim into ``out[k] x out[k + 1]``, else None.

    Both parts must be known ints above 1, and the dims before them must hold exactly the input dims
    before ``axis`` (``[B, S, 256] -> [B, S, 4, 64]``: ``k = 2``), or, where those cannot be compared (a
    dynamic batch and sequence that shape inference names apart), the dims after them as many elements as
    those after the channel axis: a flat index is ``rest * C * T + c * T + t`` on both sides, so channel
    ``c`` lands at ``(c // inner, c % inner)`` whatever the dims before are.
    """
    size = in_shape[axis]
    if not isinstance(size, int):
        return None
    before, tail = product(in_shape[:axis]), int_product(in_shape[axis + 1 :])
    for k in range(len(out_shape) - 1):
        outer, inner = out_shape[k], out_shape[k + 1]
        if not (isinstance(outer, int) and isinstance(inner, int) and outer > 1 and inner > 1):
            continue
        if outer * inner != size:
            continue
        if before is not None and product(out_shape[:k]) == before:
            return k
        if tail is not None and int_product(out_shape[k + 2 :]) == tail:
            return k
    return None


def sized_by_target(in_shape: list[Dim], out_shape: list[Dim], target: list[int | None], axis: int) -> list[Dim]:
    """A Reshape's output shape with the sizes its run-time target tells where inference lost them: its
    constant entries, and a ``-1`` just before a constant inner size that splits the channel dim
    (``view(*x.shape[:2], -1, 32)`` on ``[B, S, 128]``: 4). That ``-1`` is the channel dim over the inner
    size when the entries before it are the input's sizes before the channels (read off a Shape of the
    batch and sequence, as exporters write them); pruning's verification runs the result, which a wrong
    reading would fail."""
    sized = [
        t if not isinstance(d, int) and t is not None and t > 0 else d for d, t in zip(out_shape, target, strict=True)
    ]
    size, tail, k = in_shape[axis], int_product(in_shape[axis + 1 :]), axis  # the split keeps the dims before
    if k + 1 < len(sized) and target[k] == -1 and not isinstance(sized[k], int) and isinstance(size, int):
        inner = sized[k + 1]
        if isinstance(inner, int) and inner > 1 and size % inner == 0 and int_product(sized[k + 2 :]) == tail:
            sized[k] = size // inner
    return sized


def normalize_axis(axis: int, rank: int) -> int | None:
    """``axis`` made non-negative, or None when it is out of range."""
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None
