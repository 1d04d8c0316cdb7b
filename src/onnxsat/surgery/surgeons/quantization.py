"""QuantizeLinear/DequantizeLinear clean-ups for runtimes that want float graphs with range limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.surgery.graph_edit import constant_value, consumers, copy_model, drop_unused_initializers, initializers
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register
from onnxsat.surgery.surgeons._editing import Splice, attribute, bypass


def _next_pair(graph: onnx.GraphProto, skip: set[int]) -> tuple[int, int] | None:
    """Indices of the first QuantizeLinear -> DequantizeLinear pair (the Q's output read only by that
    DQ, and not a graph output) whose Q is not in ``skip``."""
    readers = consumers(graph)
    outputs = {item.name for item in graph.output}
    position = {id(node): index for index, node in enumerate(graph.node)}
    for index, node in enumerate(graph.node):
        if node.op_type != "QuantizeLinear" or index in skip or node.output[0] in outputs:
            continue
        (dq, *others) = readers.get(node.output[0], [None])
        if dq is not None and not others and dq.op_type == "DequantizeLinear" and dq.input[0] == node.output[0]:
            return index, position[id(dq)]
    return None


def _clip_range(graph: onnx.GraphProto, q: onnx.NodeProto, dq: onnx.NodeProto) -> tuple[float, float] | None:
    """The float range a Q -> DQ pair lets through: ``(qmin - zp) * scale`` to ``(qmax - zp) * scale``.

    None unless both nodes use the same constant scalar scale and zero point (a per-channel pair has no
    single range, and a pair with different parameters is not a range limit).
    """
    params = []
    for node in (q, dq):
        scale = constant_value(graph, node.input[1])
        zero = constant_value(graph, node.input[2]) if len(node.input) > 2 and node.input[2] else None
        params.append((scale, zero))
    (scale, zero), (dq_scale, dq_zero) = params
    if scale is None or scale.size != 1 or dq_scale is None or not np.array_equal(scale, dq_scale):
        return None
    if (zero is None) != (dq_zero is None) or (zero is not None and not np.array_equal(zero, dq_zero)):
        return None
    if zero is None:
        zero = np.zeros((), dtype=onnx.helper.tensor_dtype_to_np_dtype(int(attribute(q, "output_dtype", 2))))  # type: ignore[call-overload]
    if zero.size != 1 or not np.issubdtype(zero.dtype, np.integer):
        return None
    limits = np.iinfo(zero.dtype)
    step, offset = float(scale.ravel()[0]), int(zero.ravel()[0])
    return (limits.min - offset) * step, (limits.max - offset) * step


def _clip(splice: Splice, source: str, output: str, low: float, high: float, base: str) -> onnx.NodeProto:
    """``Clip(source, low, high) -> output``; bounds as inputs from opset 11, attributes before."""
    if splice.opset >= 11:
        bounds = [splice.const(f"{base}_clip_{end}", np.array(value, dtype=np.float32)) for end, value in
                  (("min", low), ("max", high))]  # fmt: skip
        return splice.node("Clip", [source, *bounds], output, f"{base}_clip")
    return splice.node("Clip", [source], output, f"{base}_clip", min=low, max=high)


def _replace_pairs(model: onnx.ModelProto, clip_when: str) -> tuple[onnx.ModelProto, int, int]:
    """Remove every Q -> DQ pair, putting a Clip in its place where ``clip_when`` says ("always", "never" or
    "inputs": only pairs reading a graph input). Pairs that need a Clip but have no single range stay.
    Returns the copy, the pairs replaced and the pairs left."""
    result = copy_model(model)
    graph = result.graph
    inputs = {item.name for item in graph.input}
    left: set[int] = set()
    replaced = 0
    while (pair := _next_pair(graph, left)) is not None:
        q_index, dq_index = pair
        q, dq = graph.node[q_index], graph.node[dq_index]
        splice = Splice(result)
        if clip_when == "always" or (clip_when == "inputs" and q.input[0] in inputs):
            bounds = _clip_range(graph, q, dq)
            if bounds is None:
                left.add(q_index)
                continue
            splice.after(dq_index, _clip(splice, q.input[0], dq.output[0], *bounds, dq.name or dq.output[0]))
        else:
            bypass(graph, dq.output[0], q.input[0], splice, dq_index)
        splice.drop(q_index)
        splice.drop(dq_index)
        splice.commit()
        left = {index - sum(1 for gone in (q_index, dq_index) if gone < index) for index in left}
        replaced += 1
    drop_unused_initializers(graph)
    return result, replaced, len(left)


@register
@dataclass
class RemoveQDQ(Surgeon):
    """Remove QuantizeLinear -> DequantizeLinear pairs, joining what they connected (chains of pairs
    collapse; a graph output keeps its name). With ``keep_clip_after_inputs`` a pair reading a graph
    input becomes a Clip to its quantization range instead.

    Not exact: the result computes in float what the QDQ model rounded to the quantization grid, so
    each removed pair's tensor differs by up to half a quantization step (more where the QDQ model
    saturated; a kept Clip keeps the saturation).
    """

    exact: ClassVar[bool] = False
    keep_clip_after_inputs: bool = False

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result, replaced, left = _replace_pairs(model, "inputs" if self.keep_clip_after_inputs else "never")
        if not replaced:
            return SurgeryOutcome(result, False, "no QuantizeLinear followed by DequantizeLinear: nothing to remove")
        kept = f"; {left} pair(s) on inputs kept (no single clip range)" if left else ""
        return SurgeryOutcome(result, True, f"removed {replaced} QuantizeLinear/DequantizeLinear pair(s){kept}")


@register
@dataclass
class QDQToClip(Surgeon):
    """Replace QuantizeLinear -> DequantizeLinear pairs with a Clip to the same range,
    ``[(qmin - zero_point) * scale, (qmax - zero_point) * scale]`` (e.g. scale 0.1, uint8 zero point
    128: [-12.8, 12.7]). Only pairs with one constant scalar scale and zero point shared by both nodes
    have such a range; per-channel pairs are left in place.

    Not exact: the Clip keeps the saturation but not the rounding, so each tensor differs from the QDQ
    model's by at most half a quantization step (``scale / 2``).
    """

    exact: ClassVar[bool] = False

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result, replaced, left = _replace_pairs(model, "always")
        if not replaced:
            reason = (
                f"{left} pair(s) without a single range" if left else "no QuantizeLinear followed by DequantizeLinear"
            )
            return SurgeryOutcome(result, False, f"{reason}: nothing to replace with Clip")
        kept = f"; {left} per-channel pair(s) kept" if left else ""
        return SurgeryOutcome(
            result, True, f"replaced {replaced} QuantizeLinear/DequantizeLinear pair(s) with Clip{kept}"
        )


@register
@dataclass
class RemoveDeqLin(Surgeon):
    """Fold DequantizeLinear nodes of constant (integer) initializers into float initializers,
    ``(x - zero_point) * scale`` computed once, per-tensor or per-axis. Exact: the same arithmetic the
    runtime would do. Blocked dequantization and DQs producing a graph output are left alone."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        constants = initializers(graph)
        outputs = {item.name for item in graph.output}
        splice = Splice(result)
        folded = 0
        for index, node in enumerate(graph.node):
            if node.op_type != "DequantizeLinear" or node.input[0] not in constants or node.output[0] in outputs:
                continue
            value = self._dequantized(graph, node, numpy_helper.to_array(constants[node.input[0]]))
            if value is None:
                continue
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            splice.drop(index)
            folded += 1
        if not folded:
            return SurgeryOutcome(result, False, "no DequantizeLinear of a constant initializer: nothing to fold")
        splice.commit()
        drop_unused_initializers(graph)
        return SurgeryOutcome(result, True, f"folded {folded} DequantizeLinear node(s) into float initializers")

    @staticmethod
    def _dequantized(graph: onnx.GraphProto, node: onnx.NodeProto, x: np.ndarray) -> np.ndarray | None:
        scale = constant_value(graph, node.input[1])
        zero = constant_value(graph, node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(())
        if scale is None or zero is None or not np.issubdtype(x.dtype, np.integer) or attribute(node, "block_size", 0):
            return None
        if scale.ndim == 1 and x.ndim > 0:  # per-axis: line the parameters up with the axis
            shape = [1] * x.ndim
            shape[int(attribute(node, "axis", 1)) % x.ndim] = -1  # type: ignore[call-overload]
            scale, zero = scale.reshape(shape), zero.reshape(shape) if zero.ndim else zero
        return ((x.astype(np.int32) - zero.astype(np.int32)) * scale).astype(scale.dtype)
