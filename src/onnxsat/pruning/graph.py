"""What the tree walk needs to know about a graph: constants, consumers, inferred shapes, attributes.

Pruning works on the model in normal form (``onnxsat.normal_form``: Constant nodes read as initializers),
so a weight or a Reshape target is always found, read and replaced in one place. Initializers that are also
graph inputs (IR >= 4) are not constants: a runtime may feed other values, of other shapes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from onnxsat import custom_ops
from onnxsat.external_data import has_external_data, inference_view, tensor_value
from onnxsat.inputs import declared_dims, dim_expression, fixed_dim, random_inputs
from onnxsat.op_kinds import DEFAULT_DOMAINS, default_opset_version
from onnxsat.proto_fields import bodies_of
from onnxsat.pruning.layout import Dim

ZERO_KEEPING = frozenset(
    {"Identity", "Cast", "Slice", "Gather", "Squeeze", "Unsqueeze", "Expand", "Tile", "Reshape", "Transpose", "Flatten"}
)
"""Ops whose output elements are elements of their first input: zeros in, zeros out."""


def attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    """An attribute's value (ints, floats, lists, strings decoded), or ``default``."""
    for attribute in node.attribute:
        if attribute.name == name:
            value = onnx.helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return default


def node_label(node: onnx.NodeProto) -> str:
    """A node's name, or its first output when it has none (many exports leave names empty)."""
    return node.name or (node.output[0] if node.output else node.op_type)


class GraphIndex:
    """Lookups over one (Constant-free) model: never changes the model."""

    def __init__(self, model: onnx.ModelProto, base_dir: Path | None = None) -> None:
        self.model = model
        self.base_dir = base_dir
        graph = model.graph
        overridable = {v.name for v in graph.input} if model.ir_version >= 4 else set()
        self.initializers = {t.name: t for t in graph.initializer}
        self.constants = {name: t for name, t in self.initializers.items() if name not in overridable}
        self.outputs = {o.name for o in graph.output}
        self.consumers: dict[str, list[tuple[int, int]]] = {}
        self.producers: dict[str, onnx.NodeProto] = {}
        for index, node in enumerate(graph.node):
            for slot, name in enumerate(node.input):
                if name:
                    self.consumers.setdefault(name, []).append((index, slot))
            self.producers.update((name, node) for name in node.output if name)
        self.subgraph_names = _subgraph_references(graph)
        self.opset = default_opset_version(model)
        self.shapes = infer_shapes(model)
        self._run_ranks: dict[str, int] | None = None
        self._run_ones: dict[str, set[int]] | None = None
        self._values: dict[str, np.ndarray] = {}

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def value(self, name: str) -> np.ndarray:
        """A constant's value (read once, external data included)."""
        if name not in self._values:
            self._values[name] = np.asarray(tensor_value(self.constants[name], self.base_dir))
        return self._values[name]

    def shape(self, name: str) -> list[Dim] | None:
        if name in self.constants:
            return [int(d) for d in self.constants[name].dims]
        return self.shapes.get(name)

    def rank(self, name: str) -> int | None:
        """The rank from the inferred shape; where inference lost it (after ``ai.onnx.ml`` or contrib ops),
        from one run in ONNX Runtime (:func:`run_ranks`, made on first need)."""
        shape = self.shape(name)
        if shape is not None:
            return len(shape)
        if self._run_ranks is None:
            on_disk = has_external_data(self.model)  # ONNX Runtime cannot run its bytes without the data
            self._run_ranks = {} if on_disk else run_ranks(self.model, self.shapes)
        return self._run_ranks.get(name)

    def int_values(self, name: str) -> list[int] | None:
        """A small integer constant as a list (axes, pads, a Reshape target), or None if not constant."""
        if not name or name not in self.constants:
            return None
        return [int(v) for v in self.value(name).reshape(-1)]

    def broadcast_dim(self, name: str, axis: int) -> bool:
        """Whether dim ``axis`` of ``name`` is a fixed 1 (it broadcasts): as inferred, or, where inference
        left it symbolic (an attention mask expanded to ``[batch, 1, seq, seq]`` at run time), 1 in two runs
        at different dynamic sizes (:func:`run_ones`, made on first need)."""
        shape = self.shape(name)
        if shape is not None and 0 <= axis < len(shape) and shape[axis] == 1:
            return True
        if self._run_ones is None:
            on_disk = has_external_data(self.model)  # ONNX Runtime cannot run its bytes without the data
            self._run_ones = {} if on_disk else run_ones(self.model, self.shapes)
        return axis in self._run_ones.get(name, set())

    def target_entries(self, name: str) -> list[int | None] | None:
        """A shape vector entry by entry (a Reshape target): constant entries as ints, entries computed at run
        time None (PyTorch's ``view(x.size(0), -1, 4, 32)``: a Concat of a size read off a Shape and
        constants). None when it is neither a constant nor such a Concat of pieces of known lengths."""
        values = self.int_values(name)
        if values is not None:
            return values
        node = self.producers.get(name)
        if (
            node is None
            or node.op_type != "Concat"
            or node.domain not in DEFAULT_DOMAINS
            or attr(node, "axis") not in (0, -1)
        ):
            return None
        entries: list[int | None] = []
        for piece in node.input:
            values = self.int_values(piece)
            shape = self.shape(piece)
            if values is None and (shape is None or len(shape) != 1 or not isinstance(shape[0], int)):
                return None
            entries += values if values is not None else [None] * int(shape[0])  # type: ignore[index]
        return entries

    def size_source(self, name: str, position: int) -> tuple[str, int] | None:
        """(tensor, dim) whose run-time size entry ``position`` of shape vector ``name`` reads, when it is read
        off a Shape: ``Shape(t)``, ``Slice(Shape(t), a, b)``, ``Unsqueeze(Gather(Shape(t), i))`` or a Concat
        of those (``F.interpolate(x, size=y.shape[-2:])`` sizes ``Concat(Slice(Shape(x), 0, 2), ...)``)."""
        node = self.producers.get(name)
        if node is None or node.domain not in DEFAULT_DOMAINS:
            return None
        if node.op_type == "Concat":
            found = self.concat_piece(node, position)
            return self.size_source(node.input[found[0]], found[1]) if found is not None else None
        if node.op_type == "Shape":
            rank, first, end = self.rank(node.input[0]), attr(node, "start", 0), attr(node, "end")
            if rank is None or not isinstance(first, int) or (end is not None and end != rank):
                return None
            dim = (first + rank if first < 0 else first) + position
            return (node.input[0], dim) if 0 <= dim < rank else None
        if node.op_type == "Slice":
            starts = self.int_values(node.input[1]) if len(node.input) > 1 else None
            axes = self.int_values(node.input[3]) if len(node.input) > 3 and node.input[3] else [0]
            steps = self.int_values(node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
            if starts is None or len(starts) != 1 or axes not in ([0], [-1]) or steps != [1]:
                return None
            first, length = starts[0], (self.shape(node.input[0]) or [None])[0]
            if first < 0:  # from the end, clamped to the start (PyTorch writes INT64_MIN for "from the start")
                if not isinstance(length, int):
                    return None
                first = max(0, first + length)
            return self.size_source(node.input[0], first + position)
        if node.op_type == "Unsqueeze" and position == 0:
            gather = self.producers.get(node.input[0])
            if gather is None or gather.op_type != "Gather" or gather.domain not in DEFAULT_DOMAINS:
                return None
            index = self.int_values(gather.input[1])
            if index is None or len(index) != 1 or index[0] < 0:
                return None
            return self.size_source(gather.input[0], index[0])
        return None

    def scaled_piece(self, name: str, position: int) -> tuple[onnx.NodeProto, int, int] | None:
        """(Mul node, slot of its constant, the constant) when entry ``position`` of shape vector ``name`` is a
        run-time size times a one-element integer constant: ``Unsqueeze(Mul(batch, H))`` in a Concat, as
        TorchScript writes ``view(S, bsz * num_heads, D)``."""
        node = self.producers.get(name)
        found = self.concat_piece(node, position) if node is not None and node.op_type == "Concat" else None
        if found is None or found[1] != 0:
            return None
        assert node is not None
        piece = self.producers.get(node.input[found[0]])
        if piece is not None and piece.op_type == "Unsqueeze" and piece.domain in DEFAULT_DOMAINS:
            piece = self.producers.get(piece.input[0])
        if piece is None or piece.op_type != "Mul" or piece.domain not in DEFAULT_DOMAINS:
            return None
        for slot in (0, 1):
            values = self.int_values(piece.input[slot])
            if values is not None and len(values) == 1 and self.int_values(piece.input[1 - slot]) is None:
                return piece, slot, values[0]
        return None

    def target_piece(self, name: str, position: int) -> tuple[int, int] | None:
        """(input slot, offset in it) of the constant input of the Concat computing shape vector ``name`` that
        holds its entry ``position``: what a shape edit changes when the vector is built at run time. None
        when that entry is not in a constant input."""
        node = self.producers.get(name)
        found = self.concat_piece(node, position) if node is not None and node.op_type == "Concat" else None
        return found if found is not None and self.int_values(node.input[found[0]]) is not None else None

    def concat_piece(self, node: onnx.NodeProto, position: int) -> tuple[int, int] | None:
        """(input slot, offset in it) of the input of the 1-D Concat ``node`` that holds its output entry
        ``position``; None when an input before it has no known length."""
        start = 0
        for slot, piece in enumerate(node.input):
            shape = self.shape(piece)
            if not shape or not isinstance(shape[0], int):
                return None
            if start <= position < start + shape[0]:
                return slot, position - start
            start += shape[0]
        return None

    def from_constants(self, name: str) -> bool:
        """``name`` is computed by nodes reading constants alone (constant folding would make it one)."""
        pending, seen = [name], set()
        while pending:
            current = pending.pop()
            if current in seen or self.is_constant(current):
                continue
            seen.add(current)
            node = self.producers.get(current)
            if node is None or not node.input or next(bodies_of(node), None) is not None:
                return False  # a graph input, a random generator, or a control-flow node
            pending.extend(n for n in node.input if n)
        return True

    def is_zero(self, name: str) -> bool:
        """``name`` holds only zeros whatever the inputs: a constant of zeros, a ConstantOfShape of 0, or those
        moved by ops that only pick or copy elements (PyTorch's default RNN state: ``Slice`` of
        ``ConstantOfShape(Concat(layers, batch, H))``, its size read off the input at run time)."""
        if self.is_constant(name):
            return not np.any(self.value(name))
        node = self.producers.get(name)
        if node is None or node.domain not in DEFAULT_DOMAINS:
            return False
        if node.op_type == "ConstantOfShape":
            value = attr(node, "value")
            return value is None or not np.any(numpy_helper.to_array(value))  # type: ignore[arg-type]
        if node.op_type == "Concat":
            return all(self.is_zero(piece) for piece in node.input if piece)
        return node.op_type in ZERO_KEEPING and bool(node.input) and self.is_zero(node.input[0])

    def dynamic_inputs(self) -> bool:
        """Whether a graph input (not a weight) declares a dynamic dim: shapes computed from it then fold
        only once its sizes are fixed."""
        return any(
            fixed_dim(dim) is None
            for value in self.model.graph.input
            if value.name not in self.initializers
            for dim in declared_dims(value) or []
        )

    def uses(self, name: str) -> int:
        """How many node inputs read ``name`` (a graph output counts as one more)."""
        return len(self.consumers.get(name, [])) + (name in self.outputs)


def infer_shapes(model: onnx.ModelProto) -> dict[str, list[Dim]]:
    """Every value's shape ONNX shape inference can tell, with data propagation for Reshape targets."""
    view = inference_view(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(view, strict_mode=False, data_prop=True)
    except Exception:  # inference is best effort: an unknown shape only makes a group unprunable
        inferred = view
    shapes: dict[str, list[Dim]] = {}
    graph = inferred.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            shapes[value.name] = [_dim(d) for d in tensor_type.shape.dim]
    return shapes


def run_ranks(model: onnx.ModelProto, shapes: dict[str, list[Dim]]) -> dict[str, int]:
    """Ranks of the main-graph tensors ONNX's inference gave no shape (after ``ai.onnx.ml`` ops, contrib
    ops), from one run in ONNX Runtime on seeded random inputs; every dim stays unknown (one run cannot
    tell a fixed size from a dynamic one), so only what needs a rank (a MatMul's output channel axis)
    gains from it. Best effort: a model that needs given inputs or does not run tells nothing."""
    names = [name for node in model.graph.node for name in node.output if name and name not in shapes]
    if not names:
        return {}
    try:
        values = _probe_session(model, names).run(names, random_inputs(model))
    except Exception:  # any refusal means: no ranks from running
        return {}
    return {name: value.ndim for name, value in zip(names, values, strict=True) if isinstance(value, np.ndarray)}


def _probe_session(model: onnx.ModelProto, names: list[str]) -> ort.InferenceSession:
    """A session of ``model`` (ORT's optimizations off) that also returns the tensors ``names``."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {value.name for value in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in names if name not in outputs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4  # a probe that fails tells nothing; ORT's coloured error line would reach stderr
    custom_ops.register(options)
    return ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])


ONES_PROBE_SIZES = (2, 3)
"""Every dynamic input dim takes each of these sizes in turn (a sum of names, their sum) for :func:`run_ones`."""


def run_ones(model: onnx.ModelProto, shapes: dict[str, list[Dim]]) -> dict[str, set[int]]:
    """The dims that are 1 in two ONNX Runtime runs with every dynamic input dim at a different size above 1,
    by tensor, for the main-graph tensors whose inferred shape has a dim that is not a known int: such a
    dim is a fixed 1, not a size that happened to be 1. Best effort: a model that does not run at those
    sizes, or needs given inputs, tells nothing; nor is a model with custom ops run on random values: they
    may end the process on values they cannot take (onnxruntime-extensions' image decoder exits on bytes that
    are no image)."""
    if custom_ops.libraries():
        return {}
    names = [
        name
        for node in model.graph.node
        for name in node.output
        if name and any(not isinstance(d, int) for d in shapes.get(name) or [None])
    ]
    if not names:
        return {}
    ones: dict[str, set[int]] | None = None
    try:
        session = _probe_session(model, names)
        for size in ONES_PROBE_SIZES:
            values = session.run(names, random_inputs(model, _every_dynamic_dim_at(model, size)))
            found = {
                name: {axis for axis, dim in enumerate(value.shape) if dim == 1}
                for name, value in zip(names, values, strict=True)
                if isinstance(value, np.ndarray)
            }
            ones = found if ones is None else {n: ones[n] & found[n] for n in ones if n in found}
    except Exception:  # any refusal means: nothing learnt from running
        return {}
    return ones or {}


def _every_dynamic_dim_at(model: onnx.ModelProto, size: int) -> dict[str, list[int]]:
    """Input shapes with every dynamic dim at ``size`` (a dim declared as a sum of names: that sum)."""
    weights = {t.name for t in model.graph.initializer}
    shapes = {}
    for value in model.graph.input:
        declared = declared_dims(value)
        if value.name in weights or declared is None:
            continue
        shapes[value.name] = [  # every name is ``size``: a sum of names is their sum
            d.dim_value if fixed_dim(d) is not None else dim_expression(d.dim_param, {}, size) or size for d in declared
        ]
    return shapes


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    if dim.HasField("dim_param"):
        return dim.dim_param
    return None


def _subgraph_references(graph: onnx.GraphProto) -> set[str]:
    """Names read inside If/Loop/Scan bodies: a tracked tensor used there cannot be followed."""
    names: set[str] = set()
    for node in graph.node:
        for sub in bodies_of(node):
            for inner in sub.node:
                names.update(inner.input)
            names |= _subgraph_references(sub)
    return names
