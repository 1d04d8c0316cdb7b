"""Remove the chosen channels for real: slice every tensor of every group, fix the numbers that count them.

Per node input, all the positions to drop (from every group that indexes it, on every axis: a Conv
loses output channels as a root and input channels as a leaf) are gathered first, then taken out with
one ``np.take`` per axis, so slices of different groups compose and dtypes are kept. An initializer
read by other node inputs too is not changed in place: the node gets a sliced copy under a new name
(the other readers still need the whole tensor), and initializers no node reads any more are dropped.

Shape-describing numbers (a Reshape target, e.g. the head count of ``[B, S, H, D]``, a Split's sizes, a
Resize's target sizes, a depthwise Conv's ``group``, an RNN's ``hidden_size``) shrink by the pruned channels
times their block. A zero initial state an RNN computed at run time in the old size is disconnected (absent
means zero); ``drop_orphans`` removes what computed it once reconstruction, which needs the node order, is done.
``value_info`` describes the old shapes, so it is cleared and shape inference is run again. Rate 0
changes no tensor: the model computes bit for bit what it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.external_data import tensor_value
from onnxsat.node_order import sort_graph
from onnxsat.proto_fields import subgraph_captures
from onnxsat.pruning.trees import ChannelSlice, Forest

ATTRIBUTE_EDITS = ("group", "hidden_size", "q_num_heads", "kv_num_heads", "num_heads")
"""Shape edits of an integer attribute of that name: a depthwise Conv's groups, an RNN's units, head counts."""

Key = tuple[int, int]
"""(node index, input slot)."""


@dataclass
class Applied:
    model: onnx.ModelProto
    kept: dict[Key, dict[int, np.ndarray]] = field(default_factory=dict)
    """For each sliced node input: axis -> the original positions kept (what reconstruction needs)."""
    orphans: list[str] = field(default_factory=list)
    """Zero initial states a recurrent node no longer reads: ``drop_orphans`` removes what computed them."""


def pruned_channels(channels: int, kept: np.ndarray) -> np.ndarray:
    return np.setdiff1d(np.arange(channels), kept)


def positions(piece: ChannelSlice, channels: np.ndarray) -> np.ndarray:
    """The positions along ``piece.axis`` that ``channels`` of its group occupy."""
    return (piece.offset + channels[:, None] * piece.block + np.arange(piece.block)[None, :]).reshape(-1)


def apply_pruning(
    model: onnx.ModelProto, forest: Forest, kept: Mapping[int, np.ndarray], base_dir: Path | None = None
) -> Applied:
    """A copy of ``model`` (Constant-free, as the forest was built on) keeping ``kept[group]`` channels."""
    pruned_of = {
        group.index: pruned_channels(group.channels, np.asarray(kept[group.index]))
        for group in forest.groups
        if group.index in kept
    }
    drops: dict[Key, dict[int, list[np.ndarray]]] = {}
    for group in forest.groups:
        channels = pruned_of.get(group.index)
        if channels is None or channels.size == 0:
            continue
        for piece in group.slices:
            key = (piece.node_index, piece.input_index)
            drops.setdefault(key, {}).setdefault(piece.axis, []).append(positions(piece, channels))
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    initializers = {t.name: t for t in graph.initializer}
    uses = _uses(graph)
    applied = Applied(result)
    replaced: set[str] = set()
    builders: dict[int, onnx.NodeProto] = {}  # Reshape index -> its own copy of the Concat building its target
    sliced: dict[tuple[str, tuple[tuple[int, bytes], ...]], str] = {}  # (weight, kept per axis) -> the slice's name
    for (node_index, slot), by_axis in sorted(drops.items()):
        node = graph.node[node_index]
        name = node.input[slot]
        value = np.asarray(tensor_value(initializers[name], base_dir))
        kept_axes: dict[int, np.ndarray] = {}
        for axis, parts in sorted(by_axis.items()):
            keep = np.setdiff1d(np.arange(value.shape[axis]), np.concatenate(parts))
            value = np.take(value, keep, axis=axis)
            kept_axes[axis] = keep
        applied.kept[(node_index, slot)] = kept_axes
        key = (name, tuple((axis, keep.tobytes()) for axis, keep in kept_axes.items()))
        if key in sliced:  # another reader took the same channels out of the same weight: one slice for both
            node.input[slot] = sliced[key]
            uses[name] -= 1
            replaced.add(name)
            continue
        _store(graph, initializers, uses, node, slot, value, replaced)
        sliced[key] = node.input[slot]
    for edit in forest.edits:
        removed = sum(pruned_of.get(group, np.empty(0)).size * block for group, block in edit.parts)
        if removed == 0:
            continue
        node = graph.node[edit.node_index]
        if edit.kind in ATTRIBUTE_EDITS:
            for attribute in node.attribute:
                if attribute.name == edit.kind:
                    attribute.i -= removed
            continue
        if edit.kind == "zero-state":  # a zero state of the old size, computed at run time: absent means zero
            applied.orphans.append(node.input[edit.slot])
            uses[node.input[edit.slot]] -= 1
            node.input[edit.slot] = ""
            continue
        if edit.kind == "split-attribute":
            for attribute in node.attribute:
                if attribute.name == "split":
                    attribute.ints[edit.position] -= removed
            continue
        if edit.kind == "concat-piece":  # a Reshape target built at run time: its Concat's constant input
            node = _own_target_builder(graph, edit.node_index, builders, uses)
        # "reshape", "split", "sizes", "concat-piece", "factor": entry ``position`` of input ``slot`` (the Reshape
        # target, the Split sizes, a Resize's sizes, the Concat's constant input, a Mul's factor)
        slot, position = edit.slot, (0 if edit.kind == "factor" else edit.position)
        target = np.asarray(tensor_value(initializers[node.input[slot]], base_dir)).copy()
        target.reshape(-1)[position] -= removed  # a Mul's factor may be a scalar
        _store(graph, initializers, uses, node, slot, target, replaced)
    if builders:  # the copies were appended: put each before its Reshape
        sort_graph(graph)
    _drop_unused(graph, replaced)
    if result.ir_version < 4:
        _list_new_initializers_as_inputs(graph)
    _update_input_shapes(graph)
    return Applied(_reinferred(result), applied.kept, applied.orphans)


def _list_new_initializers_as_inputs(graph: onnx.GraphProto) -> None:
    """IR versions before 4 require every initializer to be a graph input: the copies made for weights
    other nodes share are listed too."""
    listed = {value.name for value in graph.input}
    graph.input.extend(
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in graph.initializer
        if t.name not in listed
    )


def _uses(graph: onnx.GraphProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            counts[name] = counts.get(name, 0) + 1
    for output in graph.output:
        counts[output.name] = counts.get(output.name, 0) + 1
    return counts


def _store(
    graph: onnx.GraphProto,
    initializers: dict[str, onnx.TensorProto],
    uses: dict[str, int],
    node: onnx.NodeProto,
    slot: int,
    value: np.ndarray,
    replaced: set[str],
) -> None:
    """Put ``value`` where input ``slot`` of ``node`` reads it: in place if nothing else reads it, else a copy."""
    name = node.input[slot]
    if uses.get(name, 0) <= 1:
        initializers[name].CopyFrom(numpy_helper.from_array(value, name))
        return
    base = f"{name}__pruned_{node.name or node.output[0]}_{slot}"
    new_name, suffix = base, 0
    while new_name in initializers:
        suffix += 1
        new_name = f"{base}_{suffix}"
    tensor = numpy_helper.from_array(value, new_name)
    graph.initializer.append(tensor)
    initializers[new_name] = graph.initializer[-1]
    uses[name] -= 1
    uses[new_name] = 1
    node.input[slot] = new_name
    replaced.add(name)


def drop_orphans(graph: onnx.GraphProto, names: list[str]) -> None:
    """Remove the nodes that computed ``names`` (dropped zero states) once nothing reads them, and the nodes
    before them only they read (the exporter's ``ConstantOfShape`` and its shape arithmetic), with the
    initializers left unread. Run after reconstruction, which relies on the node order of ``apply_pruning``."""
    uses = _uses(graph)
    for node in graph.node:  # names read inside subgraphs stay
        for name in subgraph_captures(node):
            uses[name] = uses.get(name, 0) + 1
    producer = {output: index for index, node in enumerate(graph.node) for output in node.output if output}
    pending, dropped, freed = list(names), set(), set()
    while pending:
        index = producer.get(pending.pop())
        if index is None or index in dropped or any(uses.get(name, 0) > 0 for name in graph.node[index].output):
            continue
        dropped.add(index)
        for name in graph.node[index].input:
            if name:
                uses[name] -= 1
                freed.add(name)
                pending.append(name)
    for index in sorted(dropped, reverse=True):
        del graph.node[index]
    _drop_unused(graph, freed)


def _drop_unused(graph: onnx.GraphProto, candidates: set[str]) -> None:
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    unused = {name for name in candidates if name not in read}
    if unused:
        kept = [t for t in graph.initializer if t.name not in unused]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        inputs = [v for v in graph.input if v.name not in unused]
        del graph.input[:]
        graph.input.extend(inputs)


def _update_input_shapes(graph: onnx.GraphProto) -> None:
    """Initializers listed as graph inputs (older IRs) declare their shape there too."""
    dims = {t.name: list(t.dims) for t in graph.initializer}
    for value in graph.input:
        if value.name in dims and value.type.HasField("tensor_type"):
            shape = value.type.tensor_type.shape
            if len(shape.dim) == len(dims[value.name]):
                for dim, size in zip(shape.dim, dims[value.name], strict=True):
                    dim.Clear()
                    dim.dim_value = size


def _reinferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without its stale value_info, with shapes inferred again when inference succeeds."""
    del model.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # best effort: ONNX Runtime needs no value_info
        return model


def _own_target_builder(
    graph: onnx.GraphProto, reshape_index: int, builders: dict[int, onnx.NodeProto], uses: dict[str, int]
) -> onnx.NodeProto:
    """The Concat building a Reshape's target at run time, copied for that Reshape alone on first need: equal
    targets of several Reshapes may be one Concat (the normal form merges them), each pruned by its own group.
    The copy is appended; the caller sorts the nodes once all edits are made."""
    if reshape_index in builders:
        return builders[reshape_index]
    reshape = graph.node[reshape_index]
    source = next(n for n in graph.node if reshape.input[1] in n.output)
    own = onnx.NodeProto()
    own.CopyFrom(source)
    own.name = f"{source.name or 'Concat'}_for_{reshape.name or reshape_index}"
    del own.output[:]
    own.output.append(f"{reshape.input[1]}_for_{reshape.name or reshape_index}")
    graph.node.append(own)
    own = graph.node[-1]  # the graph holds a copy: edits go to it
    for name in own.input:
        uses[name] = uses.get(name, 0) + 1
    uses[reshape.input[1]] -= 1
    reshape.input[1] = own.output[0]
    builders[reshape_index] = own
    return own
