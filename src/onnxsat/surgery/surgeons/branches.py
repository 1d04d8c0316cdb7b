"""Parallel convolution branches summed into one convolution (RepVGG, MobileOne, ACNet and DBB re-parameterisation).

    Add(Conv3x3(x) [+BN], Conv1x1(x) [+BN], BN(x) or x)  ==>  Conv3x3(x, W, b)

Networks trained with such branches are exported as trained unless their authors re-parameterise first, and
timm's train-time RepVGG, MobileOne and FastViT blocks export that way. Every branch is linear in ``x``, so
their sum is one convolution: each kernel is embedded at the centre of the largest, a BatchNormalization
after a branch is folded into its weights, and an identity (or a BatchNormalization of ``x`` alone) is the
kernel that reads each channel's centre tap. One convolution then does the work of all of them. Neither
ONNX Runtime nor the e-graph's local rules see it: the branches meet only at the Add.

Every branch must read the same ``x`` with the same strides, dilations and groups, explicit pads that put its
kernel at the centre of the largest, initializer weights, and no other reader; an identity branch needs a
stride of 1 and as many output channels as input channels. Exact up to float rounding: the weights are
summed in float64 and stored in the model's float type.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from onnxsat.external_data import is_external, tensor_value
from onnxsat.op_kinds import DEFAULT_DOMAINS, IEEE_FLOAT_TYPES
from onnxsat.surgery.graph_edit import consumers, copy_model, drop_unused_initializers, initializers, producers
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register
from onnxsat.surgery.surgeons._editing import Splice, attribute


@dataclass
class _Branch:
    """One summand: ``scale * conv(x, weight) + shift`` per output channel (weight None: the identity)."""

    weight: np.ndarray | None
    bias: np.ndarray | None
    conv: onnx.NodeProto | None
    nodes: list[onnx.NodeProto]
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    dtype: type = np.float32
    """The weight's element type, which the merged weight keeps."""


@register
@dataclass
class ParallelConvsToConv(Surgeon):
    """Sum parallel convolution branches of one input (and its identity) into one convolution; see the module."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result, merged = sum_branches(model)
        if not merged:
            return SurgeryOutcome(result, False, "no parallel convolution branches of one input summed by Add")
        return SurgeryOutcome(result, True, f"summed {merged} group(s) of parallel convolution branches into one Conv")


def sum_branches(model: onnx.ModelProto, base_dir: Path | None = None) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with every group of branches summed into one Conv, and how many groups; weights in
    external data are read from ``base_dir``."""
    result = copy_model(model)
    graph = result.graph
    made, readers, weights = _Finder(graph), consumers(graph), initializers(graph)
    splice = Splice(result)
    position = {id(node): index for index, node in enumerate(graph.node)}
    outputs = {value.name for value in graph.output}
    merged = 0
    used: set[int] = set()
    for node in graph.node:
        if node.op_type != "Add" or node.domain not in DEFAULT_DOMAINS or id(node) in used:
            continue
        if len(readers.get(node.output[0], [])) == 1 and readers[node.output[0]][0].op_type == "Add":
            continue  # an inner Add of a tree: its root takes it
        tree = made.tree(node, readers, outputs)
        if tree is None:
            continue
        adds, leaves = tree
        found = _branches(leaves, made, readers, weights, outputs, base_dir)
        if found is None:
            continue
        x, branches = found
        conv = _merged(x, branches, node.output[0], splice)
        if conv is None:
            continue
        for gone in [*adds, *(n for b in branches for n in b.nodes)]:
            splice.drop(position[id(gone)])
            used.add(id(gone))
        splice.after(position[id(node)], conv)
        merged += 1
    if merged:
        splice.commit()
        drop_unused_initializers(graph)
    return result, merged


class _Finder:
    """Producers of a graph, and the Add trees over them."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.made = producers(graph)

    def tree(
        self, root: onnx.NodeProto, readers: dict[str, list[onnx.NodeProto]], outputs: set[str]
    ) -> tuple[list[onnx.NodeProto], list[str]] | None:
        """The Adds under ``root`` whose results only it reads, and the tensors they sum (at least two)."""
        adds, leaves, pending = [root], [], list(root.input)
        while pending:
            name = pending.pop()
            node = self.made.get(name)
            inner = (
                node is not None
                and node.op_type == "Add"
                and node.domain in DEFAULT_DOMAINS
                and len(readers.get(name, [])) == 1
                and name not in outputs
            )
            if inner:
                assert node is not None
                adds.append(node)
                pending.extend(node.input)
            else:
                leaves.append(name)
        return (adds, leaves) if len(leaves) >= 2 else None


def _branches(
    leaves: list[str],
    finder: _Finder,
    readers: dict[str, list[onnx.NodeProto]],
    weights: dict[str, onnx.TensorProto],
    outputs: set[str],
    base_dir: Path | None,
) -> tuple[str, list[_Branch]] | None:
    """The input all the summed tensors are branches of, and the branches; None unless every one is."""

    def value(name: str) -> np.ndarray | None:
        tensor = weights.get(name)
        if tensor is None or (is_external(tensor) and base_dir is None):
            return None
        return tensor_value(tensor, base_dir).astype(np.float64)

    def sole(name: str) -> bool:
        return len(readers.get(name, [])) == 1 and name not in outputs

    def affine(node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
        """An inference BatchNormalization's per-channel scale and shift."""
        if node.op_type != "BatchNormalization" or node.domain not in DEFAULT_DOMAINS or len(node.output) != 1:
            return None
        if attribute(node, "training_mode", 0):
            return None
        stats = [value(name) for name in node.input[1:5]]
        if any(s is None or s.ndim != 1 for s in stats):
            return None
        gamma, beta, mean, var = stats  # type: ignore[misc]
        scale = gamma / np.sqrt(var + float(attribute(node, "epsilon", 1e-5)))  # type: ignore[arg-type]
        return scale, beta - mean * scale

    def conv(node: onnx.NodeProto | None) -> _Branch | None:
        if node is None or node.op_type != "Conv" or node.domain not in DEFAULT_DOMAINS:
            return None
        weight = value(node.input[1]) if len(node.input) > 1 else None
        bias = value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if weight is None or weight.ndim != 4 or (len(node.input) > 2 and node.input[2] and bias is None):
            return None
        kind = weights[node.input[1]].data_type
        if kind not in IEEE_FLOAT_TYPES:
            return None
        return _Branch(weight, bias, node, [node], dtype=onnx.helper.tensor_dtype_to_np_dtype(kind))

    sources: set[str] = set()
    branches: list[_Branch] = []
    for leaf in leaves:
        node = finder.made.get(leaf)
        branch = conv(node) if sole(leaf) else None
        if branch is None and node is not None and sole(leaf):
            folded = affine(node)
            inner = finder.made.get(node.input[0])
            if folded is not None and sole(node.input[0]) and (branch := conv(inner)) is not None:
                branch.scale, branch.shift = folded
                branch.nodes.append(node)
            elif folded is not None:
                branch = _Branch(None, None, None, [node], *folded)
                sources.add(node.input[0])
                branches.append(branch)
                continue
        if branch is None:
            branches.append(_Branch(None, None, None, []))  # the leaf is x itself (checked below)
            sources.add(leaf)
            continue
        assert branch.conv is not None
        sources.add(branch.conv.input[0])
        branches.append(branch)
    if len(sources) != 1 or not any(b.conv is not None for b in branches):
        return None
    return sources.pop(), branches


def _merged(x: str, branches: list[_Branch], output: str, splice: Splice) -> onnx.NodeProto | None:
    """One Conv computing the sum of ``branches`` of ``x`` into ``output``; None when they do not line up."""
    convs = [b for b in branches if b.conv is not None]
    first = convs[0].conv
    assert first is not None
    shared = {key: attribute(first, key) for key in ("strides", "dilations", "group")}
    if any(attribute(b.conv, key) != value for b in convs for key, value in shared.items()):
        return None
    if any(attribute(b.conv, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") for b in convs):
        return None
    weights = [b.weight for b in convs]
    assert all(w is not None for w in weights)
    rank = 2
    kernel = [max(w.shape[2 + i] for w in weights) for i in range(rank)]  # type: ignore[union-attr]
    outputs, per_group = weights[0].shape[0], weights[0].shape[1]  # type: ignore[union-attr]
    if any(w.shape[:2] != (outputs, per_group) for w in weights):  # type: ignore[union-attr]
        return None
    dilations = list(shared["dilations"] or [1] * rank)  # type: ignore[arg-type]
    strides = list(shared["strides"] or [1] * rank)  # type: ignore[arg-type]
    group = int(shared["group"] or 1)  # type: ignore[arg-type]
    largest = max(convs, key=lambda b: b.weight.shape[2] * b.weight.shape[3])  # type: ignore[union-attr]
    pads = list(attribute(largest.conv, "pads") or [0] * 2 * rank)  # type: ignore[arg-type]
    total_weight = np.zeros((outputs, per_group, *kernel))
    total_bias = np.zeros(outputs)
    for branch in branches:
        size = [1] * rank if branch.weight is None else list(branch.weight.shape[2:])
        own = [0] * 2 * rank if branch.conv is None else list(attribute(branch.conv, "pads") or [0] * 2 * rank)
        offsets = []
        for i in range(rank):  # the branch's kernel sits at this offset of the merged one, on the same output grid
            gap = kernel[i] - size[i]
            if (
                gap % 2
                or own[i] + gap // 2 * dilations[i] != pads[i]
                or own[i + rank] + gap // 2 * dilations[i] != pads[i + rank]
            ):
                return None
            offsets.append(gap // 2)
        if branch.weight is None:  # x itself, or a BatchNormalization of it: each channel's own centre tap
            if strides != [1] * rank or outputs != per_group * group:
                return None
            scale = branch.scale if branch.scale is not None else np.ones(outputs)
            if len(scale) != outputs:
                return None
            channel = np.arange(outputs)
            total_weight[channel, channel % per_group, offsets[0], offsets[1]] += scale
        else:
            weight = branch.weight * (branch.scale[:, None, None, None] if branch.scale is not None else 1.0)
            h, w = branch.weight.shape[2:]
            total_weight[:, :, offsets[0] : offsets[0] + h, offsets[1] : offsets[1] + w] += weight
            if branch.bias is not None:
                total_bias += branch.bias * (branch.scale if branch.scale is not None else 1.0)
        if branch.shift is not None:
            if len(branch.shift) != outputs:
                return None
            total_bias += branch.shift
    dtype = convs[0].dtype
    base = first.name or "Conv"
    weight_name = splice.const(f"{base}_branches_weight", total_weight.astype(dtype))
    bias_name = splice.const(f"{base}_branches_bias", total_bias.astype(dtype))
    return splice.node(
        "Conv",
        [x, weight_name, bias_name],
        output,
        f"{base}_branches",
        kernel_shape=kernel,
        pads=pads,
        strides=strides,
        dilations=dilations,
        group=group,
    )
