"""``--reconstruct``: refit each leaf that lost input channels so its output stays what it was, by least squares.

No training loop: a leaf (Conv, Gemm, MatMul) computes ``Y = X W (+ b)``, linear in its weights. After
pruning, its input ``X_p`` has fewer channels; the new weights solve ``min ||X_p W' + b' - Y||^2`` where
``Y`` is the *unpruned* model's output at that node on the calibration inputs (restricted to the output
channels the node keeps when it is itself a pruned root). Conv is handled through im2col (2-D kernels,
any pads, strides and dilations, group 1): each output pixel is one row of patch features.

Leaves are refitted in graph order, each on the inputs the already refitted model gives it, so a
leaf also corrects what earlier refits left over. Rows are streamed into the normal equations
``X^T X`` and ``X^T Y`` (batch by batch, at most ``MAX_ROWS_PER_BATCH`` sampled rows each, seeded), so
memory is one batch of activations plus ``features^2``. A small ridge term (``RIDGE`` times the
mean diagonal) keeps the solve stable when features are collinear or rows few. A refit is kept only
when it lowers the node's error on the calibration data; the report lists both errors per leaf.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from onnxsat.verification import session, with_outputs

MAX_ROWS_PER_BATCH = 4096
RIDGE = 1e-4


@dataclass
class _Normal:
    """Running sums of the normal equations for ``[X, 1] @ [W; b] ~ Y``."""

    xtx: np.ndarray
    xty: np.ndarray
    yty: float = 0.0


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
    leaves = sorted(
        {s.node_index for g in forest.groups for s in g.slices if s.role == LEAF and (s.node_index, 1) in applied.kept}
    )
    fits: list[LeafFit] = []
    notes: list[str] = []
    rng = np.random.default_rng(seed)
    for node_index in leaves:
        node = model.graph.node[node_index]
        why = _unsupported(node)
        if why:
            notes.append(f"reconstruction skipped {node_label(node)}: {why}")
            continue
        fit = _refit(original, model, node_index, applied, batches, rng, base_dir)
        if isinstance(fit, str):
            notes.append(f"reconstruction skipped {node_label(node)}: {fit}")
        else:
            fits.append(fit)
    return model, fits, notes


def _unsupported(node: onnx.NodeProto) -> str | None:
    if node.op_type == "Conv":
        if attr(node, "group", 1) != 1:
            return "grouped Conv"
        if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", ""):
            return "auto_pad"
        return None
    if node.op_type == "Gemm":
        if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
            return "Gemm with transA, alpha or beta"
        return None
    if node.op_type != "MatMul":
        return f"{node.op_type} is not refitted"
    return None


def _outputs(
    model: onnx.ModelProto, name: str, batches: Sequence[dict[str, np.ndarray]], base_dir: Path | None
) -> list[np.ndarray]:
    runner = session(with_outputs(model, [name]), ort.GraphOptimizationLevel.ORT_DISABLE_ALL, base_dir=base_dir)
    return [runner.run([name], feeds)[0] for feeds in batches]


def _refit(
    original: onnx.ModelProto,
    model: onnx.ModelProto,
    node_index: int,
    applied: Applied,
    batches: Sequence[dict[str, np.ndarray]],
    rng: np.random.Generator,
    base_dir: Path | None,
) -> LeafFit | str:
    node = model.graph.node[node_index]
    initializers = {t.name: t for t in model.graph.initializer}
    weight = tensor_value(initializers[node.input[1]], base_dir)
    bias_name = node.input[2] if len(node.input) > 2 else ""
    bias = tensor_value(initializers[bias_name], base_dir) if bias_name in initializers else None
    out_axis = {"Conv": 0, "Gemm": 0 if attr(node, "transB", 0) else 1, "MatMul": 1}[node.op_type]
    kept_out = applied.kept.get((node_index, 1), {}).get(out_axis)
    outputs = weight.shape[out_axis]
    fit_bias = bias is not None and bias.size == outputs and outputs > 1
    if bias is not None and not fit_bias and bias.size != 1:
        return f"bias of shape {list(bias.shape)}"
    inputs = _outputs(model, node.input[0], batches, base_dir)
    targets = _outputs(original, node.output[0], batches, base_dir)
    matrix = _as_matrix(node, weight)  # [features, outputs]
    constant = None if bias is None or fit_bias else float(bias.reshape(-1)[0])  # a scalar (checked in _unsupported)
    normal = None
    for x, y in zip(inputs, targets, strict=True):
        rows = _rows(node, x, weight)
        goal = _target_rows(node, y, kept_out)
        if constant is not None:
            goal = goal - constant
        if len(rows) > MAX_ROWS_PER_BATCH:
            pick = rng.choice(len(rows), MAX_ROWS_PER_BATCH, replace=False)
            rows, goal = rows[pick], goal[pick]
        if fit_bias:
            rows = np.hstack([rows, np.ones((len(rows), 1))])
        if normal is None:
            normal = _Normal(np.zeros((rows.shape[1], rows.shape[1])), np.zeros((rows.shape[1], goal.shape[1])))
        normal.xtx += rows.T @ rows
        normal.xty += rows.T @ goal
        normal.yty += float(np.sum(goal * goal))
    assert normal is not None
    current = np.vstack([matrix, bias.reshape(1, -1)]) if fit_bias else matrix
    diagonal = float(np.mean(np.diag(normal.xtx))) or 1.0
    solved = np.linalg.solve(normal.xtx + RIDGE * diagonal * np.eye(len(normal.xtx)), normal.xty)
    before, after = _error(normal, current), _error(normal, solved)
    accepted = after < before
    if accepted:
        new_weight = solved[:-1] if fit_bias else solved
        _write(model, node.input[1], _from_matrix(node, new_weight, weight.shape).astype(weight.dtype))
        if fit_bias:
            assert bias is not None
            _write(model, bias_name, solved[-1].reshape(bias.shape).astype(bias.dtype), node, 2)
    return LeafFit(node_label(node), before, after, accepted)


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


def _target_rows(node: onnx.NodeProto, y: np.ndarray, kept_out: np.ndarray | None) -> np.ndarray:
    """The original node output as ``[rows, outputs]``, only the output channels the pruned node keeps."""
    y = np.asarray(y, dtype=np.float64)
    if node.op_type == "Conv":
        y = np.moveaxis(y, 1, -1)
    y = y.reshape(-1, y.shape[-1])
    return y if kept_out is None else y[:, kept_out]


def _rows(node: onnx.NodeProto, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The pruned node's input as ``[rows, features]`` (im2col for a Conv)."""
    x = np.asarray(x, dtype=np.float64)
    if node.op_type != "Conv":
        return x.reshape(-1, x.shape[-1])
    kernel = list(weight.shape[2:])
    rank = len(kernel)
    strides = list(attr(node, "strides", [1] * rank))
    dilations = list(attr(node, "dilations", [1] * rank))
    pads = list(attr(node, "pads", [0] * 2 * rank))
    padded = np.pad(x, [(0, 0), (0, 0), *[(pads[i], pads[i + rank]) for i in range(rank)]])
    outs = [(padded.shape[2 + i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(rank)]
    patches = []
    for offsets in np.ndindex(*kernel):
        index = tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offsets, dilations, strides, outs, strict=True)
        )
        patches.append(padded[(slice(None), slice(None), *index)])
    cols = np.stack(patches, axis=2)  # [N, C, K, *outs], K = prod(kernel) in C order
    cols = np.moveaxis(cols.reshape(cols.shape[0], -1, *outs), 1, -1)  # [N, *outs, C*K]
    return cols.reshape(-1, cols.shape[-1])


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
