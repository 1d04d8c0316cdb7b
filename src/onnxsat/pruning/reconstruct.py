"""``--reconstruct``: refit each leaf that lost input channels so its output stays what it was, by least squares.

No training loop: a leaf (Conv, Gemm, MatMul) computes ``Y = X W (+ b)``, linear in its weights. After
pruning, its input ``X_p`` has fewer channels; the new weights solve ``min ||X_p W' + b' - Y||^2`` where
``Y`` is the *unpruned* model's output at that node on the calibration inputs (restricted to the output
channels the node keeps when it is itself a pruned root). Conv is handled through im2col (2-D kernels,
any pads, strides and dilations, group 1): each output pixel is one row of patch features.

Leaves are refitted in graph order, each on the inputs the already refitted model gives it, so a
leaf also corrects what earlier refits left over. Rows are streamed into the normal equations
``X^T X`` and ``X^T Y`` (batch by batch, at most ``MAX_ROWS_PER_BATCH`` sampled rows each, seeded per
leaf; a Conv's patches are gathered for the sampled rows only, and its targets kept for them only).
A small ridge term (``RIDGE`` times the mean diagonal) keeps the solve stable when features are
collinear or rows few. A refit is kept only when it lowers the node's error on calibration samples it
was not solved on (one in ``CHECK_EVERY``), then solved again on all of them; the report lists both errors
per leaf, on those samples.

ONNX Runtime runs every node of a graph whatever outputs are asked for, so the sessions here run
sub-models, each of the nodes what it computes depends on. The targets ``Y`` of all leaves come from
one pass of the original model over the batches (``_Targets``: each leaf's kept output channels at its
sampled rows, all batches, within ``TARGET_BYTES``, more passes past it). The pruned model runs once per leaf, since a
leaf's input depends on the refits before it; each pass starts from the activations the previous ones
computed (``_Inputs``, within ``ACTIVATION_BYTES``), so together they run the model about once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from onnxsat.external_data import tensor_value
from onnxsat.pruning.apply import Applied
from onnxsat.pruning.graph import attr, node_label
from onnxsat.pruning.report import LeafFit
from onnxsat.pruning.trees import LEAF, Forest
from onnxsat.verification import session

MAX_ROWS_PER_BATCH = 4096
RIDGE = 1e-4
TARGET_BYTES = 2**28
"""Original-model targets held at once: leaves whose targets (kept output channels, all batches) fit are
gathered in one pass over the batches; past it, leaves are split into several passes."""
ACTIVATION_BYTES = 2**28
"""Pruned-model activations held between leaves, so that each leaf's pass starts where the last stopped."""


CHECK_EVERY = 5
"""One sample in this many is kept out of each leaf's refit and judges it."""


@dataclass
class _Normal:
    """Running sums of the normal equations for ``[X, 1] @ [W; b] ~ Y``."""

    xtx: np.ndarray
    xty: np.ndarray
    yty: float = 0.0
    count: int = 0
    """Rows added."""

    @staticmethod
    def empty(features: int, outputs: int) -> _Normal:
        return _Normal(np.zeros((features, features)), np.zeros((features, outputs)))

    def add(self, rows: np.ndarray, goal: np.ndarray) -> None:
        if len(rows):
            self.xtx += rows.T @ rows
            self.xty += rows.T @ goal
            self.yty += float(np.sum(goal * goal))
            self.count += len(rows)

    def plus(self, other: _Normal) -> _Normal:
        return _Normal(self.xtx + other.xtx, self.xty + other.xty, self.yty + other.yty, self.count + other.count)


@dataclass
class _Leaf:
    """A leaf to refit: its node, the output axis of its weight and the original output channels it keeps."""

    node_index: int
    out_axis: int
    kept_out: np.ndarray | None


def reconstruct(
    original: onnx.ModelProto,
    applied: Applied,
    forest: Forest,
    batches: Sequence[dict[str, np.ndarray]],
    seed: int = 0,
    base_dir: Path | None = None,
) -> tuple[onnx.ModelProto, list[LeafFit], list[str]]:
    """Refit the leaves of ``applied.model`` (pruned from ``original``, same node order); return the model,
    one ``LeafFit`` per leaf, and notes on leaves that could not be refitted."""
    model = onnx.ModelProto()
    model.CopyFrom(applied.model)
    indices = sorted(
        {s.node_index for g in forest.groups for s in g.slices if s.role == LEAF and (s.node_index, 1) in applied.kept}
    )
    notes: list[str] = []
    leaves: list[_Leaf] = []
    for node_index in indices:
        node = model.graph.node[node_index]
        leaf = _unsupported(node) or _leaf(model, node_index, applied)
        if isinstance(leaf, str):
            notes.append(f"reconstruction skipped {node_label(node)}: {leaf}")
        else:
            leaves.append(leaf)
    targets = _Targets(original, leaves, batches, base_dir, seed)
    inputs = _Inputs(model, [model.graph.node[leaf.node_index].input[0] for leaf in leaves], batches, base_dir)
    fits = []
    for position, leaf in enumerate(leaves):
        fits.append(_refit(model, leaf, inputs.of(position), targets.of(position), base_dir))
        inputs.rewritten(model.graph.node[leaf.node_index].input[1])
    return model, fits, notes


def _unsupported(node: onnx.NodeProto) -> str | None:
    if node.op_type == "Conv":
        if attr(node, "group", 1) != 1:
            return "grouped Conv"
        return None
    if node.op_type == "Gemm":
        if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
            return "Gemm with transA, alpha or beta"
        return None
    if node.op_type != "MatMul":
        return f"{node.op_type} is not refitted"
    return None


def _leaf(model: onnx.ModelProto, node_index: int, applied: Applied) -> _Leaf | str:
    """The leaf to refit, or why not: a bias neither one per output nor a scalar (read from the dims)."""
    node = model.graph.node[node_index]
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    out_axis = {"Conv": 0, "Gemm": 0 if attr(node, "transB", 0) else 1, "MatMul": 1}[node.op_type]
    bias = dims.get(node.input[2]) if len(node.input) > 2 else None
    size = int(np.prod(bias)) if bias is not None else 0
    if bias is not None and not _fits_bias(size, dims[node.input[1]][out_axis]) and size != 1:
        return f"bias of shape {bias}"
    return _Leaf(node_index, out_axis, applied.kept.get((node_index, 1), {}).get(out_axis))


def _weights(
    model: onnx.ModelProto, node: onnx.NodeProto, base_dir: Path | None
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """The node's weight, its bias (None without one) and the bias's name."""
    initializers = {t.name: t for t in model.graph.initializer}
    weight = tensor_value(initializers[node.input[1]], base_dir)
    bias_name = node.input[2] if len(node.input) > 2 else ""
    bias = tensor_value(initializers[bias_name], base_dir) if bias_name in initializers else None
    return weight, bias, bias_name


def _fits_bias(size: int, outputs: int) -> bool:
    """Whether a bias of ``size`` values is refitted with the weight (one per output); else it is a scalar."""
    return size == outputs and outputs > 1


@dataclass
class _Target:
    """A leaf's target on one batch: how many rows the output has, those ``_refit`` samples (None: all)
    and the original output there, kept output channels only, as ``[rows, outputs]`` in the model's dtype."""

    count: int
    pick: np.ndarray | None
    rows: np.ndarray


class _Targets:
    """The original model's output at each leaf on every batch, restricted to what ``_refit`` reads: the
    output channels the pruned leaf keeps, at the rows it samples (at most ``MAX_ROWS_PER_BATCH`` per batch,
    drawn here from a generator seeded per leaf, so a leaf's rows do not depend on the other leaves).
    The leaves' targets are gathered together, in one pass over the batches of one ORT session, while
    their estimated size stays within ``TARGET_BYTES``; past it, in as many passes as it takes, each when
    its first leaf is asked for (leaves are asked in order). Held in the model's dtype: ``_refit``
    converts them to float64 batch by batch."""

    def __init__(
        self,
        original: onnx.ModelProto,
        leaves: list[_Leaf],
        batches: Sequence[dict[str, np.ndarray]],
        base_dir: Path | None,
        seed: int = 0,
    ) -> None:
        self.original, self.leaves, self.batches, self.base_dir = original, leaves, batches, base_dir
        self.seed = seed
        self.chunks = self._chunks() if leaves else []
        self.held: dict[int, list[_Target]] = {}

    def _chunks(self) -> list[range]:
        """Consecutive leaves whose targets fit ``TARGET_BYTES`` together (estimated from the first batch)."""
        first = self._run(range(len(self.leaves)), self.batches[:1])
        chunks, start, total = [], 0, 0
        for position, values in first.items():
            size = sum(v.rows.nbytes for v in values) * len(self.batches)
            if position > start and total + size > TARGET_BYTES:
                chunks.append(range(start, position))
                start, total = position, 0
            total += size
        chunks.append(range(start, len(self.leaves)))
        return chunks

    def of(self, position: int) -> list[_Target]:
        """The targets of the ``position``-th leaf, one per batch (handed over, no longer held)."""
        if position not in self.held:
            self.held = {}  # the previous chunk's, already handed over
            self.held = self._run(next(c for c in self.chunks if position in c), self.batches)
        return self.held.pop(position)

    def _run(self, positions: range, batches: Sequence[dict[str, np.ndarray]]) -> dict[int, list[_Target]]:
        nodes = [self.original.graph.node[self.leaves[p].node_index] for p in positions]
        names = [node.output[0] for node in nodes]
        runner = _session(self.original, names, self.base_dir)
        rngs = {p: np.random.default_rng([self.seed, p]) for p in positions}
        held: dict[int, list[_Target]] = {p: [] for p in positions}
        for feeds in batches:
            for p, node, y in zip(positions, nodes, runner.run(names, feeds), strict=True):
                count = _output_rows(node, y.shape)
                pick = rngs[p].choice(count, MAX_ROWS_PER_BATCH, replace=False) if count > MAX_ROWS_PER_BATCH else None
                rows = _target_rows(node, _kept_channels(node, y, self.leaves[p].kept_out), pick)
                held[p].append(_Target(count, pick, rows))
        return held


def _kept_channels(node: onnx.NodeProto, y: np.ndarray, kept_out: np.ndarray | None) -> np.ndarray:
    """The node's output restricted to the output channels ``kept_out`` (axis 1 of a Conv, else the last)."""
    if kept_out is None:
        return y
    return np.take(y, kept_out, axis=1 if node.op_type == "Conv" else -1)


class _Inputs:
    """The pruned model's input to each leaf on every batch, as the leaves refitted so far make it.

    ONNX Runtime runs every node of a graph, whatever the outputs asked for, so each pass runs only the
    nodes its leaf input depends on; and it starts from the tensors earlier passes computed, instead of
    recomputing everything from the model's inputs: each pass also returns, for all batches, what it
    computed that later passes read (the frontier of the nodes run so far). Those stay right because
    leaves are refitted in graph order, so nothing upstream of a leaf's input is refitted after it
    (``rewritten`` drops them all when a refit changed a weight that a node run so far reads too).
    Held within ``ACTIVATION_BYTES``; a pass whose frontier would not fit keeps the previous one."""

    def __init__(
        self,
        model: onnx.ModelProto,
        inputs: list[str],
        batches: Sequence[dict[str, np.ndarray]],
        base_dir: Path | None,
    ) -> None:
        self.model, self.inputs, self.batches, self.base_dir = model, inputs, batches, base_dir
        self.computed: set[int] = set()
        self.held: dict[str, list[np.ndarray]] = {}

    def of(self, position: int) -> Iterator[np.ndarray]:
        """The ``position``-th leaf's input, batch by batch (the last value ends the pass)."""
        name, graph = self.inputs[position], self.model.graph
        needed, reached = _ancestors(graph, [name], self.held)
        computed = self.computed | needed
        later = self.inputs[position + 1 :]
        ahead, _ = _ancestors(graph, later, {})
        reads = set(later) | {t for i in ahead - computed for t in _reads(graph.node[i])}
        frontier = [t for i in sorted(computed) for t in graph.node[i].output if t in reads]
        fetch = [t for t in frontier if t not in self.held]
        if name in self.held:  # held itself (another leaf read it too): nothing to run
            yield from self.held[name]
            self.computed, self.held = computed, {t: self.held[t] for t in frontier if t in self.held}
            return
        given = {t: v[0] for t, v in self.held.items() if t in reached}
        names = list(dict.fromkeys([name, *fetch]))
        runner = session(
            _upto(self.model, names, given), ort.GraphOptimizationLevel.ORT_DISABLE_ALL, base_dir=self.base_dir
        )
        fetched: dict[str, list[np.ndarray]] | None = {t: [] for t in fetch}
        size = sum(v.nbytes for t in frontier if t in self.held for v in self.held[t])
        for i, feeds in enumerate(self.batches):
            values = dict(zip(names, runner.run(names, {**feeds, **{t: self.held[t][i] for t in given}}), strict=True))
            if fetched is not None:
                size += sum(values[t].nbytes for t in fetch)
                if size > ACTIVATION_BYTES:
                    fetched = None  # too large to hold: the next pass starts from the held frontier again
                else:
                    for t in fetch:
                        fetched[t].append(values[t])
            yield values[name]
        if fetched is not None:
            self.computed, self.held = computed, {t: self.held[t] if t in self.held else fetched[t] for t in frontier}

    def rewritten(self, initializer: str) -> None:
        """A refit replaced ``initializer``: forget what was computed if a node run so far reads it."""
        if any(initializer in self.model.graph.node[i].input for i in self.computed):
            self.computed, self.held = set(), {}


def _session(model: onnx.ModelProto, names: list[str], base_dir: Path | None) -> ort.InferenceSession:
    """A session computing just ``names`` from the model's inputs (see ``_upto``)."""
    return session(_upto(model, names), ort.GraphOptimizationLevel.ORT_DISABLE_ALL, base_dir=base_dir)


def _ancestors(graph: onnx.GraphProto, names: list[str], given: Mapping[str, object]) -> tuple[set[int], set[str]]:
    """The nodes ``names`` depend on, up to the tensors ``given``, and every tensor name reached."""
    producer = {output: i for i, node in enumerate(graph.node) for output in node.output if output}
    needed: set[int] = set()
    reached: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        if name not in given and name in producer and producer[name] not in needed:
            needed.add(producer[name])
            pending.extend(_reads(graph.node[producer[name]]))
    return needed, reached


def _upto(model: onnx.ModelProto, names: list[str], given: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A model of the nodes ``names`` depend on, whose outputs are ``names``; its inputs are the model's
    and the tensors ``given`` (sample values, for their dtype), where it starts instead of computing them."""
    given = given or {}
    graph = model.graph
    needed, used = _ancestors(graph, names, given)
    part = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(part, field, getattr(model, field))
    part.opset_import.extend(model.opset_import)
    part.functions.extend(model.functions)
    part.graph.name = graph.name
    initialized = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    part.graph.input.extend(i for i in graph.input if i.name not in initialized or i.name in used)
    part.graph.input.extend(
        onnx.helper.make_tensor_value_info(t, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), None)
        for t, v in given.items()
        if t in used
    )
    part.graph.node.extend(node for i, node in enumerate(graph.node) if i in needed)
    part.graph.initializer.extend(t for t in graph.initializer if t.name in used)
    part.graph.sparse_initializer.extend(t for t in graph.sparse_initializer if t.values.name in used)
    part.graph.value_info.extend(v for v in graph.value_info if v.name in used and v.name not in given)
    declared = {o.name: o for o in graph.output}
    part.graph.output.extend(declared.get(name, onnx.ValueInfoProto(name=name)) for name in names)
    return part


def _reads(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads, those its subgraphs read from the enclosing scope included (over-counted:
    names a subgraph makes itself are harmless, nothing outside produces them)."""
    reads = [name for name in node.input if name]
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            reads.extend(name for inner in graph.node for name in _reads(inner))
    return reads


def _refit(
    model: onnx.ModelProto,
    leaf: _Leaf,
    inputs: Iterator[np.ndarray],
    targets: list[_Target],
    base_dir: Path | None,
) -> LeafFit:
    """Refit one leaf on its inputs (as the model refitted so far makes them) and targets, batch by batch.

    Every ``CHECK_EVERY``-th sample's rows are set aside: the refit is solved on the others and judged on
    them, so a refit that only interpolates its samples (a classifier head has one row per sample, often
    fewer than its inputs) is not kept. Once kept, it is solved again on all the rows."""
    node = model.graph.node[leaf.node_index]
    weight, bias, bias_name = _weights(model, node, base_dir)
    fit_bias = bias is not None and _fits_bias(bias.size, weight.shape[leaf.out_axis])
    matrix = _as_matrix(node, weight)  # [features, outputs]
    constant = None if bias is None or fit_bias else float(bias.reshape(-1)[0])  # a scalar (checked in _leaf)
    fit: _Normal | None = None
    check: _Normal | None = None
    seen = 0
    for x, target in zip(inputs, targets, strict=True):  # inputs first: its pass ends before zip checks the lengths
        count = _row_count(node, x.shape, weight)
        if count != target.count:
            raise ValueError(f"{node_label(node)}: {count} input rows but {target.count} output rows")
        rows = _rows(node, x, weight, target.pick)
        goal = target.rows.astype(np.float64)
        if constant is not None:
            goal = goal - constant
        if fit_bias:
            rows = np.hstack([rows, np.ones((len(rows), 1))])
        if fit is None or check is None:
            fit, check = _Normal.empty(rows.shape[1], goal.shape[1]), _Normal.empty(rows.shape[1], goal.shape[1])
        row_index = target.pick if target.pick is not None else np.arange(count)
        sample = seen + row_index // max(count // max(x.shape[0], 1), 1)
        held = sample % CHECK_EVERY == CHECK_EVERY - 1
        fit.add(rows[~held], goal[~held])
        check.add(rows[held], goal[held])
        seen += x.shape[0]
    assert fit is not None and check is not None
    current = np.vstack([matrix, bias.reshape(1, -1)]) if fit_bias else matrix
    solved = _solve(fit)
    held_out = check.count > 0 and check.yty > 0  # else too few samples to set any apart: judged on its own
    judge = check if held_out else fit
    before, after = _error(judge, current), _error(judge, solved)
    accepted = after < before
    if accepted:
        if held_out:
            solved = _solve(fit.plus(check))
        new_weight = solved[:-1] if fit_bias else solved
        _write(model, node.input[1], _from_matrix(node, new_weight, weight.shape).astype(weight.dtype))
        if fit_bias:
            assert bias is not None
            _write(model, bias_name, solved[-1].reshape(bias.shape).astype(bias.dtype), node, 2)
    return LeafFit(node_label(node), before, after, accepted, held_out)


def _solve(normal: _Normal) -> np.ndarray:
    """The ridge solution of the normal equations (``RIDGE`` times their mean diagonal added)."""
    diagonal = float(np.mean(np.diag(normal.xtx))) or 1.0
    return np.linalg.solve(normal.xtx + RIDGE * diagonal * np.eye(len(normal.xtx)), normal.xty)


def _error(normal: _Normal, weights: np.ndarray) -> float:
    """``||X W - Y|| / ||Y||`` from the normal equations' sums."""
    residual = np.sum(weights * (normal.xtx @ weights)) - 2.0 * np.sum(weights * normal.xty) + normal.yty
    return float(np.sqrt(max(residual, 0.0) / normal.yty)) if normal.yty > 0 else 0.0


def _as_matrix(node: onnx.NodeProto, weight: np.ndarray) -> np.ndarray:
    """The weight as ``[features, outputs]`` in float64, features ordered as ``_rows`` makes them."""
    weight = weight.astype(np.float64)
    if node.op_type == "Conv":
        return weight.reshape(weight.shape[0], -1).T
    if node.op_type == "Gemm" and attr(node, "transB", 0):
        return weight.T
    return weight


def _from_matrix(node: onnx.NodeProto, matrix: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Conv":
        return matrix.T.reshape(shape)
    if node.op_type == "Gemm" and attr(node, "transB", 0):
        return matrix.T
    return matrix


def _output_rows(node: onnx.NodeProto, shape: tuple[int, ...]) -> int:
    """How many rows a node output of ``shape`` has: one per sample and pixel for a Conv, else per vector."""
    return int(np.prod(shape)) // shape[1 if node.op_type == "Conv" else -1]


def _target_rows(node: onnx.NodeProto, y: np.ndarray, pick: np.ndarray | None) -> np.ndarray:
    """The original node output (its kept channels) as C-ordered ``[rows, outputs]``, only rows ``pick`` if
    given (BLAS adds up ``rows.T @ goal`` in an order that depends on the layout: one layout, one result)."""
    if node.op_type == "Conv":
        y = y.reshape(y.shape[0], y.shape[1], -1)  # [N, outputs, pixels]
        if pick is not None:
            return np.ascontiguousarray(y[pick // y.shape[2], :, pick % y.shape[2]])
        y = np.moveaxis(y, 1, -1)
    y = y.reshape(-1, y.shape[-1])
    return np.ascontiguousarray(y if pick is None else y[pick])


def _conv_geometry(node: onnx.NodeProto, x_shape: tuple[int, ...], weight: np.ndarray) -> tuple[list[int], ...]:
    """A Conv's kernel, strides, dilations, pads and output size for an input of ``x_shape``."""
    kernel = list(weight.shape[2:])
    rank = len(kernel)
    strides = list(attr(node, "strides", [1] * rank))
    dilations = list(attr(node, "dilations", [1] * rank))
    pads = _auto_pads(node, x_shape[2:], kernel, strides, dilations) or list(attr(node, "pads", [0] * 2 * rank))
    padded = [x_shape[2 + i] + pads[i] + pads[i + rank] for i in range(rank)]
    outs = [(padded[i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(rank)]
    return kernel, strides, dilations, pads, outs


def _auto_pads(
    node: onnx.NodeProto, size: Sequence[int], kernel: list[int], strides: list[int], dilations: list[int]
) -> list[int] | None:
    """The explicit pads of a Conv's ``auto_pad`` (jax2onnx writes SAME_UPPER) for an input of spatial ``size``,
    as ONNX defines them: SAME_* pads so the output is ceil(size / stride), the odd pixel at the end (UPPER)
    or the start (LOWER); VALID pads nothing. None without auto_pad."""
    mode = attr(node, "auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        return None
    if mode == "VALID":
        return [0] * 2 * len(kernel)
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations, strict=True):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return begins + ends


def _row_count(node: onnx.NodeProto, x_shape: tuple[int, ...], weight: np.ndarray) -> int:
    """How many rows ``_rows`` makes of an input of ``x_shape``: one per output pixel for a Conv."""
    if node.op_type == "Conv":
        return x_shape[0] * int(np.prod(_conv_geometry(node, x_shape, weight)[4]))
    return int(np.prod(x_shape[:-1]))


def _rows(node: onnx.NodeProto, x: np.ndarray, weight: np.ndarray, pick: np.ndarray | None = None) -> np.ndarray:
    """The pruned node's input as float64 ``[rows, features]`` (im2col for a Conv), only rows ``pick`` if given
    (then a Conv's patches are gathered for those rows alone)."""
    if node.op_type != "Conv":
        x = x.reshape(-1, x.shape[-1])
        return (x if pick is None else x[pick]).astype(np.float64)
    kernel, strides, dilations, pads, outs = _conv_geometry(node, x.shape, weight)
    rank = len(kernel)
    padded = np.pad(x, [(0, 0), (0, 0), *[(pads[i], pads[i + rank]) for i in range(rank)]])
    if pick is not None:  # padded[n, :, o * s + k * d] for each picked row (n, *o) and kernel offset k
        sample, *out = np.unravel_index(pick, [x.shape[0], *outs])
        offsets = np.unravel_index(np.arange(int(np.prod(kernel))), kernel)
        steps = zip(out, offsets, strides, dilations, strict=True)
        index = (sample[:, None], *[(o * s)[:, None] + (k * d)[None, :] for o, k, s, d in steps])
        cols = np.moveaxis(padded, 1, -1)[index]  # [rows, K, C]: channels last, each picked row's are adjacent
        return np.ascontiguousarray(np.swapaxes(cols, 1, 2), dtype=np.float64).reshape(len(pick), -1)  # (c, *k)
    patches = []
    for offsets in np.ndindex(*kernel):
        index = tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offsets, dilations, strides, outs, strict=True)
        )
        patches.append(padded[(slice(None), slice(None), *index)])
    cols = np.stack(patches, axis=2)  # [N, C, K, *outs], K = prod(kernel) in C order
    cols = np.moveaxis(cols.reshape(cols.shape[0], -1, *outs), 1, -1)  # [N, *outs, C*K]
    return cols.reshape(-1, cols.shape[-1]).astype(np.float64)


def _write(
    model: onnx.ModelProto, name: str, value: np.ndarray, node: onnx.NodeProto | None = None, slot: int = 0
) -> None:
    """Replace initializer ``name``; a bias read by other nodes too is copied for ``node`` instead."""
    readers = sum(name == i for n in model.graph.node for i in n.input)
    if node is not None and readers > 1:
        new_name = f"{name}__refit_{node_label(node)}"
        model.graph.initializer.append(numpy_helper.from_array(value, new_name))
        node.input[slot] = new_name
        return
    for tensor in model.graph.initializer:
        if tensor.name == name:
            tensor.CopyFrom(numpy_helper.from_array(value, name))
            return
