"""Node association trees and the channel groups they tie together (ONNXPruner, section III-B).

One pass over the graph in topological order. Each prunable root (Conv, ConvTranspose, Gemm, MatMul
with a constant weight; LSTM, GRU, RNN with constant ``W`` and ``R``) starts a **channel space**: its
output channels, tracked as a ``Layout`` (``layout.py``) along every tensor they flow into. A node
reading a tracked tensor is handled as its category in the node attribute library says (``library.py``):

- next-no-process: the layout moves (Transpose, Flatten, Reshape, Squeeze, Unsqueeze, Reduce, Gather
  on another axis) or stays (activations, pools) on the node's output;
- next-process: per-channel constants are recorded as slices (BatchNormalization, Add/Mul/... by a
  [C]-shaped constant, a depthwise Conv's filters and bias, its ``group`` attribute); two tracked
  inputs of an elementwise op **tie** their spaces (many-to-one: a residual Add prunes the same
  channels on both sides), a union-find merges them; Concat shifts each input's segments by its offset;
- pruned (as a leaf) and stop-process: the branch ends; a Conv/Gemm/MatMul leaf records the slice of
  its weight that reads the tracked channels, an LSTM/GRU/RNN leaf the input columns of its ``W``; then
  either may start its own space as a root.

**Recurrent roots.** An LSTM, GRU or RNN's channels are its hidden units. Unit ``c`` is one row per gate
block of ``W``, ``R`` (axis 1, one slice per gate at offset ``g * H``: LSTM i, o, f, c; GRU z, r, h; RNN
one), of both halves of ``B`` and of the LSTM peepholes ``P``; column ``c`` of ``R`` (axis 2: the
recurrence reads the units kept); entry ``c`` of a constant ``initial_h``/``initial_c`` (axis 2). Every
direction prunes the same units, so a bidirectional node's directions keep one size. ``hidden_size`` is a
shape edit. An initial state computed at run time is dropped when it is provably zero (PyTorch's default
state, a ``ConstantOfShape`` sized off the input: absent means zero), else the group stays whole. The units
flow out on Y (axis 3) and Y_h, Y_c (axis 2), in either ``layout``. A Reshape merging known dims before the
channel axis into it (a bidirectional Y's ``[seq, batch, 2, H] -> [seq, batch, 2H]``) repeats the segments,
one copy of the channels per entry of the merged dims (``Layout`` segments may name a space twice).

**Attention heads.** A Reshape splitting the channel axis in two (``[B, S, H*D] -> [B, S, H, D]``) leaves
the choice of dim open (``layout.Split``) until the next op decides it. A Gather or Split along the outer
dim picks sections (a fused QKV projection's Q, K and V): the channel space is **cut** into one space
per section (as if the projection were three roots), the sections are tied (they share the inner dim)
and the channels follow the inner dim. Any other op makes the outer dim the channel axis: the spaces
are **coarsened** so that one channel is a head, ``D`` contiguous features (every slice recorded so
far gets ``block * D``), and the Reshape target's ``H`` entry becomes a shape edit. A Split along a
channel axis cuts the spaces the same way (GPT-2's ``c_attn``). A MatMul of two tensors whose
channels sit on a batch axis (``Q @ K^T``, ``P @ V``) ties them like an elementwise op: the Q, K and V
projections of one attention block, and the output projection as their leaf, form one head group.
ONNX's own ``Attention`` op (opset 23, what PyTorch exports ``scaled_dot_product_attention`` as there) ties
its Q, K and V the same way, a channel being one K/V head with the Q heads that read it (grouped-query
attention), its head-count attributes shape edits; ``RotaryEmbedding`` passes whole heads.
A split whose tensors no op reads is resolved as heads at the end (its Reshape runs all the same); when
the node that resolves a split then spoils the group, the coarsening is undone (the group stays whole,
reported in the channels it had).

Whenever the channels cannot be followed exactly the walk **spoils** the spaces involved (their group
is kept whole, with the reason) instead of guessing: a graph output (its shape must not change), a
channel axis that is mixed (Softmax or a Reduce over channels, LRN, a normalization over them), sliced,
padded or resized, split into pieces that do not hold whole channels, a non-depthwise grouped Conv, a
Reshape whose target is computed at run time (fold it to a constant first: ``onnxsat optimize``, with
``--input-shape`` and ``--specialize`` when it comes from the input's size), a
coupling with data no root produces, an unknown shape, an op the library does not know (the reason
names it and the ``--library`` entry that would make it known).

A **channel group** is the result: the tied roots, their channel count, and every slice
``(node input, initializer, axis, offset, block, role)`` that removing channel ``c`` touches: positions
``offset + c * block + [0, block)`` along ``axis``. Shape edits (Reshape targets, depthwise ``group``, an
RNN's ``hidden_size`` and dropped zero states) are kept beside the groups, since one may involve several
groups (after a Concat).

While the walk runs, a space may be cut or coarsened after slices, layouts and edits mention it; both
re-express everything recorded (``_Walk.rewrite``), so every record stays in the space's current units.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from onnxsat.op_kinds import DEFAULT_DOMAINS, qualified_op
from onnxsat.pruning.graph import GraphIndex, attr, node_label
from onnxsat.pruning.layout import (
    Layout,
    Segment,
    Split,
    flatten_axis,
    int_product,
    merge_axis,
    merge_into_outer,
    merge_outer,
    normalize_axis,
    sized_by_target,
    split_axis,
)
from onnxsat.pruning.library import BUILTIN, KEPT_WHOLE, NEXT_NO_PROCESS, NEXT_PROCESS, PRUNED, STOP_PROCESS

ROOT = "root"
ROOT_BIAS = "root bias"
ASSOCIATED = "associated"
"""A tree edge role: the node holds per-channel data that is sliced (its slices are GAIN or OFFSET)."""
GAIN = "gain"
"""A per-channel factor on the way from root to leaves: BatchNormalization or InstanceNormalization scale,
a Mul constant, a depthwise Conv's filters."""
OFFSET = "offset"
"""Per-channel data sliced but not a factor: biases and shifts (Add/Sub constants, BN/depthwise bias), the
constants of Div, Pow, PRelu, Max, Min."""
STATISTIC = "statistic"
"""BatchNormalization running mean/variance: sliced with the channels, but not weights to score."""
LEAF = "leaf"
RECURRENCE = "recurrence"
"""A recurrent root's ``R`` columns: the recurrence reading the hidden units back (scored as a leaf)."""
STATE = "state"
"""A recurrent root's constant initial state ``initial_h``/``initial_c``: sliced, not scored."""

MAX_COPY_RESHAPES = 3
"""Reshapes followed back from a tensor to the Expand that repeats it once per channel (TorchScript's padding
mask: merged into the batch dim and split back, two)."""

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "PRelu", "Sum", "Max", "Min", "Mean", "Pow", "Where"})
KEEPS_SPLIT = frozenset({"Transpose", "Unsqueeze", "Squeeze", "Identity", "Cast", "Dropout"})
"""Ops that move a pending split channel axis without deciding which of its dims the channels follow."""
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
REDUCES = frozenset(op for op in BUILTIN if op.startswith("Reduce"))
MERGED_HEADS_OPS = frozenset(
    {
        "Transpose",
        "Reshape",
        "Softmax",
        "LogSoftmax",
        "MatMul",
        "Mul",
        "Div",
        "Add",
        "Sub",
        "Cast",
        "Identity",
        "Dropout",
    }
)
"""What may read heads merged into the dims before them (``Layout.outer``): moving them, batched products and
elementwise ops; anything else (a Concat or Slice there, a Reduce) keeps the group whole."""
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
"""Gate blocks of a recurrent op's weights, each ``hidden_size`` rows (LSTM i, o, f, c; GRU z, r, h)."""
RECURRENT = frozenset(GATES)
"""Roots whose channels are hidden units; as leaves, their ``W`` ([directions, gates * hidden, input size])
reads X's features."""
RECURRENT_OUTPUTS = ((0, 3), (1, 2), (2, 2))
"""(output, axis of the hidden units): Y ``[seq, dirs, batch, H]``, Y_h and Y_c ``[dirs, batch, H]``; with
``layout=1`` Y is ``[batch, seq, dirs, H]`` and Y_h ``[batch, dirs, H]``: the same axes."""


@dataclass(frozen=True)
class ChannelSlice:
    """One tensor a group's channels index: channel ``c`` is ``offset + c * block + [0, block)`` on ``axis``."""

    node: str
    node_index: int
    input_index: int
    initializer: str
    axis: int
    offset: int
    block: int
    role: str


@dataclass(frozen=True)
class Root:
    node: str
    node_index: int
    op_type: str
    weight: str
    channels: int
    output: str


@dataclass(frozen=True)
class TreeEdge:
    parent: str
    child: str
    op_type: str
    role: str
    """What the child does with the channels: root, pass, associated, tie, concat, leaf, end, output, or
    ``unprunable: why``."""


@dataclass(frozen=True)
class ShapeEdit:
    """A number in the graph that counts channels: a Reshape target or Resize sizes entry, a depthwise
    Conv's ``group``, an attention node's head count.

    Its new value is the old one minus, for each ``(group, block)`` part, that group's pruned channels
    times ``block``.
    """

    kind: str
    """``reshape`` or ``split`` (input 1 of the node, entry ``position``), ``sizes`` (a Resize's input 3),
    ``group``, ``hidden_size``, ``q_num_heads``, ``kv_num_heads`` or ``num_heads`` (the attribute),
    ``split-attribute`` (entry ``position`` of a Split's ``split`` attribute, before opset 13),
    ``factor``: the one-element constant input ``slot`` (``position``) of a Mul computing a run-time target
    entry (``batch * heads``), ``concat-piece``: a Reshape target built at run time by a Concat,
    whose constant input ``slot`` holds the entry at ``position`` (the Reshape at ``node_index`` gets its own
    Concat), or ``zero-state``: a recurrent node's initial state ``slot`` (``position``), zero but computed
    at run time in the old size, is dropped (absent means zero) once any channel is pruned."""
    node_index: int
    position: int
    parts: tuple[tuple[int, int], ...]
    slot: int = 1
    """The node input holding the entry: 1 for a Reshape target or Split sizes, 3 for Resize sizes, the
    Concat's input for ``concat-piece``."""


def _shared_weights(group: ChannelGroup, readers: Counter[str]) -> list[str]:
    """Why a group must stay whole because a weight it would slice (a root's or a leaf's) is also read by
    nodes outside it: one weight applied several times (ALBERT runs one layer's weights in every layer).
    Pruning one use would write a sliced copy beside the original, and the model would grow."""
    slicing: dict[str, dict[int, set[int]]] = {}  # initializer -> reading node -> the axes sliced there
    for s in group.slices:
        if s.role in (ROOT, LEAF, RECURRENCE) and s.initializer:
            slicing.setdefault(s.initializer, {}).setdefault(s.node_index, set()).add(s.axis)
    reasons = []
    for name, nodes in sorted(slicing.items()):
        if readers[name] > len(nodes):
            reasons.append(
                f"its weight {name!r} is also read by {readers[name] - len(nodes)} node(s) outside the group (one "
                "weight used several times): pruning would copy it, and the model would grow"
            )
        elif len({frozenset(axes) for axes in nodes.values()}) > 1:
            reasons.append(
                f"its weight {name!r} is read by two nodes, its channels on different axes: pruning would copy it"
            )
    return reasons


@dataclass
class ChannelGroup:
    index: int
    roots: list[Root]
    channels: int
    slices: list[ChannelSlice] = field(default_factory=list)
    edges: list[TreeEdge] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    """Why the group must stay whole; empty when it can be pruned."""
    unit: int = 1
    """Root output features per channel: 1, or ``D`` when a channel is a block of ``D`` (an attention head)."""
    heads: bool = False
    """The channels are attention heads: blocks (``unit > 1``) that pass a MatMul on a batch axis."""

    @property
    def prunable(self) -> bool:
        return not self.reasons and self.channels > 1

    @property
    def leaves(self) -> list[str]:
        return sorted({s.node for s in self.slices if s.role == LEAF})

    @property
    def structure(self) -> str:
        """The paper's Figure 4 shape: one-to-one, one-to-many, many-to-one or many-to-many."""
        many_roots, many_leaves = len(self.roots) > 1, len(self.leaves) > 1
        return f"{'many' if many_roots else 'one'}-to-{'many' if many_leaves else 'one'}"

    @property
    def name(self) -> str:
        return "+".join(r.node for r in self.roots)

    @property
    def kind(self) -> str:
        """What one channel of the group is: ``channel``, ``head/64`` (attention), ``block/4`` (other splits)."""
        if self.unit == 1:
            return "channel"
        return f"{'head' if self.heads else 'block'}/{self.unit}"

    @property
    def description(self) -> str:
        """``8 channels``, ``4 heads of 64 features`` or ``2 blocks of 4 features``."""
        if self.unit == 1:
            return f"{self.channels} channels"
        return f"{self.channels} {'heads' if self.heads else 'blocks'} of {self.unit} features"


@dataclass
class Forest:
    """Every channel group of a model and the shape edits pruning them needs."""

    groups: list[ChannelGroup]
    edits: list[ShapeEdit]


def build_groups(model: onnx.ModelProto, library: dict[str, str], index: GraphIndex | None = None) -> Forest:
    """The channel groups of ``model`` (Constant nodes already made initializers; see ``graph.py``)."""
    return _Walk(model, library, index or GraphIndex(model)).run()


class _Walk:
    def __init__(self, model: onnx.ModelProto, library: dict[str, str], index: GraphIndex) -> None:
        self.model, self.library, self.index = model, library, index
        self.layouts: dict[str, Layout] = {}
        self.producer: dict[str, str] = {}
        self.roots: list[Root] = []
        self.parent: list[int] = []
        self.slices: dict[int, list[ChannelSlice]] = {}
        self.edges: dict[int, list[TreeEdge]] = {}
        self.spoiled: dict[int, list[str]] = {}
        self.edits: list[tuple[str, int, int, tuple[Segment, ...]]] = []
        self.units: list[int] = []
        """Per space: root output features per channel (the product of its coarsenings)."""
        self.heads: set[int] = set()
        """Spaces whose channels pass a batched MatMul (attention): with a unit above 1, heads."""
        self.children: dict[int, tuple[int, int]] = {}
        """A space cut in two: its halves (the space itself is dead: nothing refers to it any more)."""
        self.resolved: set[int] = set()
        """Split Reshapes (node index) whose channels were decided to follow heads or sections."""

    # ---------------------------------------------------------------------------------- bookkeeping

    def find(self, space: int) -> int:
        while self.parent[space] != space:
            self.parent[space] = self.parent[self.parent[space]]
            space = self.parent[space]
        return space

    def tie(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def live(self, space: int) -> list[int]:
        """``space``, or the spaces it was cut into (a layout read before a cut still names it)."""
        if space not in self.children:
            return [space]
        return [t for half in self.children[space] for t in self.live(half)]

    def members(self, space: int) -> list[int]:
        """The live spaces tied to ``space`` (itself included)."""
        rep = self.find(space)
        return [t for t in range(len(self.roots)) if t not in self.children and self.find(t) == rep]

    def spoil(self, layouts: Sequence[Layout], reason: str) -> str:
        for layout in layouts:
            for space in (t for s in layout.spaces for t in self.live(s)):
                reasons = self.spoiled.setdefault(space, [])
                if reason not in reasons:
                    reasons.append(reason)
        return f"unprunable: {reason}"

    def snapshot(self) -> tuple[object, ...]:
        """What a coarsening changes (records are immutable: copying the containers is enough)."""
        slices = {space: list(pieces) for space, pieces in self.slices.items()}
        return dict(self.layouts), slices, list(self.edits), list(self.roots), list(self.units), set(self.resolved)

    def restore(self, snapshot: tuple[object, ...]) -> None:
        """Undo the coarsenings since ``snapshot``; not after a cut (the union-find keeps cut spaces dead)."""
        if len(self.roots) == len(snapshot[3]):  # type: ignore[arg-type]
            self.layouts, self.slices, self.edits, self.roots, self.units, self.resolved = snapshot  # type: ignore[assignment]

    def rewrite(self, change: Callable[[Segment], tuple[Segment, ...]]) -> None:
        """Re-express every segment recorded (tracked layouts, shape edits) after a cut or a coarsening."""
        for name, layout in self.layouts.items():
            segments = tuple(new for old in layout.segments for new in change(old))
            if segments != layout.segments:
                self.layouts[name] = replace(layout, segments=segments)
        self.edits = [
            (kind, node_index, position, tuple(new for old in segments for new in change(old)))
            for kind, node_index, position, segments in self.edits
        ]

    def coarsen(self, space: int, factor: int) -> bool:
        """Make ``factor`` consecutive channels one channel in ``space`` and every space tied to it.

        Channel ``c`` at ``offset + c * block`` becomes channel ``c // factor`` of block ``block * factor``:
        every slice and layout stays valid, pruning is only coarser. False when a count is not divisible.
        """
        members = self.members(space)
        if any(self.roots[t].channels % factor for t in members):
            return False
        for t in members:
            self.roots[t] = replace(self.roots[t], channels=self.roots[t].channels // factor)
            self.slices[t] = [replace(piece, block=piece.block * factor) for piece in self.slices.get(t, [])]
            self.units[t] *= factor
        coarse = set(members)
        self.rewrite(
            lambda s: (replace(s, block=s.block * factor, count=s.count // factor),) if s.space in coarse else (s,)
        )
        return True

    def cut(self, space: int, at: int) -> None:
        """Re-express ``space`` (and every space tied to it) as two: channels ``[0, at)`` and ``[at, count)``.

        The halves are independent spaces of the same root, as if it were two roots concatenated; halves
        of tied spaces are tied. Used where a Split or a Gather takes part of the channels.
        """
        halves: dict[int, tuple[int, int]] = {}
        for t in self.members(space):
            root = self.roots[t]
            pair = []
            for low, high in ((0, at), (at, root.channels)):
                new = len(self.roots)
                self.roots.append(replace(root, channels=high - low))
                self.parent.append(new)
                self.units.append(self.units[t])
                self.slices[new] = [replace(p, offset=p.offset + low * p.block) for p in self.slices.get(t, [])]
                self.edges[new] = list(self.edges.get(t, []))
                self.spoiled[new] = list(self.spoiled.get(t, []))
                if t in self.heads:
                    self.heads.add(new)
                pair.append(new)
            halves[t] = (pair[0], pair[1])
            self.children[t] = halves[t]
        first = next(iter(halves.values()))
        for low, high in halves.values():
            self.tie(first[0], low)
            self.tie(first[1], high)

        def change(s: Segment) -> tuple[Segment, ...]:
            if s.space not in halves:
                return (s,)
            low, high = halves[s.space]
            return Segment(low, s.offset, s.block, at), Segment(high, s.offset + at * s.block, s.block, s.count - at)

        self.rewrite(change)

    def cut_at(self, name: str, position: int) -> bool:
        """Cut the spaces of tensor ``name`` so that no channel straddles ``position`` on its (flat) axis.

        False when a channel's block straddles it (the piece would hold part of a channel).
        """
        while True:
            for segment in self.layouts[name].segments:
                end = segment.offset + segment.count * segment.block
                if segment.offset < position < end:
                    if (position - segment.offset) % segment.block:
                        return False
                    self.cut(segment.space, (position - segment.offset) // segment.block)
                    break
            else:
                return True

    def add_edit(self, kind: str, node_index: int, position: int, segments: tuple[Segment, ...]) -> None:
        """Record a shape edit once (a split Reshape may be resolved along several paths)."""
        if not any(e[:3] == (kind, node_index, position) for e in self.edits):
            self.edits.append((kind, node_index, position, segments))

    def add_slices(self, layout: Layout, node_index: int, slot: int, axis: int, role: str, scale: int = 1) -> None:
        """Record that input ``slot`` of the node is indexed by ``layout``'s channels along ``axis``."""
        node = self.model.graph.node[node_index]
        name = node.input[slot]
        for segment in layout.segments:
            scaled = segment.scaled(scale)
            self.slices.setdefault(segment.space, []).append(
                ChannelSlice(node_label(node), node_index, slot, name, axis, scaled.offset, scaled.block, role)
            )

    def track(self, name: str, layout: Layout, producer: str) -> None:
        """``name`` now carries ``layout``; a graph output or a subgraph capture spoils it."""
        self.layouts[name] = layout
        self.producer[name] = producer
        if name in self.index.outputs:
            self.spoil([layout], f"reaches graph output {name!r}")
            for space in layout.spaces:
                self.edges.setdefault(space, []).append(TreeEdge(producer, name, "graph output", "output"))
        if name in self.index.subgraph_names:
            self.spoil([layout], f"{name!r} is read inside a subgraph")

    def shape(self, name: str) -> list[int | str | None] | None:
        return self.index.shape(name)

    def unrooted(self, name: str) -> str:
        """Why tensor ``name`` cannot be sliced with the channels, with the fix when it is constant data
        computed at run time (Paddle2ONNX writes a Conv bias as Add of a Reshape of a Constant)."""
        if self.index.from_constants(name):
            return "which no root produces (computed from constants: fold them first with onnxsat optimize)"
        return "which no root produces"

    # ------------------------------------------------------------------------------------ the walk

    def run(self) -> Forest:
        for node_index, node in enumerate(self.model.graph.node):
            tracked = {slot: self.layouts[name] for slot, name in enumerate(node.input) if name in self.layouts}
            if tracked:
                self.visit(node_index, node, tracked)
            candidate = node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and node.domain in DEFAULT_DOMAINS
            if candidate and not any(name in self.layouts for name in node.output):
                self.root(node_index, node)
            elif node.op_type in RECURRENT and node.domain in DEFAULT_DOMAINS:
                self.recurrent_root(node_index, node)
        for name in list(self.layouts):  # a split no op decided (its tensors end unread): heads by default
            split = self.layouts[name].split
            if split is None or split.node_index in self.resolved or self.index.consumers.get(name):
                continue
            spaces = [m for s in self.layouts[name].spaces for m in self.members(s)]
            if not any(self.spoiled.get(space) for space in spaces):  # a whole group needs no edit
                why = self.collapse(name)
                if why:
                    self.spoil([self.layouts[name]], f"{name!r}: {why}")
        return self.forest()

    def visit(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> None:
        label = node_label(node)
        op = qualified_op(node.domain, node.op_type, ".")
        category = self.library.get(op)
        if category is None and op in KEPT_WHOLE:
            role = self.spoil(list(tracked.values()), f"{op} (node {label!r}) {KEPT_WHOLE[op]}")
        elif category is None:  # never guessed: the group stays whole, the others prune
            entry, end = json.dumps({op: NEXT_NO_PROCESS}), json.dumps({op: STOP_PROCESS})
            role = self.spoil(
                list(tracked.values()),
                f"the node attribute library does not know {op!r} (node {label!r}); if it is elementwise on its "
                f"first input, add --library FILE.json holding {entry}, or {end} if what it computes does not depend "
                "on how many channels it reads (as Shape's)",
            )
        else:
            pending = any(layout.split is not None for layout in tracked.values())
            before = self.snapshot() if pending else None
            role = self.resolve_splits(node, tracked)
            tracked = {slot: self.layouts[node.input[slot]] for slot in tracked}
            if not role and op not in MERGED_HEADS_OPS and any(t.outer is not None for t in tracked.values()):
                role = self.spoil(
                    list(tracked.values()), f"{op} {label!r} reads heads merged into the dims before them"
                )
            if not role and op not in BUILTIN:
                role = self.declared(category, node, tracked)
            if not role:
                role = self.dispatch(category, node_index, node, tracked)
            if before is not None and role.startswith("unprunable"):
                self.restore(before)  # the group stays whole: keep its channels in the units it had
        for slot in tracked:
            parent = self.producer[node.input[slot]]
            for space in self.layouts[node.input[slot]].spaces:
                self.edges.setdefault(space, []).append(TreeEdge(parent, label, node.op_type, role))

    def dispatch(self, category: str, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        if category == PRUNED:
            if node.op_type in RECURRENT:
                return self.recurrent(node_index, node, tracked)
            return self.leaf(node_index, node, tracked)
        if category == NEXT_NO_PROCESS:
            return self.pass_through(node_index, node, tracked)
        if category == NEXT_PROCESS:
            return self.process(node_index, node, tracked)
        assert category == STOP_PROCESS
        return "end"

    def declared(self, category: str, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """An op the user put in the library: stop-process ends the path; next-no-process carries the
        channels of its first input to its first output, checked as far as the inferred shapes tell."""
        if category == STOP_PROCESS:
            return "end"
        layouts, label = list(tracked.values()), node_label(node)
        if set(tracked) != {0}:
            return self.spoil(layouts, f"{node.op_type} {label!r} takes them as an input other than the first")
        in_shape, out_shape = self.shape(node.input[0]), self.shape(node.output[0])
        if in_shape is None or out_shape is None or list(in_shape) != list(out_shape):
            return self.spoil(
                layouts,
                f"{node.op_type} {label!r} is declared next-no-process but its output shape is not known to "
                "equal its input's",
            )
        if any(name and self.index.uses(name) for name in node.output[1:]):
            return self.spoil(layouts, f"{node.op_type} {label!r} has a second output that depends on them")
        self.track(node.output[0], tracked[0], label)
        return "pass"

    def resolve_splits(self, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """Make a pending split channel axis the head axis, unless ``node`` moves it or picks sections.

        Returns "" to go on, or the spoiled role when the heads cannot be formed.
        """
        for slot, layout in tracked.items():
            if layout.split is None or self.keeps_split(node, layout):
                continue
            why = self.collapse(node.input[slot])
            if why:
                return self.spoil(list(tracked.values()), f"{node.op_type} {node_label(node)!r}: {why}")
        return ""

    def keeps_split(self, node: onnx.NodeProto, layout: Layout) -> bool:
        """``node`` moves a pending split (Transpose, Squeeze, ...) or picks sections along its outer dim."""
        if node.domain not in DEFAULT_DOMAINS or len([n for n in node.input if n in self.layouts]) != 1:
            return False
        if node.op_type in KEEPS_SPLIT:
            return node.input[0] in self.layouts
        rank = self.index.rank(node.input[0])
        if rank is None or node.input[0] not in self.layouts:
            return False
        if node.op_type == "Split":
            return normalize_axis(attr(node, "axis", 0), rank) == layout.axis
        if node.op_type == "Gather":
            index = node.input[1]
            scalar = self.index.is_constant(index) and self.index.rank(index) == 0
            return scalar and normalize_axis(attr(node, "axis", 0), rank) == layout.axis
        return False

    def collapse(self, name: str) -> str:
        """The outer dim of tensor ``name``'s pending split becomes its channel axis: a channel is a head.

        Every space of the layout is coarsened until each block covers whole heads (a root's output
        channels in blocks of ``D``); the Reshape's literal ``H`` entry becomes a shape edit. Returns
        why it cannot be done, or "".
        """
        split = self.layouts[name].split
        assert split is not None
        inner = split.inner
        why = self.whole_blocks(name, inner)
        if why:
            return why
        layout = self.layouts[name]
        segments = in_blocks(layout.segments, inner)
        if split.outer_entry is not None:
            self.target_edit(split.node_index, split.outer_entry, segments)
        self.resolved.add(split.node_index)
        self.layouts[name] = Layout(layout.axis, layout.size // inner, segments)
        return ""

    def whole_blocks(self, name: str, inner: int) -> str:
        """Coarsen the spaces of tensor ``name`` until each of its channels covers whole blocks of ``inner``
        positions (heads of ``inner`` features) starting at block boundaries. Returns why it cannot, or ""."""
        while True:
            layout = self.layouts[name]
            segment = next((s for s in layout.segments if s.block % inner), None)
            if segment is None:
                break
            if segment.offset % inner:
                return f"channels at offset {segment.offset} do not start a block of {inner}"
            factor = inner // math.gcd(segment.block, inner)
            if not self.coarsen(segment.space, factor):
                return f"{segment.count} channels do not divide into blocks of {inner}"
        if any(s.offset % inner for s in layout.segments):
            return f"channels do not start at a block boundary of {inner}"
        return ""

    # ------------------------------------------------------------------------------------ roots

    def root(self, node_index: int, node: onnx.NodeProto) -> None:
        """Start a channel space at ``node`` if its output channels can be pruned."""
        found = self.root_slices(node)
        if found is None:
            return
        channels, axis_of_output, weight_axis, bias = found
        label = node_label(node)
        space = self.new_space(Root(label, node_index, node.op_type, node.input[1], channels, node.output[0]))
        layout = Layout(axis_of_output, channels, (Segment(space, 0, 1, channels),))
        self.add_slices(layout, node_index, 1, weight_axis, ROOT)
        if bias is not None:
            self.add_slices(layout, node_index, 2, bias, ROOT_BIAS)
        self.track(node.output[0], layout, label)

    def new_space(self, root: Root) -> int:
        """A channel space for ``root``, tied to nothing yet."""
        self.roots.append(root)
        self.parent.append(len(self.roots) - 1)
        self.units.append(1)
        return len(self.roots) - 1

    def recurrent_root(self, node_index: int, node: onnx.NodeProto) -> None:
        """An LSTM, GRU or RNN with constant ``W`` and ``R``: its hidden units are a channel space.

        Unit ``c`` is row ``g * H + c`` of each gate block ``g`` of ``W``, ``R`` and ``P`` (every direction
        alike, so a bidirectional node keeps its two directions the same size) and of both halves of ``B``,
        column ``c`` of ``R`` (the recurrence reads the units it keeps) and entry ``c`` of a constant initial
        state; ``hidden_size`` is a shape edit. An initial state computed at run time is dropped when it is
        provably zero (an exporter's default state: absent means zero), else the group stays whole.
        """
        hidden = self.recurrent_size(node)
        if hidden is None:
            return
        op, label = node.op_type, node_label(node)
        output = next((name for name in node.output if name), "")
        space = self.new_space(Root(label, node_index, op, node.input[1], hidden, output))
        layout = Layout(0, hidden, (Segment(space, 0, 1, hidden),))
        gates = GATES[op]
        for gate in range(gates):
            self.gate_slice(layout, node_index, 1, gate * hidden, ROOT)  # W rows
            self.gate_slice(layout, node_index, 2, gate * hidden, ROOT)  # R rows
        self.add_slices(layout, node_index, 2, 2, RECURRENCE)  # R columns
        self.edits.append(("hidden_size", node_index, 0, layout.segments))
        why = self.recurrent_extras(node_index, node, layout, hidden)
        if why:
            self.spoil([layout], f"{op} {label!r}: {why}")
        for slot, axis in RECURRENT_OUTPUTS:
            if slot < len(node.output) and node.output[slot]:
                self.track(node.output[slot], Layout(axis, hidden, layout.segments), label)

    def recurrent_size(self, node: onnx.NodeProto) -> int | None:
        """The hidden size of a recurrent node whose ``W`` and ``R`` are constants shaped as its attributes say,
        else None (not a root)."""
        if len(node.input) < 3 or not all(self.index.is_constant(name) for name in node.input[1:3]):
            return None
        weight, recurrence = self.shape(node.input[1]), self.shape(node.input[2])
        if weight is None or recurrence is None or len(weight) != 3 or len(recurrence) != 3:
            return None
        hidden = attr(node, "hidden_size", recurrence[2])
        directions = 2 if attr(node, "direction", "forward") == "bidirectional" else 1
        rows = GATES[node.op_type] * hidden  # type: ignore[operator]
        if weight[:2] != [directions, rows] or recurrence != [directions, rows, hidden]:
            return None
        return int(hidden)  # type: ignore[call-overload]

    def gate_slice(self, layout: Layout, node_index: int, slot: int, offset: int, role: str) -> None:
        """Rows ``offset + c`` of input ``slot`` along axis 1: one gate block of a recurrent node's weights."""
        shifted = replace(layout, segments=tuple(s.shifted(offset) for s in layout.segments))
        self.add_slices(shifted, node_index, slot, 1, role)

    def recurrent_extras(self, node_index: int, node: onnx.NodeProto, layout: Layout, hidden: int) -> str:
        """Slice a recurrent root's optional inputs: bias ``B``, initial states, LSTM peepholes ``P``; or why not."""
        gates = GATES[node.op_type]
        directions = self.shape(node.input[1])[0]  # type: ignore[index]
        optional = {3: ("B", [directions, 2 * gates * hidden]), 7: ("P", [directions, 3 * hidden])}
        for slot, (what, expected) in optional.items():
            name = node.input[slot] if slot < len(node.input) else ""
            if not name or (slot == 7 and node.op_type != "LSTM"):
                continue
            if not self.index.is_constant(name):
                return f"its {what} {name!r} is computed at run time"
            if self.shape(name) != expected:
                return f"its {what} has shape {self.shape(name)}, not {expected}"
            for block in range(expected[1] // hidden):
                self.gate_slice(layout, node_index, slot, block * hidden, ROOT_BIAS if slot == 3 else OFFSET)
        for slot in (5, 6) if node.op_type == "LSTM" else (5,):
            name = node.input[slot] if slot < len(node.input) else ""
            if not name:
                continue
            shape = self.shape(name)
            if self.index.is_constant(name) and shape is not None and len(shape) == 3 and shape[2] == hidden:
                self.add_slices(layout, node_index, slot, 2, STATE)
            elif self.index.is_zero(name):
                self.edits.append(("zero-state", node_index, slot, layout.segments))
            else:
                shaped = f"[directions, batch, {hidden}]"
                return f"its initial state {name!r} is neither a constant {shaped} nor known to be zero"
        return ""

    def root_slices(self, node: onnx.NodeProto) -> tuple[int, int, int, int | None] | None:
        """(channels, output channel axis, weight axis, bias axis or None) for a root, or None."""
        if len(node.input) < 2 or not self.index.is_constant(node.input[1]):
            return None
        weight = self.shape(node.input[1])
        assert weight is not None
        bias_name = node.input[2] if len(node.input) > 2 else ""
        if bias_name and not self.index.is_constant(bias_name):
            return None
        if node.op_type in ("Conv", "ConvTranspose"):
            if len(weight) < 3 or attr(node, "group", 1) != 1:
                return None
            axis = 0 if node.op_type == "Conv" else 1
            return int(weight[axis]), 1, axis, 0 if bias_name else None
        if len(weight) != 2:
            return None
        if node.op_type == "Gemm":
            axis = 0 if attr(node, "transB", 0) else 1
            channels = int(weight[axis])
            bias_axis = None
            if bias_name:
                bias = self.shape(bias_name) or []
                if bias and bias[-1] == channels and channels > 1:
                    bias_axis = len(bias) - 1
            return channels, 1, axis, bias_axis
        output = self.shape(node.output[0])
        rank = len(output) if output is not None else self.index.rank(node.input[0])
        if rank is None or rank < 2:
            return None  # a 1-D activation: nothing to follow channels along
        return int(weight[1]), rank - 1, 1, None

    # ------------------------------------------------------------------------------------ leaves

    def leaf(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """A Conv/ConvTranspose/Gemm/MatMul reading tracked channels (a depthwise Conv passes them on)."""
        layouts = list(tracked.values())
        if node.op_type == "MatMul" and len(node.input) > 1 and not self.index.is_constant(node.input[1]):
            batched = self.batched_matmul(node, tracked)
            if batched:
                return batched
        if set(tracked) != {0}:
            return self.spoil(layouts, f"{node.op_type} {node_label(node)!r} takes them as weights or bias")
        layout = tracked[0]
        if len(node.input) < 2 or not self.index.is_constant(node.input[1]):
            return self.spoil(layouts, f"{node_label(node)!r} multiplies them by a weight computed at run time")
        weight = self.shape(node.input[1])
        assert weight is not None
        if node.op_type in ("Conv", "ConvTranspose"):
            if layout.axis != 1:
                return self.spoil(layouts, f"{node_label(node)!r} reads them on axis {layout.axis}, not 1")
            group = attr(node, "group", 1)
            if group == 1:
                self.add_slices(layout, node_index, 1, 1 if node.op_type == "Conv" else 0, LEAF)
                return LEAF
            if node.op_type == "Conv" and weight[1] == 1 and group == layout.size:
                return self.depthwise(node_index, node, layout, int(weight[0]) // group)
            return self.spoil(layouts, f"grouped {node.op_type} {node_label(node)!r} (group={group})")
        rank = self.index.rank(node.input[0])
        if node.op_type == "Gemm":
            wanted = 0 if attr(node, "transA", 0) else 1
            if layout.axis != wanted:
                return self.spoil(layouts, f"Gemm {node_label(node)!r} reads them on the wrong axis")
            self.add_slices(layout, node_index, 1, 1 if attr(node, "transB", 0) else 0, LEAF)
            return LEAF
        if rank is None or layout.axis != rank - 1 or len(weight) != 2:
            return self.spoil(layouts, f"MatMul {node_label(node)!r} does not contract over them")
        self.add_slices(layout, node_index, 1, 0, LEAF)
        return LEAF

    def recurrent(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """LSTM, GRU or RNN reading the channels as X's input features (axis 2 in either ``layout``): the
        input columns of ``W`` are sliced (its hidden units are its own space: ``recurrent_root``)."""
        op, label = node.op_type, node_label(node)
        layouts = list(tracked.values())
        if set(tracked) != {0}:
            return self.spoil(layouts, f"{op} {label!r} takes them as a weight, a length or a state")
        layout = tracked[0]
        if self.index.rank(node.input[0]) != 3 or layout.axis != 2:
            return self.spoil(layouts, f"{op} {label!r} reads them on axis {layout.axis}, not its input features")
        weight = node.input[1]
        if not self.index.is_constant(weight):
            return self.spoil(layouts, f"{op} {label!r} multiplies them by a weight computed at run time")
        shape = self.shape(weight)
        if shape is None or len(shape) != 3 or shape[2] != layout.size:
            return self.spoil(layouts, f"{op} {label!r}: W of shape {shape} does not read {layout.size} features")
        self.add_slices(layout, node_index, 1, 2, LEAF)
        return LEAF

    def batched_matmul(self, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """A MatMul of two activations (``Q @ K^T``, ``P @ V``) whose channels sit on a batch axis.

        Batch axes broadcast like an elementwise op's: tracked inputs are tied, the channels pass to the
        output on the same axis. Returns "" when the channels are not on a batch axis (the caller spoils).
        """
        label = node_label(node)
        ranks = [self.index.rank(name) for name in node.input[:2]]
        if ranks[0] is None or ranks[1] is None or min(ranks[0], ranks[1]) < 2:
            return ""
        out_rank = max(ranks[0], ranks[1])
        aligned = {slot: layout.axis + out_rank - ranks[slot] for slot, layout in tracked.items()}  # type: ignore[operator]
        if any(axis >= out_rank - 2 for axis in aligned.values()):
            return ""
        tracked = self.paired_blocks(node, tracked)
        layouts = list(tracked.values())
        first = tracked[min(tracked)]
        axis = aligned[min(tracked)]
        if any(aligned[slot] != axis or layout.structure() != first.structure() for slot, layout in tracked.items()):
            return self.spoil(layouts, f"MatMul {label!r} combines channels laid out differently")
        for layout in layouts[1:]:
            for mine, theirs in zip(first.segments, layout.segments, strict=True):
                self.tie(mine.space, theirs.space)
        self.heads.update(first.spaces)  # channels on a batch axis of a MatMul: attention heads
        for slot, name in enumerate(node.input[:2]):
            other_axis = axis - (out_rank - ranks[slot])  # type: ignore[operator]
            if slot in tracked or other_axis < 0:
                continue
            shape = self.shape(name)
            if shape is not None and shape[other_axis] == 1:
                continue
            return self.spoil(layouts, f"MatMul {label!r} ties them to {name!r}, which no root produces")
        self.track(node.output[0], first.moved(axis), label)
        return "tie" if len(tracked) > 1 else "pass"

    def attention(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """ONNX's ``Attention`` (opset 23): Q, K and V hold heads, 3-D (``[B, S, heads * D]``, the counts in
        ``q_num_heads``/``kv_num_heads``) or 4-D (``[B, heads, S, D]``).

        Q head ``h`` reads K and V head ``h // G`` (grouped-query attention, ``G = q_heads / kv_heads``), so a
        channel is one K/V head and the ``G`` Q heads reading it: the three are tied, and Y (the Q heads'
        outputs, V's head size each) carries V's channels ``G`` times as wide. The head-count attributes are
        shape edits. A mask with a plane per head, a key/value cache (its shape is the model's interface)
        or a second output read keeps the group whole.
        """
        label = node_label(node)
        layouts = list(tracked.values())
        if set(tracked) - {0, 1, 2}:
            return self.spoil(layouts, f"Attention {label!r} takes them as a mask, a cache or a length")
        for slot in (0, 1, 2):
            if slot not in tracked:
                name = node.input[slot]
                return self.spoil(layouts, f"Attention {label!r} ties them to {name!r}, {self.unrooted(name)}")
        why = self.attention_extras(node)
        if why:
            return self.spoil(layouts, f"Attention {label!r} {why}")
        ranks = {self.index.rank(name) for name in node.input[:3]}
        q_heads, kv_heads = attr(node, "q_num_heads", 0), attr(node, "kv_num_heads", 0)
        if ranks == {4}:
            q_shape, k_shape = self.shape(node.input[0]), self.shape(node.input[1])
            q_heads, kv_heads = q_shape[1] if q_shape else None, k_shape[1] if k_shape else None  # type: ignore[assignment]
        elif ranks != {3}:
            return self.spoil(layouts, f"Attention {label!r}: Q, K and V of ranks {sorted(ranks, key=str)}")
        if not isinstance(q_heads, int) or not isinstance(kv_heads, int) or not kv_heads or q_heads % kv_heads:
            return self.spoil(layouts, f"Attention {label!r}: head counts {q_heads} and {kv_heads} unknown or uneven")
        axis, group = (1 if ranks == {4} else 2), q_heads // kv_heads
        units = []
        for slot, heads in ((0, q_heads), (1, kv_heads), (2, kv_heads)):
            layout = self.layouts[node.input[slot]]
            if layout.axis != axis or layout.size % heads:
                return self.spoil(layouts, f"Attention {label!r} reads them on axis {layout.axis}, not its heads")
            units.append(layout.size // heads * (group if slot == 0 else 1))  # positions per K/V head
        before = self.snapshot()
        for slot, unit in enumerate(units):
            why = self.whole_blocks(node.input[slot], unit)
            if why:
                self.restore(before)
                return self.spoil(layouts, f"Attention {label!r}: {why}")
        q, k, v = (self.layouts[name] for name in node.input[:3])
        in_heads = [
            tuple((s.offset // unit, s.block // unit, s.count) for s in layout.segments)
            for layout, unit in zip((q, k, v), units, strict=True)
        ]
        if len(set(in_heads)) != 1:
            self.restore(before)
            return self.spoil(layouts, f"Attention {label!r} pairs Q, K and V heads of different channel spaces")
        for mine, *theirs in zip(q.segments, k.segments, v.segments, strict=True):
            for other in theirs:
                self.tie(mine.space, other.space)
        self.heads.update(q.spaces)
        for attribute, layout, unit, per_head in (
            ("q_num_heads", q, units[0], group),
            ("kv_num_heads", k, units[1], 1),
        ):
            if attr(node, attribute, None) is not None:
                self.edits.append((attribute, node_index, 0, in_blocks(layout.segments, unit, per_head)))
        self.track(node.output[0], Layout(axis, v.size * group, tuple(s.scaled(group) for s in v.segments)), label)
        return "tie"

    def attention_extras(self, node: onnx.NodeProto) -> str:
        """Why an Attention node's heads cannot shrink for what it holds besides Q, K and V, or ""."""
        mask = node.input[3] if len(node.input) > 3 else ""
        if mask:
            shape = self.shape(mask)
            if shape is None:
                return f"has a mask {mask!r} of unknown shape"
            if len(shape) >= 3 and shape[-3] != 1:
                return f"has a mask {mask!r} with a plane per head"
        if any(node.input[4:6]):
            return "reads a key/value cache of every head (past_key, past_value: the model's interface)"
        if any(name and self.index.uses(name) for name in node.output[1:]):
            return "has its present key/value or its QK product read"
        return ""

    def rotary(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """ONNX's ``RotaryEmbedding`` (opset 23) rotates features within each head: whole heads pass.

        3-D input ``[B, S, heads * D]`` (``num_heads`` says how many: a shape edit) or 4-D ``[B, heads, S, D]``.
        """
        label = node_label(node)
        layouts = list(tracked.values())
        if set(tracked) != {0}:
            return self.spoil(layouts, f"RotaryEmbedding {label!r} takes them as a rotation or a position")
        layout, rank, heads = tracked[0], self.index.rank(node.input[0]), attr(node, "num_heads", 0)
        if rank == 4:
            heads = layout.size
        if rank not in (3, 4) or layout.axis != (2 if rank == 3 else 1) or not heads or layout.size % heads:
            return self.spoil(layouts, f"RotaryEmbedding {label!r} rotates them within a head")
        unit = layout.size // heads
        why = self.whole_blocks(node.input[0], unit)
        if why:
            return self.spoil(layouts, f"RotaryEmbedding {label!r}: {why}")
        layout = self.layouts[node.input[0]]
        self.heads.update(layout.spaces)
        if attr(node, "num_heads", None) is not None:
            self.edits.append(("num_heads", node_index, 0, in_blocks(layout.segments, unit)))
        self.track(node.output[0], layout, label)
        return "pass"

    def paired_blocks(self, node: onnx.NodeProto, tracked: dict[int, Layout]) -> dict[int, Layout]:
        """Coarsen the finer of two inputs' channel spaces where one's channel spans whole channels of the other
        over the same positions: grouped-query attention's Q heads (one each) meet K/V heads repeated ``G``
        times (``G`` positions each), so ``G`` Q heads become one channel with their K/V head."""
        for _ in range(len(tracked) * 4):
            layouts = [self.layouts[node.input[slot]] for slot in sorted(tracked)]
            pairs = [
                (mine, theirs)
                for other in layouts[1:]
                if other.size == layouts[0].size and len(other.segments) == len(layouts[0].segments)
                for mine, theirs in zip(layouts[0].segments, other.segments, strict=True)
                if mine.offset == theirs.offset
                and mine.block != theirs.block
                and mine.block * mine.count == theirs.block * theirs.count
            ]
            fine, coarse = next(((a, b) if a.block < b.block else (b, a) for a, b in pairs), (None, None))
            if fine is None or coarse is None or coarse.block % fine.block:
                break
            if not self.coarsen(fine.space, coarse.block // fine.block):
                break
        return {slot: self.layouts[node.input[slot]] for slot in tracked}

    def depthwise(self, node_index: int, node: onnx.NodeProto, layout: Layout, multiplier: int) -> str:
        """A depthwise Conv: filters and bias follow the input channels, and so do its outputs."""
        bias = node.input[2] if len(node.input) > 2 else ""
        if bias and not self.index.is_constant(bias):
            return self.spoil([layout], f"depthwise Conv {node_label(node)!r} has a bias computed at run time")
        self.add_slices(layout, node_index, 1, 0, GAIN, multiplier)
        if bias:
            self.add_slices(layout, node_index, 2, 0, OFFSET, multiplier)
        self.edits.append(("group", node_index, 0, layout.segments))
        out = Layout(1, layout.size * multiplier, tuple(s.scaled(multiplier) for s in layout.segments))
        self.track(node.output[0], out, node_label(node))
        return ASSOCIATED

    # ------------------------------------------------------------------------------ next-no-process

    def pass_through(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """Follow the channel axis through a node that does not change the channels (or spoil)."""
        layouts = list(tracked.values())
        label = node_label(node)
        if node.op_type == "Pow":
            return self.elementwise(node_index, node, tracked)
        if node.op_type == "Einsum":
            return self.einsum(node_index, node, tracked)
        if node.op_type == "RotaryEmbedding":
            return self.rotary(node_index, node, tracked)
        if set(tracked) != {0}:
            return self.spoil(layouts, f"{node.op_type} {label!r} takes them as a parameter")
        if node.op_type == "Expand":
            return self.expand(node_index, node, tracked[0])
        layout = tracked[0]
        if node.op_type == "Split":
            return self.split_node(node_index, node, layout)
        moved = self.moved_axis(node_index, node, layout)
        if isinstance(moved, str):
            return self.spoil(layouts, f"{node.op_type} {label!r}: {moved}")
        extra = [name for name in node.output[1:] if name and self.index.uses(name)]
        if extra and node.op_type != "Dropout":
            return self.spoil(layouts, f"{node.op_type} {label!r} has a second output that depends on them")
        self.track(node.output[0], moved, label)
        if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
            self.track(node.output[1], moved, label)
        return "pass"

    def expand(self, node_index: int, node: onnx.NodeProto, layout: Layout) -> str:
        """Expand broadcasting other dims (grouped-query attention repeats each K/V head: ``[B, kv, 1, S, D] ->
        [B, kv, G, S, D]``): the channels stay. The shape's entry on the channel axis is 1 (kept), their count
        (an edit), or read off a tensor pruned alike."""
        label = node_label(node)
        in_rank, out_rank = self.index.rank(node.input[0]), self.index.rank(node.output[0])
        entries = self.index.target_entries(node.input[1])
        if in_rank is None or out_rank is None or entries is None or len(entries) != out_rank:
            return self.spoil([layout], f"Expand {label!r}: its shape is unknown")
        moved = layout.moved(layout.axis + out_rank - in_rank)
        entry = entries[moved.axis]
        in_shape = self.shape(node.input[0])
        kept = in_shape is not None and in_shape[layout.axis] == layout.size and entry in (1, layout.size, None)
        if not kept or layout.split is not None or layout.outer:
            return self.spoil([layout], f"Expand {label!r} broadcasts the channel axis")
        if entry == layout.size:
            unfit = self.uneditable(node, moved.axis)
            if unfit:
                return self.spoil([layout], f"Expand {label!r}: {unfit}")
            self.target_edit(node_index, moved.axis, moved.segments)
        elif entry != 1 and not (entry is None and self.sized_alike(node.input[1], moved.axis, moved)):
            return self.spoil([layout], f"Expand {label!r}: its shape's channel entry is computed at run time")
        self.track(node.output[0], moved, label)
        return "pass"

    def copies_per_channel(self, name: str, axis: int, layout: Layout, reader: int) -> bool:
        """``name`` is one value repeated along ``axis`` once per channel by an Expand of a size-1 dim
        (``nn.MultiheadAttention`` repeats a key padding mask for every head), perhaps reshaped on the way
        (TorchScript merges the copies into the batch dim and splits them back), first read by node
        ``reader``: with channels pruned it takes as many fewer copies. The Expand's output is tracked with
        the channels and its shape entry edited, and the Reshapes between are walked again with it (their
        targets edited as for any tensor of these channels); ``name`` ends tracked like ``layout``, so another
        op reading the same copies (the next layer's scores) is tied to these channels and the edits fit both."""
        if layout.split is not None or layout.outer is not None:
            return False
        chain: list[int] = []  # the Reshapes from the Expand to ``name``, last first
        current = name
        while True:
            producer = self.index.producers.get(current)
            if producer is None or producer.domain not in DEFAULT_DOMAINS or current in self.layouts:
                return False
            if producer.op_type not in ("Expand", "Reshape"):
                return False  # (most operands end here: a residual's other branch)
            if producer.op_type == "Reshape" and len(chain) == MAX_COPY_RESHAPES:
                return False
            later = [index for index, _ in self.index.consumers.get(current, []) if index < reader]
            if (current == name and later) or len(later) > 1:
                return False  # a reader already walked (other than the next Reshape) would get fewer copies unseen
            node_index = next(i for i, n in enumerate(self.model.graph.node) if n is producer)
            if producer.op_type == "Expand":
                break
            chain.append(node_index)
            current = producer.input[0]
        found = self.repeated_axis(producer, layout.size, axis if not chain else None)
        if found is None:
            return False
        out_axis, position = found
        self.target_edit(node_index, position, layout.segments)
        self.track(current, replace(layout, axis=out_axis), node_label(producer))
        for index in reversed(chain):
            node = self.model.graph.node[index]
            self.visit(index, node, {0: self.layouts[node.input[0]]})
        got = self.layouts.get(name)
        return got is not None and got.axis == axis and got.structure() == layout.structure()

    def repeated_axis(self, expand: onnx.NodeProto, size: int, axis: int | None) -> tuple[int, int] | None:
        """(output axis, shape entry) where ``expand`` repeats a size-1 dim ``size`` times through an editable
        entry: at ``axis`` when given, else the one such axis; None if there is none (or several)."""
        in_rank, out_rank = self.index.rank(expand.input[0]), self.index.rank(expand.output[0])
        entries = self.index.target_entries(expand.input[1])
        in_shape = self.shape(expand.input[0])
        if in_rank is None or out_rank is None or entries is None or in_shape is None:
            return None
        found = []
        for out_axis in range(out_rank) if axis is None else [axis]:
            in_axis, position = out_axis - (out_rank - in_rank), out_axis - (out_rank - len(entries))
            if (in_axis >= 0 and in_shape[in_axis] != 1) or position < 0 or entries[position] != size:
                continue
            if not self.uneditable(expand, position):
                found.append((out_axis, position))
        return found[0] if len(found) == 1 else None

    def einsum(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """Einsum passes the channels on when their letter is kept in the output, once per operand (no
        diagonal), and not summed: elementwise in that letter. Other operands with the letter are tied
        (tracked) or sliced (constant); anything else, a contraction included, keeps the group whole."""
        label = node_label(node)
        layouts = list(tracked.values())
        ranks = [self.index.rank(name) for name in node.input]
        terms = einsum_axes(str(attr(node, "equation", "")), ranks)
        if isinstance(terms, str):
            return self.spoil(layouts, f"Einsum {label!r}: {terms}")
        inputs, output = terms
        first_slot = min(tracked)
        first = tracked[first_slot]
        letter = inputs[first_slot][first.axis]
        if letter.startswith("."):
            return self.spoil(layouts, f"Einsum {label!r}: the channel axis is inside '...'")
        if letter not in output:
            return self.spoil(layouts, f"Einsum {label!r} sums over the channels ({letter!r} is contracted)")
        for slot, axes in enumerate(inputs):
            if axes.count(letter) > 1:
                return self.spoil(layouts, f"Einsum {label!r} takes a diagonal of the channels ({letter!r})")
            if slot in tracked:
                layout = tracked[slot]
                if axes[layout.axis] != letter or layout.structure() != first.structure():
                    return self.spoil(layouts, f"Einsum {label!r} combines channels laid out differently")
                for mine, theirs in zip(first.segments, layout.segments, strict=True):
                    self.tie(mine.space, theirs.space)
            elif letter in axes:
                name = node.input[slot]
                if not self.index.is_constant(name):
                    return self.spoil(layouts, f"Einsum {label!r} ties them to {name!r}, {self.unrooted(name)}")
                self.add_slices(first, node_index, slot, axes.index(letter), GAIN)
        self.track(node.output[0], first.moved(output.index(letter)), label)
        return "tie" if len(tracked) > 1 else "pass"

    def split_node(self, node_index: int, node: onnx.NodeProto, layout: Layout) -> str:
        """Split: along another axis every output carries the channels; along the channel axis (or the
        outer dim of a pending split) each output takes its range, the spaces cut at the boundaries."""
        label = node_label(node)
        rank = self.index.rank(node.input[0])
        axis = normalize_axis(attr(node, "axis", 0), rank) if rank is not None else None
        if axis is None:
            return self.spoil([layout], f"Split {label!r}: unknown rank")
        if axis != layout.axis:
            for name in node.output:
                if name:
                    self.track(name, layout, label)
            return "pass"
        split = layout.split
        unit = split.inner if split is not None else 1
        sizes = self.split_sizes(node, layout.size // unit)
        if isinstance(sizes, str):
            return self.spoil([layout], f"Split {label!r}: {sizes}")
        sizes, kind = sizes
        bounds = [0, *np.cumsum(sizes).tolist()]
        name = node.input[0]
        if split is not None:
            sections = self.pick_sections(name)
            if isinstance(sections, str):
                return self.spoil([layout], f"Split {label!r}: {sections}")
        elif not all(self.cut_at(name, bound) for bound in bounds[1:-1]):
            return self.spoil([layout], f"Split {label!r} cuts a channel apart")
        layout = self.layouts[name]
        parts = [self.restrict(layout.segments, low * unit, high * unit) for low, high in itertools.pairwise(bounds)]
        if split is None and kind == "equal":  # the parts must stay equal: tie them
            if any(self.structure(part) != self.structure(parts[0]) for part in parts):
                return self.spoil([layout], f"Split {label!r} splits into equal parts laid out differently")
            for part in parts[1:]:
                for mine, theirs in zip(parts[0], part, strict=True):
                    self.tie(mine.space, theirs.space)
        elif split is None:
            for position, part in enumerate(parts):
                self.add_edit(kind, node_index, position, part)
        for output, size, part in zip(node.output, sizes, parts, strict=False):
            if output:  # a section range stays pending; its Reshape entries are settled (pick_sections)
                pending = replace(split, outer_entry=None, inner_entry=None) if split is not None else None
                self.track(output, Layout(axis, size * unit, part, pending), label)
        return "split"

    def split_sizes(self, node: onnx.NodeProto, length: int) -> tuple[list[int], str] | str:
        """A Split's part sizes along an axis of ``length``, and where they are written (an edit kind, or
        ``equal`` when the op divides evenly by itself); or why they are not known."""
        if self.index.opset >= 13 and len(node.input) > 1 and node.input[1]:
            sizes, kind = self.index.int_values(node.input[1]), "split"
            if sizes is None:
                return "its split sizes are computed at run time"
        elif self.index.opset < 13 and attr(node, "split") is not None:
            sizes, kind = [int(v) for v in attr(node, "split")], "split-attribute"  # type: ignore[union-attr]
        else:
            count = len(node.output)
            if length % count:
                return f"splits {length} positions into {count} unequal parts"
            sizes, kind = [length // count] * count, "equal"
        if sum(sizes) != length or len(sizes) != len(node.output):
            return f"split sizes {sizes} do not match the axis of {length}"
        return sizes, kind

    @staticmethod
    def restrict(segments: tuple[Segment, ...], low: int, high: int) -> tuple[Segment, ...]:
        """The segments lying in positions ``[low, high)``, shifted to start there (none may straddle)."""
        return tuple(s.shifted(-low) for s in segments if low <= s.offset and s.offset + s.count * s.block <= high)

    @staticmethod
    def structure(segments: tuple[Segment, ...]) -> tuple[tuple[int, int, int], ...]:
        return tuple((s.offset, s.block, s.count) for s in segments)

    def pick_sections(self, name: str) -> list[tuple[Segment, ...]] | str:
        """The sections of tensor ``name``'s pending split (outer index ``k``: flat ``[k*D, (k+1)*D)``).

        The spaces are cut at every section boundary (a fused QKV projection becomes Q, K and V spaces),
        the sections tied position by position (they share the inner dim, so they prune alike) and the
        Reshape's literal inner entry becomes a shape edit. Returns each section's segments, or why not.
        """
        split = self.layouts[name].split
        assert split is not None
        inner = split.inner
        count = self.layouts[name].size // inner
        if not all(self.cut_at(name, k * inner) for k in range(1, count)):
            return f"a channel straddles two sections of {inner}"
        segments = self.layouts[name].segments
        sections = [self.restrict(segments, k * inner, (k + 1) * inner) for k in range(count)]
        if any(self.structure(section) != self.structure(sections[0]) for section in sections):
            return "its sections hold channels laid out differently"
        for section in sections[1:]:
            for mine, theirs in zip(sections[0], section, strict=True):
                self.tie(mine.space, theirs.space)
        if split.inner_entry is not None:
            self.target_edit(split.node_index, split.inner_entry, sections[0])
        self.resolved.add(split.node_index)
        return sections

    def gather_section(self, node: onnx.NodeProto, layout: Layout) -> str:
        """Gather of one index along a pending split's outer dim (``qkv[0]``): that section's channels."""
        split = layout.split
        assert split is not None
        label = node_label(node)
        count = layout.size // split.inner
        index = normalize_axis(self.index.int_values(node.input[1])[0], count)  # type: ignore[index]
        if index is None:
            return self.spoil([layout], f"Gather {label!r}: index out of range")
        sections = self.pick_sections(node.input[0])
        if isinstance(sections, str):
            return self.spoil([layout], f"Gather {label!r}: {sections}")
        inner_axis = split.axis - (split.axis > layout.axis)
        self.track(node.output[0], Layout(inner_axis, split.inner, sections[index]), label)
        return "section"

    def moved_axis(self, node_index: int, node: onnx.NodeProto, layout: Layout) -> Layout | str:
        """The layout on the node's output, or why the channels cannot be followed."""
        op, axis = node.op_type, layout.axis
        in_shape = self.shape(node.input[0])
        rank = len(in_shape) if in_shape is not None else None
        if op == "Transpose":
            perm = attr(node, "perm")
            if perm is None:
                if rank is None:
                    return "unknown rank"
                perm = list(reversed(range(rank)))
            return self.remapped(layout, list(perm).index)
        if op in ("Flatten", "Reshape"):
            return self.reshaped(node_index, node, layout, in_shape)
        if op in POOLS:
            return layout if axis == 1 else f"pools over the channel axis {axis}"
        if op in ("Softmax", "LogSoftmax"):
            if rank is None:
                return "unknown rank"
            if self.index.opset < 13:
                norm_axis = normalize_axis(attr(node, "axis", 1), rank)
                return layout if norm_axis is not None and axis < norm_axis else "normalizes over the channels"
            norm_axis = normalize_axis(attr(node, "axis", -1), rank)
            return layout if axis != norm_axis else "normalizes over the channels"
        if op in REDUCES:
            return self.reduced(node, layout, rank)
        if op in ("ArgMax", "ArgMin"):
            picked = normalize_axis(attr(node, "axis", 0), rank) if rank is not None else None
            if picked is None:
                return "unknown rank"
            if picked == axis:
                return "picks an index over the channels"
            return layout if attr(node, "keepdims", 1) else layout.moved(axis - (picked < axis))
        if op == "Squeeze":
            axes = self.axes(node, rank)
            if axes is None:
                if in_shape is None:
                    return "unknown shape"
                axes = [a for a, d in enumerate(in_shape) if d == 1]
            split = layout.split
            if split is not None and axis in axes and layout.size == split.inner:
                # the outer dim of a single section (after a Split along it): the channels are on the inner dim
                inner = split.axis - sum(a < split.axis for a in axes)
                return Layout(inner, split.inner, layout.segments)
            if axis in axes or (split is not None and split.axis in axes):
                return "squeezes the channel axis"
            return self.remapped(layout, lambda a: a - sum(s < a for s in axes))
        if op == "Unsqueeze":
            out = self.shape(node.output[0])
            axes = self.axes(node, len(out) if out is not None else None)
            if axes is None or rank is None:
                return "unknown axes"
            kept = [p for p in range(rank + len(axes)) if p not in axes]
            return self.remapped(layout, kept.__getitem__)
        if op == "Slice":
            return self.sliced(node, layout, rank)
        if op == "Pad":
            return self.padded(node, layout, rank)
        if op in ("Resize", "Upsample"):
            return self.resized(node_index, node, layout, rank)
        return layout

    @staticmethod
    def remapped(layout: Layout, axis_of: Callable[[int], int]) -> Layout:
        """``layout`` with its axis (and a pending split's inner axis) renumbered by ``axis_of``."""
        split = layout.split
        if split is None:
            return layout.moved(axis_of(layout.axis))
        return replace(layout, axis=axis_of(layout.axis), split=replace(split, axis=axis_of(split.axis)))

    def reshaped(
        self, node_index: int, node: onnx.NodeProto, layout: Layout, in_shape: list[int | str | None] | None
    ) -> Layout | str:
        out_shape = self.shape(node.output[0])
        if layout.outer is not None and in_shape is not None:  # heads merged into outer dims: read them apart
            in_shape = [*in_shape[: layout.axis], *layout.outer, layout.size, *in_shape[layout.axis + 1 :]]
            layout = Layout(layout.axis + len(layout.outer), layout.size, layout.segments)
        if node.op_type == "Flatten" and in_shape is not None and layout.split is None:
            at = attr(node, "axis", 1)
            flattened = flatten_axis(in_shape, at + len(in_shape) if at < 0 else at, layout.axis)
            if flattened is None:
                return f"channel axis {layout.axis} of {in_shape} cannot be followed through Flatten"
            out_axis, factor = flattened
            return Layout(out_axis, layout.size * factor, tuple(s.scaled(factor) for s in layout.segments))
        if in_shape is None or out_shape is None:
            return "shapes unknown"
        target = self.index.int_values(node.input[1]) if node.op_type == "Reshape" else None
        if node.op_type == "Reshape" and target is None:  # built at run time: its constant entries may do
            target = self.index.target_entries(node.input[1])
            if target is not None and len(target) == len(out_shape):
                out_shape = sized_by_target(
                    in_shape, self.sized_by_sources(node.input[1], out_shape), target, layout.axis
                )
        if node.op_type == "Reshape" and layout.split is None:
            grouped = self.grouped(node_index, node, layout, in_shape, target)
            if grouped is not None:
                return grouped
        merged = merge_axis(in_shape, out_shape, layout.axis)
        split_at = split_axis(in_shape, out_shape, layout.axis) if merged is None else None
        if merged is None and split_at is None and layout.split is None and node.op_type == "Reshape":
            # into the dims before: heads (blocks of features) merged with the batch are followed as merged;
            # other channels merged with known dims (an RNN's directions) as copies, else as merged too
            into = merge_into_outer(in_shape, out_shape, layout.axis)
            blocks = all(self.units[space] > 1 for space in layout.spaces)
            outer = (
                merge_outer(in_shape, out_shape, layout.axis) if into is None or not (into[2] > 1 or blocks) else None
            )
            if outer is not None:
                start, copies, *found = outer
                if target is not None and 0 in target[start : layout.axis + 1]:
                    return "its target copies a dim merged with the channels"
                layout = self.repeated(layout, start, copies)
                merged = (found[0], found[1])
            elif into is not None:
                return self.heads_into_outer(node_index, node, in_shape, target, layout.axis, *into)
        if merged is None and (split_at is None or node.op_type == "Flatten"):
            return f"channel axis {layout.axis} of {in_shape} cannot be followed into {out_shape}"
        if node.op_type == "Reshape" and (target is None or len(target) != len(out_shape)):
            if merged is not None:
                moved = Layout(merged[0], layout.size * merged[1], tuple(s.scaled(merged[1]) for s in layout.segments))
                if self.layouts.get(self.shape_source(node.input[1]) or "") == moved:
                    return moved  # reshape_as(x): x is pruned alike, so the run-time target follows it
            return self.computed_target(node)
        allow_zero = attr(node, "allowzero", 0)
        if split_at is not None:
            assert target is not None
            return self.split_reshape(node_index, layout, target, split_at, out_shape, allow_zero)
        assert merged is not None
        out_axis, factor = merged
        moved = Layout(out_axis, layout.size * factor, tuple(s.scaled(factor) for s in layout.segments))
        if node.op_type == "Flatten":
            return moved
        assert target is not None
        entry = target[out_axis]
        if not allow_zero and any(v == 0 and i == layout.axis and i != out_axis for i, v in enumerate(target)):
            return "copies the channel dim into another axis"
        if entry is None and self.sized_alike(node.input[1], out_axis, moved):
            return moved
        if entry is None:
            return "its target's channel entry is computed at run time"
        if entry == 0 and not allow_zero:
            return moved if out_axis == layout.axis and factor == 1 else "target copies a dim that changes"
        if entry > 0:
            unfit = self.uneditable(node, out_axis)
            if unfit:
                return unfit
            self.target_edit(node_index, out_axis, moved.segments)
        elif entry != -1:
            return f"target entry {entry}"
        return moved

    def computed_target(self, node: onnx.NodeProto) -> str:
        """Why a Reshape whose target is computed at run time cannot be followed, with the way to fold it."""
        if self.index.from_constants(node.input[1]) or not self.index.dynamic_inputs():
            return "its target shape is computed at run time (fold it to a constant first: onnxsat optimize)"
        return (
            "its target shape is computed at run time, from the input's dynamic size (fix the sizes and fold it "
            "first: onnxsat optimize --input-shape NAME:D1,D2,... --specialize)"
        )

    def sized_by_sources(self, target: str, out_shape: list[int | str | None]) -> list[int | str | None]:
        """``out_shape`` with the dims a run-time target reads off another tensor's Shape taken from that
        tensor's inferred shape, where inference lost them (a symbol of its own, or none)."""
        sized = list(out_shape)
        for position, dim in enumerate(out_shape):
            source = self.index.size_source(target, position)
            shape = self.shape(source[0]) if source is not None else None
            if not isinstance(dim, int) and source is not None and shape is not None and shape[source[1]] is not None:
                sized[position] = shape[source[1]]
        return sized

    def sized_alike(self, target: str, position: int, moved: Layout) -> bool:
        """Entry ``position`` of a run-time target is read off the size of a tensor whose channels sit on that dim
        just as ``moved`` has them: pruned alike, the size it reads follows (``view(k.shape[:2] + ...)``)."""
        source = self.index.size_source(target, position)
        if source is None or source[0] not in self.layouts:
            return False
        found = self.layouts[source[0]]
        return (
            found.axis == source[1] and found.split is None and found.outer is None and found.segments == moved.segments
        )

    def heads_into_outer(
        self,
        node_index: int,
        node: onnx.NodeProto,
        in_shape: list[int | str | None],
        target: list[int | None] | None,
        axis: int,
        start: int,
        at: int,
        inner: int,
    ) -> Layout | str:
        """A Reshape merging heads of ``inner`` features into the dims ``[start, axis)`` before them: the channel
        spaces are coarsened to whole heads, and the output's dim ``at`` carries them merged (``Layout.outer``).
        Its target entry there is ``-1``, or a literal edited by the pruned heads times the merged dims' size."""
        layout = self.layouts[node.input[0]]
        scaled = self.index.scaled_piece(node.input[1], at)  # batch * H computed at run time
        if scaled is not None and scaled[2] * inner != layout.size:  # the constant is the head count
            scaled = None
        if (
            target is None
            or len(target) != len(self.shape(node.output[0]) or [])
            or (target[at] is None and not scaled)
        ):
            return f"it merges heads into the dims before them, and {self.computed_target(node)}"
        if any(v == 0 for v in target[start:]) and not attr(node, "allowzero", 0):
            return "its target copies a dim merged with the channels"
        outer, entry = tuple(in_shape[start:axis]), target[at]
        copies = int_product(outer)
        if entry is None and scaled is not None:
            entry = -1  # the Mul's constant is edited (below); the run-time size follows the batch
        if entry is None or (entry > 0 and copies is None) or entry < -1:
            return f"its target entry {entry} merging heads into the dims before them cannot be edited"
        if entry > 0 and self.uneditable(node, at):
            return self.uneditable(node, at)
        why = self.whole_blocks(node.input[0], inner)
        if why:
            return why
        layout = self.layouts[node.input[0]]
        heads = in_blocks(layout.segments, inner)
        if entry > 0:
            assert copies is not None
            self.target_edit(node_index, at, tuple(s.scaled(copies) for s in heads))
        if scaled is not None:
            mul, slot, _ = scaled
            producer = next(i for i, n in enumerate(self.model.graph.node) if n.output[:1] == mul.output[:1])
            self.add_edit("factor", producer, slot, heads)
        return Layout(at, layout.size // inner, heads, outer=outer)

    def grouped(
        self,
        node_index: int,
        node: onnx.NodeProto,
        layout: Layout,
        in_shape: list[int | str | None],
        target: list[int | None] | None,
    ) -> Layout | None:
        """A GroupNorm as PyTorch exports it, ``Reshape(x, [N, G, -1])`` -> InstanceNormalization over each group
        -> ``Reshape(y, Shape(x))``: the channels go in G groups of ``C / G``, pruned whole (the group count is
        a shape edit), a pending split the InstanceNormalization resolves into group channels. And the Reshape
        back, whose run-time target is ``x``'s shape: each group becomes its ``C / G`` channels again. None
        when ``node`` is neither."""
        axis, size = layout.axis, in_shape[layout.axis]
        source = self.shape_source(node.input[1])
        if target is None and source is not None and self.layouts.get(source) is not None:
            back = self.layouts[source]
            if back.size % layout.size == 0 and back.size > layout.size:
                factor = back.size // layout.size
                moved = Layout(back.axis, layout.size * factor, tuple(s.scaled(factor) for s in layout.segments))
                return moved if moved == back else None
            return None
        if target is None or len(target) != axis + 2 or not isinstance(size, int):
            return None
        groups = target[axis]
        readers = [self.model.graph.node[i] for i, _ in self.index.consumers.get(node.output[0], [])]
        if not readers or any(r.op_type != "InstanceNormalization" for r in readers):
            return None
        if groups is None or not 1 < groups < size or size % groups or target[axis + 1] != -1:
            return None
        if any(entry != 0 and entry != dim for entry, dim in zip(target[:axis], in_shape[:axis], strict=True)):
            return None  # the dims before the channels are copied as they are
        split = Split(axis + 1, size // groups, node_index, axis, None)
        return Layout(axis, size, layout.segments, split)

    @staticmethod
    def repeated(layout: Layout, start: int, copies: int) -> Layout:
        """``layout`` once the dims ``[start, axis)`` (``copies`` entries) are merged into its axis: position
        ``j * size + p`` holds what position ``p`` held in entry ``j`` (a bidirectional RNN's two directions)."""
        segments = tuple(s.shifted(j * layout.size) for j in range(copies) for s in layout.segments)
        return Layout(start, layout.size * copies, segments)

    def shape_source(self, name: str) -> str | None:
        """The tensor whose whole ``Shape`` is ``name`` (PyTorch's ``y.reshape_as(x)``, ``y.view(x.shape)``)."""
        node = self.index.producers.get(name)
        if node is None or node.op_type != "Shape" or node.domain not in DEFAULT_DOMAINS:
            return None
        if attr(node, "start", 0) != 0 or attr(node, "end") is not None:
            return None
        return node.input[0]

    def uneditable(self, node: onnx.NodeProto, position: int) -> str:
        """Why entry ``position`` of a Reshape's target cannot be edited, or "": a constant target can, and one
        built at run time where that entry lies in a constant input of its Concat."""
        name = node.input[1]
        if self.index.is_constant(name) or self.index.target_piece(name, position) is not None:
            return ""
        return f"entry {position} of its run-time target is not a constant of its own"

    def target_edit(self, node_index: int, position: int, segments: tuple[Segment, ...]) -> None:
        """Record an edit of entry ``position`` of a Reshape's target: ``reshape`` when the target is a constant,
        ``concat-piece`` when a Concat builds it at run time (see :meth:`uneditable`)."""
        constant = self.index.is_constant(self.model.graph.node[node_index].input[1])
        self.add_edit("reshape" if constant else "concat-piece", node_index, position, segments)

    def split_reshape(
        self,
        node_index: int,
        layout: Layout,
        target: list[int | None],
        at: int,
        out_shape: list[int | str | None],
        allow_zero: int,
    ) -> Layout | str:
        """A Reshape splitting the channel axis into ``out[at] x out[at + 1]``: a pending split layout."""
        if any(v == 0 for v in target[at : at + 2]) or (
            not allow_zero and any(v == 0 and i == layout.axis for i, v in enumerate(target))
        ):
            return "its target copies the channel dim"
        if any(v is None or v < -1 for v in target[at : at + 2]):
            return f"target entries {target[at : at + 2]}"
        inner = out_shape[at + 1]
        assert isinstance(inner, int)
        node = self.model.graph.node[node_index]
        entries = [position if (target[position] or 0) > 0 else None for position in (at, at + 1)]
        unfit = next(filter(None, (self.uneditable(node, p) for p in entries if p is not None)), "")
        if unfit:
            return unfit
        return Layout(at, layout.size, layout.segments, Split(at + 1, inner, node_index, entries[0], entries[1]))

    def axes(self, node: onnx.NodeProto, rank: int | None) -> list[int] | None:
        """A node's ``axes`` (attribute, or input 1 from opset 13/18), normalized; None if absent."""
        raw = attr(node, "axes")
        if raw is None and len(node.input) > 1 and node.input[1]:
            raw = self.index.int_values(node.input[1])
            if raw is None:
                return None
        if raw is None or rank is None:
            return None
        found = [normalize_axis(a, rank) for a in raw]
        return None if any(a is None for a in found) else [a for a in found if a is not None]

    def reduced(self, node: onnx.NodeProto, layout: Layout, rank: int | None) -> Layout | str:
        axes = self.axes(node, rank)
        from_input = len(node.input) > 1 and node.input[1]
        if axes is None:
            if from_input:
                return "its axes are computed at run time"
            if attr(node, "noop_with_empty_axes", 0):
                return layout
            return "reduces over every axis"
        if layout.axis in axes:
            return "reduces over the channels"
        if attr(node, "keepdims", 1):
            return layout
        return layout.moved(layout.axis - sum(a < layout.axis for a in axes))

    def sliced(self, node: onnx.NodeProto, layout: Layout, rank: int | None) -> Layout | str:
        if self.index.opset < 10:
            starts, ends, axes = attr(node, "starts"), attr(node, "ends"), attr(node, "axes")
            steps = None
        else:
            starts, ends = (self.index.int_values(n) for n in node.input[1:3])
            axes = self.index.int_values(node.input[3]) if len(node.input) > 3 and node.input[3] else None
            steps = self.index.int_values(node.input[4]) if len(node.input) > 4 and node.input[4] else None
            if (len(node.input) > 3 and node.input[3] and axes is None) or (
                len(node.input) > 4 and node.input[4] and steps is None
            ):
                return "its axes or steps are computed at run time"
        if starts is None or ends is None or rank is None:
            return "its starts or ends are computed at run time"
        axes = list(axes) if axes is not None else list(range(len(starts)))
        steps = list(steps) if steps is not None else [1] * len(starts)
        for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):
            if normalize_axis(axis, rank) == layout.axis and not (
                step == 1 and (start == 0 or start <= -layout.size) and end >= layout.size
            ):
                return "slices the channel axis"
        return layout

    def padded(self, node: onnx.NodeProto, layout: Layout, rank: int | None) -> Layout | str:
        if self.index.opset < 11:
            pads = attr(node, "pads")
            axes = None
        else:
            pads = self.index.int_values(node.input[1]) if len(node.input) > 1 else None
            axes = self.index.int_values(node.input[3]) if len(node.input) > 3 and node.input[3] else None
            if len(node.input) > 3 and node.input[3] and axes is None:
                return "its axes are computed at run time"
        if pads is None or rank is None:
            return "its pads are computed at run time"
        axes_list = [normalize_axis(a, rank) for a in axes] if axes is not None else list(range(rank))
        count = len(axes_list)
        for i, axis in enumerate(axes_list):
            if axis == layout.axis and (pads[i] != 0 or pads[i + count] != 0):
                return "pads the channel axis"
        return layout

    def resized(self, node_index: int, node: onnx.NodeProto, layout: Layout, rank: int | None) -> Layout | str:
        """Resize/Upsample keep the channels when the channel axis keeps its size: a scale of 1, or a
        literal target size equal to the channel count (a shape edit: it shrinks with them)."""
        if node.op_type == "Upsample" or self.index.opset < 11:
            scales_name = node.input[1] if len(node.input) > 1 else ""
            scales = attr(node, "scales") if not scales_name else self.float_values(scales_name)
            sizes_name = ""
        else:
            scales_name = node.input[2] if len(node.input) > 2 else ""
            scales = self.float_values(scales_name) if scales_name else None
            sizes_name = node.input[3] if len(node.input) > 3 else ""
        axes = attr(node, "axes")
        if axes is not None:
            if rank is None:
                return "unknown rank"
            normalized = [normalize_axis(a, rank) for a in axes]  # type: ignore[union-attr]
            if layout.axis not in normalized:
                return layout
        position = layout.axis if axes is None else normalized.index(layout.axis)
        if sizes_name:
            sizes = self.index.int_values(sizes_name)
            if sizes is None and self.index.size_source(sizes_name, position) == (node.input[0], layout.axis):
                return layout  # the channel size is read off the input itself at run time: it follows the pruning
            if sizes is None:
                return "its target sizes are computed at run time"
            if len(sizes) <= position or sizes[position] != layout.size:
                return "resizes the channel axis"
            self.add_edit("sizes", node_index, position, layout.segments)
            return layout
        if scales is None or len(scales) <= position:
            return "its scales are computed at run time"
        return layout if scales[position] == 1.0 else "scales the channel axis"

    def float_values(self, name: str) -> list[float] | None:
        if not self.index.is_constant(name):
            return None
        return [float(v) for v in self.index.value(name).reshape(-1)]

    # -------------------------------------------------------------------------------- next-process

    def process(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        op, label = node.op_type, node_label(node)
        layouts = list(tracked.values())
        if op in ELEMENTWISE:
            return self.elementwise(node_index, node, tracked)
        if op == "Concat":
            return self.concat(node, tracked)
        if op == "Attention":
            return self.attention(node_index, node, tracked)
        if set(tracked) != {0}:
            return self.spoil(layouts, f"{op} {label!r} takes them as a parameter")
        layout = tracked[0]
        rank = self.index.rank(node.input[0])
        if op in ("BatchNormalization", "InstanceNormalization"):
            if layout.axis != 1:
                return self.spoil(layouts, f"{op} {label!r} normalizes axis 1, not the channel axis")
            params = node.input[1:5] if op == "BatchNormalization" else node.input[1:3]
            if not all(self.index.is_constant(p) and self.shape(p) == [layout.size] for p in params):
                return self.spoil(layouts, f"{op} {label!r} has parameters computed at run time")
            for slot in range(1, len(params) + 1):
                self.add_slices(layout, node_index, slot, 0, (GAIN, OFFSET, STATISTIC, STATISTIC)[slot - 1])
            if any(name and self.index.uses(name) for name in node.output[1:]):
                return self.spoil(layouts, f"{op} {label!r} in training mode")
            self.track(node.output[0], layout, label)
            return ASSOCIATED
        if op in ("LayerNormalization", "RMSNormalization"):  # RMSNormalization (opset 23): no mean, no bias
            norm_axis = normalize_axis(attr(node, "axis", -1), rank) if rank is not None else None
            if norm_axis is None or layout.axis >= norm_axis:
                return self.spoil(layouts, f"{op} {label!r} normalizes over the channels")
            if any(name and self.index.uses(name) for name in node.output[1:]):
                return self.spoil(layouts, f"{op} {label!r}: its mean or inverse deviation is read")
            self.track(node.output[0], layout, label)  # scale and bias span the normalized axes alone
            return "pass"
        if op == "MeanVarianceNormalization":
            if layout.axis in (attr(node, "axes") or [0, 2, 3]):
                return self.spoil(layouts, f"{op} {label!r} normalizes over the channels")
            self.track(node.output[0], layout, label)
            return "pass"
        if op == "Gather":
            if layout.split is not None:
                return self.gather_section(node, layout)
            gather_axis = normalize_axis(attr(node, "axis", 0), rank) if rank is not None else None
            indices = self.index.rank(node.input[1])
            if gather_axis is None or indices is None or gather_axis == layout.axis:
                return self.spoil(layouts, f"Gather {label!r} picks along the channel axis")
            moved = layout.axis if layout.axis < gather_axis else layout.axis + indices - 1
            self.track(node.output[0], layout.moved(moved), label)
            return "pass"
        if op == "GroupNormalization":
            return self.spoil(
                layouts,
                f"GroupNormalization {label!r} normalizes groups of channels together (pruning some would change "
                "the statistics of the others)",
            )
        return self.spoil(layouts, f"{op} {label!r} mixes the channels")  # LRN

    def elementwise(self, node_index: int, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """A broadcasting elementwise op: tie tracked inputs, slice [C]-shaped constants, refuse the rest."""
        label = node_label(node)
        layouts = list(tracked.values())
        ranks = [self.index.rank(name) if name else None for name in node.input]
        out = self.shape(node.output[0])
        if any(r is None for name, r in zip(node.input, ranks, strict=True) if name):
            return self.spoil(layouts, f"{node.op_type} {label!r}: input ranks unknown")
        out_rank = len(out) if out is not None else max(r for r in ranks if r is not None)
        aligned = {slot: layout.axis + out_rank - ranks[slot] for slot, layout in tracked.items()}  # type: ignore[operator]
        first_slot = min(tracked)
        first = tracked[first_slot]
        axis = aligned[first_slot]
        for slot, layout in tracked.items():
            if aligned[slot] != axis or layout.structure() != first.structure():
                return self.spoil(layouts, f"{node.op_type} {label!r} combines channels laid out differently")
        for layout in layouts[1:]:
            for mine, theirs in zip(first.segments, layout.segments, strict=True):
                self.tie(mine.space, theirs.space)
        for slot, name in enumerate(node.input):
            if not name or slot in tracked:
                continue
            other_axis = axis - (out_rank - ranks[slot])  # type: ignore[operator]
            if other_axis < 0:
                continue
            shape = self.shape(name)
            if shape is not None and other_axis >= len(shape):  # inference and a run disagree on its rank
                return self.spoil(
                    layouts,
                    f"{node.op_type} {label!r}: operand {name!r} has shape {shape}, of another rank than the channels' "
                    "tensor (shape inference lost it, and a run at batch 1 may squeeze an axis)",
                )
            size = shape[other_axis] if shape is not None else None
            if size == 1 or (not isinstance(size, int) and self.index.broadcast_dim(name, other_axis)):
                continue
            if size != first.size:
                return self.spoil(layouts, f"{node.op_type} {label!r}: operand {name!r} has unknown size {size}")
            if self.copies_per_channel(name, other_axis, first, node_index):
                continue
            if not self.index.is_constant(name):
                return self.spoil(layouts, f"{node.op_type} {label!r} ties them to {name!r}, {self.unrooted(name)}")
            self.add_slices(first, node_index, slot, other_axis, GAIN if node.op_type == "Mul" else OFFSET)
        self.track(node.output[0], first.moved(axis), label)
        return "tie" if len(tracked) > 1 else ASSOCIATED

    def concat(self, node: onnx.NodeProto, tracked: dict[int, Layout]) -> str:
        """Concat on the channel axis shifts segments by each input's offset; on another axis it ties them."""
        label = node_label(node)
        layouts = list(tracked.values())
        rank = self.index.rank(node.output[0]) or self.index.rank(node.input[min(tracked)])
        concat_axis = normalize_axis(attr(node, "axis", 0), rank) if rank is not None else None
        if concat_axis is None:
            return self.spoil(layouts, f"Concat {label!r}: unknown rank")
        if all(layout.axis == concat_axis for layout in layouts):
            segments: list[Segment] = []
            offset = 0
            for slot, name in enumerate(node.input):
                if slot in tracked:
                    segments.extend(s.shifted(offset) for s in tracked[slot].segments)
                    offset += tracked[slot].size
                    continue
                shape = self.shape(name)
                size = shape[concat_axis] if shape is not None else None
                if not isinstance(size, int):
                    return self.spoil(layouts, f"Concat {label!r}: input {name!r} has an unknown size")
                offset += size
            self.track(node.output[0], Layout(concat_axis, offset, tuple(segments)), label)
            return "concat"
        first = layouts[0]
        if len(tracked) != len([n for n in node.input if n]) or any(
            layout.axis != first.axis or layout.structure() != first.structure() for layout in layouts
        ):
            return self.spoil(layouts, f"Concat {label!r} mixes channel layouts")
        for layout in layouts[1:]:
            for mine, theirs in zip(first.segments, layout.segments, strict=True):
                self.tie(mine.space, theirs.space)
        self.track(node.output[0], first, label)
        return "tie"

    # ---------------------------------------------------------------------------------- the result

    def forest(self) -> Forest:
        by_rep: dict[int, ChannelGroup] = {}
        live = [space for space in range(len(self.roots)) if space not in self.children]
        attention = {self.find(t) for t in self.heads}
        for space in live:
            root = self.roots[space]
            rep = self.find(space)
            group = by_rep.get(rep)
            if group is None:
                group = by_rep[rep] = ChannelGroup(len(by_rep), [], root.channels, unit=self.units[space])
            if all(r.node != root.node for r in group.roots):  # a cut root's parts share one tree
                group.roots.append(root)
            group.heads = group.heads or rep in attention
            group.slices.extend(self.slices.get(space, []))
            for edge in self.edges.get(space, []):
                if edge not in group.edges:
                    group.edges.append(edge)
            for reason in self.spoiled.get(space, []):
                if reason not in group.reasons:
                    group.reasons.append(reason)
        readers = Counter(name for node in self.model.graph.node for name in dict.fromkeys(node.input))
        for group in by_rep.values():
            group.heads = group.heads and group.unit > 1
            group.reasons.extend(_shared_weights(group, readers))
        group_of = {space: by_rep[self.find(space)].index for space in live}
        edits = []
        for kind, node_index, position, segments in self.edits:
            parts = tuple((group_of[s.space], s.block) for s in segments)
            slot = 3 if kind == "sizes" else position if kind in ("zero-state", "factor") else 1
            if kind == "concat-piece":  # the target entry, found in its Concat's constant input
                target = self.model.graph.node[node_index].input[1]
                slot, position = self.index.target_piece(target, position) or (1, position)
            edits.append(ShapeEdit(kind, node_index, position, parts, slot))
        return Forest(list(by_rep.values()), edits)


def in_blocks(segments: Sequence[Segment], inner: int, per_block: int = 1) -> tuple[Segment, ...]:
    """``segments`` of positions counted in blocks of ``inner`` (heads of ``inner`` features), each block worth
    ``per_block`` (the query heads a key/value head stands for); offsets and blocks must divide."""
    return tuple(Segment(s.space, s.offset // inner, s.block // inner * per_block, s.count) for s in segments)


def einsum_axes(equation: str, ranks: Sequence[int | None]) -> tuple[list[list[str]], list[str]] | str:
    """Each operand's and the output's label per axis (``...`` expanded to ``.0``, ``.1``, ... counted from
    the right, as broadcasting aligns them), or why the equation cannot be read."""
    equation = equation.replace(" ", "")
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if not equation or len(terms) != len(ranks) or any(rank is None for rank in ranks):
        return f"equation {equation!r} or its operands' ranks cannot be read"
    inputs = []
    for term, rank in zip(terms, ranks, strict=True):
        axes = _einsum_term(term, rank)  # type: ignore[arg-type]
        if axes is None:
            return f"term {term!r} does not fit rank {rank}"
        inputs.append(axes)
    ellipsis = max((sum(a.startswith(".") for a in axes) for axes in inputs), default=0)
    if arrow:
        output = _einsum_term(right, ellipsis * ("..." in right) + len(right.replace("...", "")))
        return (inputs, output) if output is not None else f"output term {right!r} cannot be read"
    letters = [a for axes in inputs for a in axes if not a.startswith(".")]
    once = sorted(a for a in set(letters) if letters.count(a) == 1)
    return inputs, [f".{k}" for k in reversed(range(ellipsis))] + once


def _einsum_term(term: str, rank: int) -> list[str] | None:
    before, dots, after = term.partition("...")
    missing = rank - len(before) - len(after)
    if missing < 0 or (missing and not dots):
        return None
    return [*before, *(f".{k}" for k in reversed(range(missing))), *after]


# -------------------------------------------------------------------------------------- display


def format_trees(groups: Sequence[ChannelGroup]) -> str:
    """The trees as indented text: one block per group, one tree per root (``--show-trees``)."""
    lines: list[str] = []
    for group in groups:
        status = "prunable" if group.prunable else "unprunable: " + "; ".join(group.reasons or ["one channel"])
        lines.append(f"group {group.index} [{group.structure}] {group.description}, {status}")
        children: dict[str, list[TreeEdge]] = {}
        for edge in group.edges:
            children.setdefault(edge.parent, []).append(edge)
        shown: set[str] = set()
        for root in group.roots:
            lines.append(f"  {root.node} ({root.op_type}, root)")
            _subtree(root.node, children, shown, lines, depth=2)
        roles = ", ".join(sorted({s.role for s in group.slices}))
        lines.append(f"  {len(group.slices)} tensors sliced ({roles}), {len(group.leaves)} leaves")
    return "\n".join(lines)


def _subtree(parent: str, children: dict[str, list[TreeEdge]], shown: set[str], lines: list[str], depth: int) -> None:
    for edge in children.get(parent, []):
        pad = "  " * depth
        if edge.child in shown:
            lines.append(f"{pad}{edge.child} ({edge.op_type}, {edge.role}; see above)")
            continue
        shown.add(edge.child)
        lines.append(f"{pad}{edge.child} ({edge.op_type}, {edge.role})")
        if edge.role not in (LEAF, "end", "output") and not edge.role.startswith("unprunable"):
            _subtree(edge.child, children, shown, lines, depth + 1)


def render_trees(groups: Sequence[ChannelGroup], path: str | Path) -> None:
    """Draw the trees to an image (PNG, SVG, ... by suffix): one row of boxes per tree depth, groups side by side.

    A simple layered layout (breadth-first depth from the roots), enough to see the shape of each group;
    ``format_trees`` is the complete listing.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns: list[tuple[ChannelGroup, dict[str, int], list[tuple[str, str]]]] = []
    for group in groups:
        depth = {root.node: 0 for root in group.roots}
        pairs = [(e.parent, e.child) for e in group.edges]
        changed = True
        while changed:
            changed = False
            for parent, child in pairs:
                if parent in depth and depth.get(child, -1) < depth[parent] + 1 and depth[parent] < 50:
                    depth[child] = depth[parent] + 1
                    changed = True
        columns.append((group, depth, pairs))
    width = sum(max(1, max(np.bincount(list(d.values())))) for _, d, _ in columns)
    height = max((max(d.values()) + 1 for _, d, _ in columns), default=1)
    figure, axes = plt.subplots(figsize=(min(2.2 * width + 1, 200), 1.0 * height + 1.5))
    x0 = 0.0
    for group, depth, pairs in columns:
        per_row: dict[int, list[str]] = {}
        for name, level in sorted(depth.items(), key=lambda item: item[1]):
            per_row.setdefault(level, []).append(name)
        span = max(len(names) for names in per_row.values())
        where = {
            name: (x0 + i + (span - len(names)) / 2, -level)
            for level, names in per_row.items()
            for i, name in enumerate(names)
        }
        for parent, child in pairs:
            if parent in where and child in where:
                (x1, y1), (x2, y2) = where[parent], where[child]
                axes.annotate("", (x2, y2 + 0.15), (x1, y1 - 0.15), arrowprops={"arrowstyle": "->", "lw": 0.6})
        roots = {r.node for r in group.roots}
        for name, (x, y) in where.items():
            colour = "#f4b183" if name in roots else "#c5e0b4" if group.prunable else "#d9d9d9"
            axes.text(x, y, name[:18], ha="center", va="center", fontsize=6, bbox={"fc": colour, "boxstyle": "round"})
        axes.text(x0 + (span - 1) / 2, 0.6, f"group {group.index}\n{group.structure}", ha="center", fontsize=7)
        x0 += span + 0.5
    axes.set_xlim(-1, x0)
    axes.set_ylim(-height, 1.2)
    axes.axis("off")
    figure.tight_layout()
    figure.savefig(str(path), dpi=120)
    plt.close(figure)
