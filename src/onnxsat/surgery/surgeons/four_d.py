"""4D-ization for accelerators that only run rank-4 tensors (NVIDIA DLA and alike): Olive's ``Non4D*``,
``StandaloneReduceSum``, ``Gather``, ``GatherElements``, ``Flatten`` and
``RemoveIntermediarySqueezeAndUnsqueeze``.

Olive runs these as one pipeline on a model whose tensors the earlier steps already made 4D, so each
of its steps alone can leave an invalid graph (a 4-entry ``perm`` on a 3D tensor). Here every step is
valid on its own: an op rewritten to its 4D form gets its data ``Unsqueeze``d to 4D first and, unless
Olive's documentation says the op's output becomes 4D, ``Squeeze``d back after, so its readers see
the same tensor. Chained steps leave ``Squeeze -> Unsqueeze`` pairs between them, which
``RemoveIntermediarySqueezeAndUnsqueeze`` cancels. Every surgeon here keeps the output values; the ones
whose documentation says an output becomes 4D change that output's shape, never its values in
row-major order; such outputs are re-declared (the model stays valid) and their old declarations
kept in the model's metadata, for ``Non4DModelOutputs`` to squeeze them back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.inputs import fixed_dim
from onnxsat.surgery.graph_edit import constant_value, consumers, copy_model, producers, rename_tensor
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register
from onnxsat.surgery.surgeons._editing import (
    Shape,
    Splice,
    attribute,
    constant_axes,
    inferred_shapes,
    lifted_axis,
    set_attribute,
)

# Where Non4DModelInputs puts the new axes (Olive's convention); the ops whose axis it renumbers
# (ReduceSum, Gather) lift their data the same way so that their axis mapping matches.
INPUT_LIFT = {2: [0, -1], 3: [1]}
# Non4DModelInputs re-declares the graph outputs it turns 4D (so the model stays valid) and keeps
# their original types here, in the model's metadata, for Non4DModelOutputs to restore.
ORIGINAL_OUTPUTS = "onnxsat.non4d.original_outputs"
# Nodes made by ReshapeReduceSum / ReshapeClipReduceSum carry this in their name; the Slice and
# ReduceSum surgeons here leave them alone ("only processes nodes not already transformed").
TRANSFORMED = "transformed"


def _leading(rank: int) -> list[int]:
    """Axes that make a rank-``rank`` tensor 4D by adding leading 1s."""
    return list(range(4 - rank))


def _rewrite_to_4d(
    model: onnx.ModelProto,
    op_type: str,
    rewrite: Callable[[Splice, int, onnx.NodeProto, dict[str, Shape]], bool],
    noun: str,
) -> SurgeryOutcome:
    """The loop every 4D-ization surgeon shares: copy, infer shapes, call ``rewrite`` on each
    ``op_type`` node (it edits through the splice and says whether it changed the node), commit."""
    result = copy_model(model)
    shapes = inferred_shapes(result)
    splice = Splice(result)
    changed = 0
    for index, node in enumerate(result.graph.node):
        if node.op_type == op_type and node.domain in ("", "ai.onnx") and rewrite(splice, index, node, shapes):
            changed += 1
    if not changed:
        return SurgeryOutcome(result, False, f"no {noun}: nothing to make 4D")
    splice.commit()
    redeclare_outputs(result)
    return SurgeryOutcome(result, True, f"made {changed} {op_type} node(s) 4D")


def _rank(shapes: dict[str, Shape], name: str) -> int | None:
    shape = shapes.get(name)
    return None if shape is None else len(shape)


@register
@dataclass
class Non4DModelInputs(Surgeon):
    """Feed every 2D/3D graph input through an ``Unsqueeze`` to 4D (Olive's ``Non4DModelInputs``).

    The input's declared shape stays; its readers get the 4D tensor (2D ``[M, N]`` with ``axes_2d``
    becomes ``[1, M, N, 1]``, 3D ``[B, S, H]`` with ``axes_3d`` becomes ``[B, 1, S, H]``). An
    ``Unsqueeze`` already reading the input is retargeted to these axes unless it already makes 4D.
    Elementwise readers keep their values (their outputs turn 4D, and are re-declared so); readers
    that depend on rank are for the other ``Non4D*`` steps. ``axes_2d`` and ``axes_3d`` are the
    document's fixed ``[0, -1]`` and ``[1]`` made configurable.
    """

    axes_2d: list[int] = field(default_factory=lambda: list(INPUT_LIFT[2]))
    axes_3d: list[int] = field(default_factory=lambda: list(INPUT_LIFT[3]))

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        splice = Splice(result)
        initializer_names = {tensor.name for tensor in graph.initializer}
        readers = consumers(graph)
        changed: list[str] = []
        for graph_input in graph.input:
            rank = len(graph_input.type.tensor_type.shape.dim)
            name = graph_input.name
            if rank not in (2, 3) or name in initializer_names or name not in readers:
                continue
            axes = self.axes_2d if rank == 2 else self.axes_3d
            lifted = None
            for node in readers[name]:
                if node.op_type == "Unsqueeze" and node.input[0] == name:
                    existing = constant_axes(graph, node)
                    if existing is None or len(existing) + rank != 4:
                        splice.set_axes(node, axes)
                        changed.append(name)
                    continue
                if lifted is None:
                    lifted = splice.name(f"{name}_unsqueeze_input")
                    splice.before(0, splice.axes_node("Unsqueeze", name, lifted, axes, f"{name}_unsqueeze"))
                    changed.append(name)
                node.input[:] = [lifted if item == name else item for item in node.input]
        if not changed:
            return SurgeryOutcome(result, False, "no 2D or 3D graph input read by a node: nothing to make 4D")
        splice.commit()
        redeclare_outputs(result)
        return SurgeryOutcome(result, True, f"made graph input(s) {', '.join(dict.fromkeys(changed))} 4D")


def redeclare_outputs(model: onnx.ModelProto) -> None:
    """Declare the outputs whose rank changed with their new shape; remember the old declarations."""
    shapes = inferred_shapes(model, trust_outputs=False)
    originals = _original_outputs(model)
    for output in model.graph.output:
        declared = _declared(output)
        shape = shapes.get(output.name)
        if shape is not None and len(shape) != len(declared):
            originals.setdefault(output.name, declared)
            _declare(output, shape)
    _store_original_outputs(model, originals)


def _declared(value: onnx.ValueInfoProto) -> Shape:
    dims = value.type.tensor_type.shape.dim
    return [size if (size := fixed_dim(dim)) is not None else (dim.dim_param or None) for dim in dims]


def _declare(value: onnx.ValueInfoProto, shape: Shape) -> None:
    dims = value.type.tensor_type.shape.dim
    del dims[:]
    for size in shape:
        dim = dims.add()
        if isinstance(size, int):
            dim.dim_value = size
        elif size:
            dim.dim_param = size


def _original_outputs(model: onnx.ModelProto) -> dict[str, Shape]:
    return next((json.loads(prop.value) for prop in model.metadata_props if prop.key == ORIGINAL_OUTPUTS), {})


def _store_original_outputs(model: onnx.ModelProto, originals: dict[str, Shape]) -> None:
    kept = [prop for prop in model.metadata_props if prop.key != ORIGINAL_OUTPUTS]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    if originals:
        model.metadata_props.add(key=ORIGINAL_OUTPUTS, value=json.dumps(originals))


@register
@dataclass
class Non4DModelOutputs(Surgeon):
    """Squeeze graph outputs declared 2D/3D (or so declared before ``Non4DModelInputs``, which keeps
    their old declarations in the model's metadata) that the 4D-ized graph now computes in 4D.

    A new ``Squeeze`` removes ``squeeze_axes_2d`` / ``squeeze_axes_3d``; when the output already
    comes from a ``Squeeze`` (directly or through a ``Clip``) that ``Squeeze`` is retargeted instead.
    The defaults ``[0, 3]`` and ``[1]`` undo ``Non4DModelInputs``' defaults, so inputs and outputs
    round-trip. Olive hard-codes ``[0, 1]`` / ``[2]`` for new and ``[0, 3]`` for existing squeezes;
    the keys make them configurable. Outputs computed at their declared rank are left alone.
    """

    squeeze_axes_2d: list[int] = field(default_factory=lambda: [0, 3])
    squeeze_axes_3d: list[int] = field(default_factory=lambda: [1])

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        shapes = inferred_shapes(result, trust_outputs=False)
        splice = Splice(result)
        made = producers(graph)
        originals = _original_outputs(result)
        changed: list[str] = []
        for position, graph_output in enumerate(graph.output):
            name = graph_output.name
            if name in originals:
                _declare(graph_output, originals.pop(name))
            rank = len(graph_output.type.tensor_type.shape.dim)
            if rank not in (2, 3):
                continue
            axes = self.squeeze_axes_2d if rank == 2 else self.squeeze_axes_3d
            squeeze = self._existing_squeeze(made, name)
            if squeeze is not None and _rank(shapes, squeeze.input[0]) == 4:
                if constant_axes(graph, squeeze) != axes:
                    splice.set_axes(squeeze, axes)
                    changed.append(name)
            elif _rank(shapes, name) == 4 and all(not isinstance(shapes[name][axis], int) or shapes[name][axis] == 1
                                                  for axis in axes):  # fmt: skip
                computed = splice.name(f"{name}_squeeze_input")
                rename_tensor(graph, name, computed)
                graph.output[position].name = name
                index = list(graph.node).index(made[name])
                splice.after(index, splice.axes_node("Squeeze", computed, name, axes, f"{name}_squeeze"))
                changed.append(name)
        if not changed:
            return SurgeryOutcome(
                copy_model(model), False, "no 2D or 3D graph output computed in 4D: nothing to squeeze"
            )
        _store_original_outputs(result, originals)
        splice.commit()
        return SurgeryOutcome(result, True, f"squeezed graph output(s) {', '.join(changed)} back to their rank")

    @staticmethod
    def _existing_squeeze(made: dict[str, onnx.NodeProto], name: str) -> onnx.NodeProto | None:
        node = made.get(name)
        if node is not None and node.op_type == "Clip":
            node = made.get(node.input[0])
        return node if node is not None and node.op_type == "Squeeze" else None


@register
@dataclass
class Non4DInitializers(Surgeon):
    """Reshape non-4D initializers to 4D where their reader accepts it unchanged:

    - 1D ``[K]`` read only by ``Div``/``Sub``/``Mul`` -> ``[1, 1, 1, K]`` (broadcasting keeps values;
      the product may turn 4D);
    - 2D ``[C, K]`` read only as a ``Conv`` weight -> ``[K, C, 1, 1]`` (transposed: a matmul weight
      ``x @ W`` becomes the equivalent 1x1 convolution, as in Olive's example);
    - 3D read only by ``Add``/``Sub``/``Mul``/``Div`` -> ``[1, ...]``.

    Deviation: Olive also makes 2D Gemm inputs ``[1, 1, K, C]`` and transposes 2D initializers of any
    other reader; Gemm rejects non-2D inputs and the transpose changes e.g. an ``Add``'s values, so
    those are left alone. Initializers with any other reader (``MatMul`` included) are skipped.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        readers = consumers(graph)
        changed: list[str] = []
        for position, tensor in enumerate(graph.initializer):
            uses = [
                (node.op_type, slot)
                for node in readers.get(tensor.name, [])
                for slot, name in enumerate(node.input)
                if name == tensor.name
            ]
            value = self._as_4d(numpy_helper.to_array(tensor), uses)
            if value is not None:
                graph.initializer[position].CopyFrom(numpy_helper.from_array(value, tensor.name))
                changed.append(tensor.name)
        if not changed:
            return SurgeryOutcome(result, False, "no 1D-3D initializer whose readers take it 4D: nothing to do")
        redeclare_outputs(result)
        return SurgeryOutcome(result, True, f"made initializer(s) {', '.join(changed)} 4D")

    @staticmethod
    def _as_4d(value: np.ndarray, uses: list[tuple[str, int]]) -> np.ndarray | None:
        ops = {op for op, _ in uses}
        if not uses:
            return None
        if value.ndim == 1 and ops <= {"Div", "Sub", "Mul"}:
            return value.reshape(1, 1, 1, -1)
        if value.ndim == 2 and set(uses) == {("Conv", 1)}:
            return value.T.reshape(value.shape[1], value.shape[0], 1, 1)
        if value.ndim == 3 and ops <= {"Add", "Sub", "Mul", "Div"}:
            return value[np.newaxis]
        return None


def _constant_input(splice: Splice, node: onnx.NodeProto, position: int) -> np.ndarray | None:
    """The constant at input ``position`` of ``node``, or None (absent or computed)."""
    if len(node.input) <= position or not node.input[position]:
        return None
    return constant_value(splice.graph, node.input[position])


@register
@dataclass
class Non4DReshape(Surgeon):
    """Reshape to 4D where a ``Reshape`` targets a constant 3D shape: a 1 goes in at the first entry
    that is not 0 (``[-1, 512, 768]`` -> ``[1, -1, 512, 768]``; 0 entries copy input dims and keep
    their place), and a ``Squeeze`` of that axis gives the readers the original 3D tensor. Exact."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            target = _constant_input(splice, node, 1)
            if target is None or target.shape != (3,) or not np.any(target != 0):
                return False
            where = int(np.flatnonzero(target)[0])
            node.input[1] = splice.const(f"{node.name or 'reshape'}_shape_4d", np.insert(target, where, 1))
            splice.restore(index, "Squeeze", [where])
            return True

        return _rewrite_to_4d(model, "Reshape", rewrite, "Reshape to a constant 3D shape")


@register
@dataclass
class Non4DExpand(Surgeon):
    """Expand to 4D where an ``Expand`` takes a constant 3D shape: ``[2, 3, 4]`` -> ``[1, 2, 3, 4]``,
    then a ``Squeeze`` of axis 0 gives the readers the original 3D tensor. Exact."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            target = _constant_input(splice, node, 1)
            if target is None or target.shape != (3,):
                return False
            node.input[1] = splice.const(f"{node.name or 'expand'}_shape_4d", np.insert(target, 0, 1))
            splice.restore(index, "Squeeze", [0])
            return True

        return _rewrite_to_4d(model, "Expand", rewrite, "Expand to a constant 3D shape")


@register
@dataclass
class Non4DTranspose(Surgeon):
    """Transpose in 4D: a 2D/3D tensor gets leading 1s (``Unsqueeze``), the permutation becomes
    ``[0, 1, T0 + 2, T1 + 2]`` or ``[0, T0 + 1, T1 + 1, T2 + 1]``, and a ``Squeeze`` of the leading
    axes gives readers the original result. Exact."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            perm = attribute(node, "perm")
            rank = len(perm) if perm is not None else _rank(shapes, node.input[0])  # type: ignore[arg-type]
            if rank not in (2, 3):
                return False
            perm = list(perm) if perm is not None else list(reversed(range(rank)))  # type: ignore[call-overload]
            lead = _leading(rank)
            set_attribute(node, "perm", lead + [axis + len(lead) for axis in perm])
            splice.lift(index, 0, lead)
            splice.restore(index, "Squeeze", lead)
            return True

        return _rewrite_to_4d(model, "Transpose", rewrite, "2D or 3D Transpose")


@register
@dataclass
class Non4DSlice(Surgeon):
    """Slice along ``axes=[-1]`` where a single-axis ``Slice`` cuts the last axis, so it stays right
    however many leading dims 4D-ization adds. Olive rewrites every single-axis Slice to ``[-1]``;
    that changes the values when the axis is not the last one, so those are left alone. Slices made
    by ReshapeReduceSum ("transformed") are skipped, as documented. Exact."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            axes = _constant_input(splice, node, 3)
            rank = _rank(shapes, node.input[0])
            if axes is None or axes.size != 1 or rank is None or TRANSFORMED in node.input[3]:
                return False
            axis = int(axes.ravel()[0])
            if axis == -1 or axis % rank != rank - 1:
                return False
            node.input[3] = splice.const(f"{node.name or 'slice'}_axes", np.array([-1], dtype=np.int64))
            return True

        return _rewrite_to_4d(model, "Slice", rewrite, "Slice along the last axis given as a positive axis")


@register
@dataclass
class Non4DLpNorm(Surgeon):
    """Normalize along ``axis=-1`` where an ``LpNormalization`` normalizes the last axis by a positive
    index, so it stays right after 4D-ization. Olive sets -1 whatever the axis; other axes are left
    alone here because -1 would normalize a different axis. Exact."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            axis = int(attribute(node, "axis", -1))  # type: ignore[call-overload]
            rank = _rank(shapes, node.input[0])
            if axis == -1 or rank is None or axis % rank != rank - 1:
                return False
            set_attribute(node, "axis", -1)
            return True

        return _rewrite_to_4d(model, "LpNormalization", rewrite, "LpNormalization along the last axis by index")


@register
@dataclass
class StandaloneReduceSum(Surgeon):
    """ReduceSum in 4D with ``keepdims=1``: a 2D/3D input is lifted as ``Non4DModelInputs`` does
    (``[0, -1]`` / ``[1]``), which moves axis 1 to 2 (the document's 1 -> 2) and keeps the last axis
    last (the document's "skip [-1]"); a 4D input keeps its axes. The output becomes 4D (its values
    in row-major order are unchanged). ReduceSums made by ReshapeReduceSum ("transformed") are skipped.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            axes = constant_axes(splice.graph, node)
            rank = _rank(shapes, node.input[0])
            if TRANSFORMED in node.name or not axes or rank not in (2, 3, 4):
                return False
            if rank == 4 and attribute(node, "keepdims", 1) == 1:
                return False
            if rank < 4:
                lift = INPUT_LIFT[rank]
                splice.lift(index, 0, lift)
                splice.set_axes(node, [lifted_axis(axis, rank, lift) for axis in axes])
            set_attribute(node, "keepdims", 1)
            return True

        return _rewrite_to_4d(model, "ReduceSum", rewrite, "ReduceSum with constant axes on a 2D-4D input")


@register
@dataclass
class Gather(Surgeon):
    """Gather in 4D with vector indices: a 2D/3D data input is lifted as ``Non4DModelInputs`` does
    (axis 1 -> 2, the document's update), and a constant scalar index ``i`` becomes ``[i]``, so the
    gathered axis stays (size 1) instead of vanishing. The output thus becomes 4D; its values in
    row-major order are unchanged. Gathers with computed indices are left alone (Olive replaces them
    with ``[0]``, which changes the result)."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            indices = _constant_input(splice, node, 1)
            rank = _rank(shapes, node.input[0])
            if indices is None or rank not in (2, 3, 4) or (rank == 4 and indices.ndim > 0):
                return False
            if indices.ndim == 0:
                node.input[1] = splice.const(f"{node.input[1]}_vector", indices.reshape(1))
            if rank < 4:
                lift = INPUT_LIFT[rank]
                splice.lift(index, 0, lift)
                set_attribute(node, "axis", lifted_axis(int(attribute(node, "axis", 0)), rank, lift))  # type: ignore[call-overload]
            return True

        return _rewrite_to_4d(model, "Gather", rewrite, "Gather with constant indices on a 2D-4D input")


@register
@dataclass
class GatherElements(Surgeon):
    """GatherElements in 4D: data and indices of rank 1-3 get leading 1s (constant indices are
    reshaped in place, e.g. ``[12, 64, 64]`` -> ``[1, 12, 64, 64]``; computed ones go through an
    ``Unsqueeze``) and the axis moves with them. The output becomes 4D with the same values.
    (The document's "scalar indices to 1D" cannot occur: GatherElements indices have the data's rank.)
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            rank = _rank(shapes, node.input[0])
            if rank not in (1, 2, 3):
                return False
            lead = _leading(rank)
            indices = _constant_input(splice, node, 1)
            if indices is not None:
                node.input[1] = splice.const(f"{node.input[1]}_4d", indices.reshape((1,) * len(lead) + indices.shape))
            else:
                splice.lift(index, 1, lead)
            splice.lift(index, 0, lead)
            set_attribute(node, "axis", lifted_axis(int(attribute(node, "axis", 0)), rank, lead))  # type: ignore[call-overload]
            return True

        return _rewrite_to_4d(model, "GatherElements", rewrite, "GatherElements on a 1D-3D input")


@register
@dataclass
class Flatten(Surgeon):
    """Replace ``Flatten`` with ``Reshape(shape)``; the default ``[1, 1, 1, -1]`` is the document's
    fixed shape. The output becomes 4D; its values in row-major order are Flatten's (Flatten and
    Reshape both keep the element order)."""

    shape: list[int] = field(default_factory=lambda: [1, 1, 1, -1])

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        def rewrite(splice: Splice, index: int, node: onnx.NodeProto, shapes: dict[str, Shape]) -> bool:
            base = node.name or "flatten"
            target = splice.const(f"{base}_reshape_axes", np.array(self.shape, dtype=np.int64))
            splice.drop(index)
            splice.after(index, splice.node("Reshape", [node.input[0], target], node.output[0], f"{base}_reshape"))
            return True

        return _rewrite_to_4d(model, "Flatten", rewrite, "Flatten")


@register
@dataclass
class RemoveIntermediarySqueezeAndUnsqueeze(Surgeon):
    """Remove ``Squeeze``/``Unsqueeze`` pairs that undo each other in the middle of the graph (such as
    the glue the other 4D-ization steps leave between two 4D-ized ops), never those reading a graph
    input. Deviation: Olive removes every such node, which changes ranks and, for rank-dependent
    readers, values; only cancelling pairs (same axes, one reader, not a graph output) go here. Exact.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        removed = 0
        while self._cancel_one(result):
            removed += 1
        if not removed:
            return SurgeryOutcome(result, False, "no Squeeze/Unsqueeze pair that cancels out: nothing to remove")
        return SurgeryOutcome(result, True, f"removed {removed} cancelling Squeeze/Unsqueeze pair(s)")

    @staticmethod
    def _cancel_one(model: onnx.ModelProto) -> bool:
        graph = model.graph
        shapes = inferred_shapes(model)
        readers = consumers(graph)
        boundary = {item.name for item in [*graph.input, *graph.output]}
        inverse = {"Squeeze": "Unsqueeze", "Unsqueeze": "Squeeze"}
        for index, first in enumerate(graph.node):
            if first.op_type not in inverse or first.input[0] in boundary or first.output[0] in boundary:
                continue
            (second, *others) = readers.get(first.output[0], [None])
            if others or second is None or second.op_type != inverse[first.op_type] or second.output[0] in boundary:
                continue
            rank = _rank(shapes, first.input[0] if first.op_type == "Squeeze" else first.output[0])
            if _normalized(constant_axes(graph, first), rank) != _normalized(constant_axes(graph, second), rank):
                continue
            splice = Splice(model)
            for node_index, node in enumerate(graph.node):
                node.input[:] = [first.input[0] if name == second.output[0] else name for name in node.input]
                if node_index == index or list(node.output) == list(second.output):
                    splice.drop(node_index)
            splice.commit()
            return True
        return False


def _normalized(axes: Sequence[int] | None, rank: int | None) -> list[int] | None:
    """``axes`` made non-negative for a tensor of rank ``rank``; None when that cannot be known."""
    if axes is None:
        return None
    if any(axis < 0 for axis in axes):
        if rank is None:
            return None
        return sorted(axis % rank for axis in axes)
    return sorted(axes)
