"""Private helpers shared by the accelerator-oriented surgeons (4D-ization, quantization, reductions).

They are general graph-editing tools (opset-aware axes, inferred shapes, splicing nodes next to an
existing one) that belong in :mod:`onnxsat.surgery.graph_edit`; they live here while that file is
owned elsewhere. No surgeon is registered in this module.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsat.inputs import fixed_dim
from onnxsat.op_kinds import default_opset_version
from onnxsat.surgery.graph_edit import constant_value, producers, unique_name, used_names

# The opset from which each op takes ``axes`` as its second input instead of an attribute.
AXES_INPUT_SINCE = {"Squeeze": 13, "Unsqueeze": 13, "ReduceSum": 13, "ReduceMax": 18}

Shape = list[int | str | None]


"""The floating-point element types."""


def inferred_value_infos(model: onnx.ModelProto, trust_outputs: bool = True) -> dict[str, onnx.ValueInfoProto]:
    """Every tensor's type as ONNX shape inference sees it (inputs, intermediates, outputs).

    ``trust_outputs=False`` drops the declared output shapes first, so the result says what the graph
    really produces rather than what the (possibly stale) declaration claims.
    """
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    if not trust_outputs:
        for output in probe.graph.output:
            output.type.tensor_type.ClearField("shape")
    # non-strict: what cannot be inferred is simply absent, and callers skip tensors of unknown shape
    probe = onnx.shape_inference.infer_shapes(probe)
    graph = probe.graph
    infos = {item.name: item for item in [*graph.input, *graph.value_info, *graph.output]}
    for tensor in graph.initializer:
        infos[tensor.name] = helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
    return infos


def inferred_shapes(model: onnx.ModelProto, trust_outputs: bool = True) -> dict[str, Shape]:
    """Tensor name -> its inferred dims (int, symbolic name, or None); tensors without a shape are absent."""
    shapes: dict[str, Shape] = {}
    for name, info in inferred_value_infos(model, trust_outputs).items():
        tensor_type = info.type.tensor_type
        if tensor_type.HasField("shape"):
            shapes[name] = [
                size if (size := fixed_dim(dim)) is not None else (dim.dim_param or None)
                for dim in tensor_type.shape.dim
            ]
    return shapes


def static(shape: Shape | None) -> list[int] | None:
    """``shape`` when every dim is a known integer, else None."""
    if shape is None or not all(isinstance(dim, int) for dim in shape):
        return None
    return [int(dim) for dim in shape]  # type: ignore[arg-type]


def attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    """The value of ``node``'s attribute ``name``, or ``default``."""
    for item in node.attribute:
        if item.name == name:
            return helper.get_attribute_value(item)
    return default


def set_attribute(node: onnx.NodeProto, name: str, value: object) -> None:
    """Set (or add) ``node``'s attribute ``name``."""
    for index, item in enumerate(node.attribute):
        if item.name == name:
            del node.attribute[index]
            break
    node.attribute.append(helper.make_attribute(name, value))


def constant_axes(graph: onnx.GraphProto, node: onnx.NodeProto) -> list[int] | None:
    """``node``'s axes when they are known constants (attribute or second input); None otherwise."""
    axes = attribute(node, "axes")
    if axes is not None:
        return [int(axis) for axis in axes]  # type: ignore[union-attr]
    if len(node.input) > 1 and node.input[1]:
        value = constant_value(graph, node.input[1])
        return None if value is None else [int(axis) for axis in np.ravel(value)]
    return None


def lifted_axis(axis: int, rank: int, lift: Sequence[int]) -> int:
    """Where axis ``axis`` of a rank-``rank`` tensor ends up after ``Unsqueeze(axes=lift)``."""
    out_rank = rank + len(lift)
    inserted = {position % out_rank for position in lift}
    kept = [position for position in range(out_rank) if position not in inserted]
    return kept[axis % rank]


class Splice:
    """Edits to ``model``'s main graph: new nodes placed before or after an existing node (by index),
    nodes dropped, initializers added, all with fresh names. Nothing is reordered until :meth:`commit`.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.opset = default_opset_version(model)
        self.taken = used_names(self.graph)
        self._before: dict[int, list[onnx.NodeProto]] = {}
        self._after: dict[int, list[onnx.NodeProto]] = {}
        self._dropped: set[int] = set()

    def name(self, base: str) -> str:
        return unique_name(self.graph, base, self.taken)

    def const(self, base: str, value: np.ndarray) -> str:
        """Add ``value`` as an initializer under a fresh name based on ``base``; return the name."""
        name = self.name(base)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op_type: str, inputs: Sequence[str], output: str, base: str, **attrs: object) -> onnx.NodeProto:
        return helper.make_node(op_type, list(inputs), [output], name=self.name(base), **attrs)

    def axes_node(
        self, op_type: str, data: str, output: str, axes: Sequence[int], base: str, **attrs: object
    ) -> onnx.NodeProto:
        """``op_type(data, axes)`` with ``axes`` as an input or an attribute, whichever the opset wants."""
        if self.opset >= AXES_INPUT_SINCE[op_type]:
            axes_name = self.const(f"{base}_axes", np.array(axes, dtype=np.int64))
            return self.node(op_type, [data, axes_name], output, base, **attrs)
        return self.node(op_type, [data], output, base, axes=list(axes), **attrs)

    def set_axes(self, node: onnx.NodeProto, axes: Sequence[int]) -> None:
        """Point ``node`` (a Squeeze, Unsqueeze or Reduce*) at new constant ``axes``, opset-aware."""
        if self.opset >= AXES_INPUT_SINCE[node.op_type]:
            axes_name = self.const(f"{node.name or node.op_type}_axes", np.array(axes, dtype=np.int64))
            if len(node.input) > 1:
                node.input[1] = axes_name
            else:
                node.input.append(axes_name)
        else:
            set_attribute(node, "axes", list(axes))

    def before(self, index: int, *nodes: onnx.NodeProto) -> None:
        self._before.setdefault(index, []).extend(nodes)

    def after(self, index: int, *nodes: onnx.NodeProto) -> None:
        self._after.setdefault(index, []).extend(nodes)

    def drop(self, index: int) -> None:
        self._dropped.add(index)

    def lift(self, index: int, input_index: int, axes: Sequence[int]) -> None:
        """Feed input ``input_index`` of node ``index`` through ``Unsqueeze(axes)`` (raising its rank)."""
        node = self.graph.node[index]
        source = node.input[input_index]
        lifted = self.name(f"{source}_4d")
        self.before(index, self.axes_node("Unsqueeze", source, lifted, axes, f"{node.name or node.op_type}_lift"))
        node.input[input_index] = lifted

    def restore(self, index: int, op_type: str, axes: Sequence[int]) -> None:
        """Give node ``index``'s first output a fresh name and recreate the old one from it with
        ``op_type(axes)`` (a Squeeze undoing :meth:`lift`), so every reader sees the original tensor."""
        node = self.graph.node[index]
        original = node.output[0]
        node.output[0] = self.name(f"{original}_4d")
        self.after(index, self.axes_node(op_type, node.output[0], original, axes, f"{node.name or node.op_type}_back"))

    def commit(self) -> None:
        """Rebuild the node list with every insertion in place (topological order is kept)."""
        nodes: list[onnx.NodeProto] = []
        for index, node in enumerate(self.graph.node):
            nodes.extend(self._before.get(index, []))
            if index not in self._dropped:
                nodes.append(node)
            nodes.extend(self._after.get(index, []))
        copies = []
        for node in nodes:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copies.append(copy)
        del self.graph.node[:]
        self.graph.node.extend(copies)


def reroute(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Make every node that reads ``old`` read ``new`` instead (graph outputs are left to the caller)."""
    for node in graph.node:
        for position, name in enumerate(node.input):
            if name == old:
                node.input[position] = new


def bypass(graph: onnx.GraphProto, output: str, source: str, splice: Splice, index: int) -> None:
    """Replace tensor ``output`` by ``source`` (the node at ``index`` that made ``output`` goes away).

    A graph output keeps its name: the source's producer is renamed to it when nothing else depends on
    the source's name, else an Identity at ``index`` copies it.
    """
    graph_outputs = {item.name for item in graph.output}
    if output not in graph_outputs:
        reroute(graph, output, source)
        return
    made_by_node = source in producers(graph)
    boundary = {item.name for item in graph.input} | graph_outputs
    if made_by_node and source not in boundary:
        for node in graph.node:
            node.output[:] = [output if name == source else name for name in node.output]
        reroute(graph, source, output)
    else:
        splice.before(index, splice.node("Identity", [source], output, f"{output}_identity"))
