"""Which weights unstructured pruning touches, and which input channel each weight element multiplies.

Targets are the constant weights of Conv, ConvTranspose, Gemm and MatMul, and of the fused forms
ONNXSat writes for ONNX Runtime (``com.microsoft`` FusedConv, FusedGemm, FusedMatMul): floating-point
initializers that are not graph inputs (a runtime may replace those, so zeros written there would not
stick), and not a fixed transform of whole numbers (:func:`fixed_transform`). A weight read by several
nodes is one target. Graph order is kept: the triangular method grows its thresholds from the first
target to the last.

``channel_axis``/``groups`` say how an element maps to the input channel it multiplies, which the
calibrated method needs: the activation norm of that channel scales the element's score.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.errors import SettingsError
from onnxsat.op_kinds import IEEE_FLOAT_TYPES

CONV_OPS = frozenset({"Conv", "FusedConv"})
GEMM_OPS = frozenset({"Gemm", "FusedGemm"})
MATMUL_OPS = frozenset({"MatMul", "FusedMatMul"})
DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})


FIXED_CHECK_ELEMENTS = 4096
"""Weights up to this size are checked for whole-number values (:func:`fixed_transform`); learned weights
this small are rare, and larger fixed ones rarer still."""


def fixed_transform(weight: onnx.TensorProto) -> bool:
    """Whether a small weight holds whole numbers only: a fixed transform written into the graph (YOLOv8/11's
    box decoder is a 1x1 Conv of the bin positions 0..15; an edge filter, a selection matrix), not a learned
    weight. Zeroing half of YOLO's moved its boxes by up to 112 pixels, and zeros there save nothing."""
    if int(np.prod(weight.dims, dtype=np.int64)) > FIXED_CHECK_ELEMENTS:
        return False
    try:
        values = numpy_helper.to_array(weight)
    except Exception:  # values in a data file not read here: taken as learned
        return False
    return bool(values.size) and bool(np.all(np.isfinite(values))) and bool(np.all(values == np.round(values)))


@dataclass(frozen=True)
class SparsityTarget:
    """One weight initializer and how its elements meet the input activation.

    ``channel_axis`` is the weight axis that indexes the input channel or feature (Conv: 1, with
    ``groups`` groups of output channels; ConvTranspose: 0; Gemm: 0, or 1 with ``transB``; MatMul: -2).
    ``activation`` is the node input the weight multiplies, ``activation_axis`` its channel axis there.
    """

    name: str
    op_type: str
    node_name: str
    shape: tuple[int, ...]
    activation: str
    activation_axis: int
    channel_axis: int
    groups: int = 1
    in_body: bool = False
    """Read by a node inside an If/Loop/Scan body (its activation cannot be tapped as a graph output)."""

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def channel_of_elements(self) -> np.ndarray:
        """For every weight element, the input channel it multiplies (same shape as the weight)."""
        shape = self.shape
        axis = self.channel_axis % len(shape)
        index = np.arange(shape[axis]).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        if self.groups > 1:  # Conv: W[M, C/g, ...]; output channel m belongs to group m // (M/g)
            per_group_out = shape[0] // self.groups
            group = (np.arange(shape[0]) // per_group_out).reshape([-1] + [1] * (len(shape) - 1))
            index = group * shape[1] + index
        return np.broadcast_to(index, shape)


def _attr_int(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _target(node: onnx.NodeProto, weight: onnx.TensorProto) -> SparsityTarget | None:
    shape = tuple(int(d) for d in weight.dims)
    common = {"name": weight.name, "op_type": node.op_type, "node_name": node.name or node.output[0], "shape": shape}
    if node.op_type in CONV_OPS and len(shape) >= 3:
        return SparsityTarget(
            **common, activation=node.input[0], activation_axis=1, channel_axis=1, groups=_attr_int(node, "group", 1)
        )
    if node.op_type == "ConvTranspose" and len(shape) >= 3:
        return SparsityTarget(**common, activation=node.input[0], activation_axis=1, channel_axis=0)
    if node.op_type in GEMM_OPS and len(shape) == 2:
        trans_a, trans_b = _attr_int(node, "transA", 0), _attr_int(node, "transB", 0)
        return SparsityTarget(
            **common, activation=node.input[0], activation_axis=0 if trans_a else 1, channel_axis=1 if trans_b else 0
        )
    if node.op_type in MATMUL_OPS and len(shape) >= 2 and _attr_int(node, "transB", 0) == 0:
        return SparsityTarget(**common, activation=node.input[0], activation_axis=-1, channel_axis=-2)
    return None


def sparsity_targets(model: onnx.ModelProto) -> list[SparsityTarget]:
    """The weights pruning targets, in graph order (see the module docstring); nodes inside If/Loop/Scan
    bodies count too when the weight they read is a main-graph initializer (``in_body``)."""
    graph = model.graph
    overridable = {v.name for v in graph.input} if model.ir_version >= 4 else set()
    initializers = {t.name: t for t in graph.initializer if t.name not in overridable}
    found: dict[str, SparsityTarget] = {}
    _collect(graph, initializers, found, in_body=False)
    return list(found.values())


def _collect(
    graph: onnx.GraphProto, initializers: dict[str, onnx.TensorProto], found: dict[str, SparsityTarget], in_body: bool
) -> None:
    for node in graph.node:
        if node.domain in DOMAINS and len(node.input) >= 2:
            weight = initializers.get(node.input[1])
            if weight is not None and weight.data_type in IEEE_FLOAT_TYPES and weight.name not in found:
                target = _target(node, weight)
                if target is not None and target.size > 0 and not fixed_transform(weight):
                    found[weight.name] = dataclasses.replace(target, in_body=in_body)
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
            for body in subgraphs:  # a body's own names hide the outer initializers of the same name
                own = {v.name for v in body.input} | {t.name for t in body.initializer}
                own |= {out for n in body.node for out in n.output}
                _collect(body, {k: v for k, v in initializers.items() if k not in own}, found, in_body=True)


def select(targets: list[SparsityTarget], exclude: list[str]) -> list[SparsityTarget]:
    """``targets`` without those named (weight or node name) in ``exclude``; unknown names are an error."""
    known = {t.name for t in targets} | {t.node_name for t in targets}
    unknown = [name for name in exclude if name not in known]
    if unknown:
        raise SettingsError(f"--exclude {unknown[0]!r} names no prunable weight or node of the model")
    return [t for t in targets if t.name not in exclude and t.node_name not in exclude]
