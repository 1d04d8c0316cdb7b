"""Reductions reshaped for accelerators: grouped sums split into parallel slices, ReduceMax made 4D."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxsat.surgery.graph_edit import consumers, copy_model, producers
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register
from onnxsat.surgery.surgeons._editing import Splice, attribute, constant_axes, inferred_shapes, set_attribute, static
from onnxsat.surgery.surgeons.four_d import TRANSFORMED, redeclare_outputs


def _split_grouped_sums(model: onnx.ModelProto, with_clip: bool) -> SurgeryOutcome:
    """Rewrite ``x -> Reshape -> [Clip] -> ReduceSum(last axis)`` where the Reshape only splits x's last
    axis ``G * L`` into ``[G, L]``: G parallel ``Slice -> [Clip] -> ReduceSum`` on x, one per group,
    concatenated. The output keeps its shape (an Unsqueeze restores a kept last axis)."""
    result = copy_model(model)
    graph = result.graph
    shapes = inferred_shapes(result)
    made, readers = producers(graph), consumers(graph)
    outputs = {item.name for item in graph.output}
    position = {id(node): index for index, node in enumerate(graph.node)}
    splice = Splice(result)
    split = 0
    for index, reduce in enumerate(graph.node):
        chain = _chain(reduce, made, readers, outputs, with_clip)
        if chain is None or TRANSFORMED in reduce.name:
            continue
        reshape = chain[0]
        x, grouped = static(shapes.get(reshape.input[0])), static(shapes.get(reshape.output[0]))
        axes = constant_axes(graph, reduce)
        if x is None or grouped is None or axes is None or len(grouped) != len(x) + 1:
            continue
        if grouped[:-2] != x[:-1] or grouped[-2] * grouped[-1] != x[-1] or [a % len(grouped) for a in axes] != [len(x)]:
            continue
        groups, width, last = grouped[-2], grouped[-1], len(x) - 1
        base = f"{reduce.name or 'ReduceSum'}_{TRANSFORMED}"
        axis = splice.const(f"{base}_axes", np.array([last], dtype=np.int64))
        sums = []
        for group in range(groups):
            bounds = [splice.const(f"{base}_{group}_{end}", np.array([value], dtype=np.int64))
                      for end, value in (("starts", group * width), ("ends", (group + 1) * width))]  # fmt: skip
            part = splice.name(f"{base}_{group}_slice")
            nodes = [splice.node("Slice", [reshape.input[0], *bounds, axis], part, f"{base}_{group}_Slice")]
            if with_clip:
                clipped = splice.name(f"{base}_{group}_clip")
                nodes.append(splice.node("Clip", [part, *chain[1].input[1:]], clipped, f"{base}_{group}_Clip"))
                part = clipped
            sums.append(splice.name(f"{base}_{group}_sum"))
            nodes.append(splice.axes_node("ReduceSum", part, sums[-1], [last], f"{base}_{group}", keepdims=1))
            splice.after(index, *nodes)
        keep = attribute(reduce, "keepdims", 1)
        joined = splice.name(f"{base}_concat") if keep else reduce.output[0]
        splice.after(index, splice.node("Concat", sums, joined, f"{base}_Concat", axis=last))
        if keep:
            splice.after(index, splice.axes_node("Unsqueeze", joined, reduce.output[0], [len(x)], f"{base}_keepdims"))
        for node in (*chain, reduce):
            splice.drop(position[id(node)])
        split += 1
    pattern = "Reshape-Clip-ReduceSum" if with_clip else "Reshape-ReduceSum"
    if not split:
        return SurgeryOutcome(result, False, f"no {pattern} summing groups of the last axis: nothing to split")
    splice.commit()
    return SurgeryOutcome(result, True, f"split {split} {pattern} pattern(s) into parallel slices")


def _chain(
    reduce: onnx.NodeProto,
    made: dict[str, onnx.NodeProto],
    readers: dict[str, list[onnx.NodeProto]],
    outputs: set[str],
    with_clip: bool,
) -> list[onnx.NodeProto] | None:
    """[Reshape, (Clip)] feeding ``reduce`` alone, or None."""
    if reduce.op_type != "ReduceSum":
        return None
    chain: list[onnx.NodeProto] = []
    tensor = reduce.input[0]
    for op_type in ("Clip", "Reshape") if with_clip else ("Reshape",):
        node = made.get(tensor)
        if node is None or node.op_type != op_type or len(readers.get(tensor, [])) != 1 or tensor in outputs:
            return None
        chain.insert(0, node)
        tensor = node.input[0]
    return chain


@register
@dataclass
class ReshapeReduceSum(Surgeon):
    """Split ``Reshape -> ReduceSum`` (summing groups of x's last axis) into parallel
    ``Slice -> ReduceSum`` paths joined by a ``Concat``, for DLA. Olive hard-codes two slices of 4 on
    axis 3; here the groups come from the Reshape's static shapes (two groups give the document's two
    paths). Exact up to float summation order."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        return _split_grouped_sums(model, with_clip=False)


@register
@dataclass
class ReshapeClipReduceSum(Surgeon):
    """``ReshapeReduceSum`` with a Clip between the Reshape and the ReduceSum: each path is
    ``Slice -> Clip -> ReduceSum`` (Clip is elementwise, so slicing first changes nothing). Exact up
    to float summation order."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        return _split_grouped_sums(model, with_clip=True)


@register
@dataclass
class ReduceMax(Surgeon):
    """ReduceMax over the last axis made 4D: the data gets leading 1s up to 4D, the node reduces
    ``axes=[3]`` with ``keepdims=1``, and a Reshape to ``reshape_shape`` follows. Olive hard-codes
    ``[1, 1, 1, 3600]`` (one model's size); the default ``[1, 1, 1, -1]`` fits any. The output's
    shape becomes ``reshape_shape``; its values in row-major order are unchanged. ReduceMax over other
    axes is left alone (axis 3 would reduce a different one)."""

    reshape_shape: list[int] = field(default_factory=lambda: [1, 1, 1, -1])

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        shapes = inferred_shapes(result)
        readers = consumers(graph)
        splice = Splice(result)
        changed = 0
        for index, node in enumerate(graph.node):
            data = shapes.get(node.input[0]) if node.op_type == "ReduceMax" else None
            axes = constant_axes(graph, node) if data is not None else None
            if data is None or axes is None or len(data) > 4 or [axis % len(data) for axis in axes] != [len(data) - 1]:
                continue
            after = readers.get(node.output[0], [])
            if axes == [3] and attribute(node, "keepdims", 1) == 1 and [n.op_type for n in after] == ["Reshape"]:
                continue  # already made 4D
            if len(data) < 4:
                splice.lift(index, 0, list(range(4 - len(data))))
            splice.set_axes(node, [3])
            set_attribute(node, "keepdims", 1)
            output = node.output[0]
            node.output[0] = splice.name(f"{output}_4d")
            target = splice.const(
                f"{node.name or 'ReduceMax'}_reshape_shape", np.array(self.reshape_shape, dtype=np.int64)
            )
            splice.after(
                index, splice.node("Reshape", [node.output[0], target], output, f"{node.name or 'ReduceMax'}_Reshape")
            )
            changed += 1
        if not changed:
            return SurgeryOutcome(result, False, "no ReduceMax over the last axis: nothing to make 4D")
        splice.commit()
        redeclare_outputs(result)
        return SurgeryOutcome(result, True, f"made {changed} ReduceMax node(s) 4D with a Reshape after")
