"""Precision surgeons: a float16 model computed in float32, and float32 weights stored in float16.

Exports made for GPUs (``model.half()``, a ``--half`` flag) compute in float16. ONNX Runtime's CPU
kernels and its quantizer work in float32: the quantizer writes float16 scales that ONNX Runtime
refuses. Upcasting is the step before quantizing such a model, and on CPU it costs nothing at run
time. What the quantizer then leaves in float would double in size on disk; storing it back in float16
behind a Cast gives the file its size again without changing a bit of the outputs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.proto_fields import all_graphs
from onnxsat.surgery.graph_edit import copy_model, rename_tensor, unique_name, used_names
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register

_DTYPE_ATTRIBUTES = {"Cast": "to", "RandomNormal": "dtype", "RandomUniform": "dtype", "EyeLike": "dtype",
                     "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype"}  # fmt: skip
"""Ops whose attribute names the element type they produce."""

_TENSOR_ATTRIBUTES = {"Constant": "value", "ConstantOfShape": "value"}
"""Ops whose tensor attribute holds the value they produce."""


def _upcast_tensor(tensor: onnx.TensorProto) -> bool:
    """Turn a float16 tensor into float32 in place (name and dims kept); whether it was float16."""
    if tensor.data_type != TensorProto.FLOAT16:
        return False
    tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name))
    return True


def _upcast_type(type_proto: onnx.TypeProto) -> bool:
    """Turn float16 element types inside ``type_proto`` (tensors, sequences, optionals, map values) into float32."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tensor_type = getattr(type_proto, kind)
        if tensor_type.elem_type == TensorProto.FLOAT16:
            tensor_type.elem_type = TensorProto.FLOAT
            return True
        return False
    if kind in ("sequence_type", "optional_type"):
        return _upcast_type(getattr(type_proto, kind).elem_type)
    if kind == "map_type":
        return _upcast_type(type_proto.map_type.value_type)
    return False


def _upcast_node(node: onnx.NodeProto) -> int:
    """Upcast the float16 a node's attributes make; the number of attributes changed."""
    changed = 0
    for attribute in node.attribute:
        if node.op_type in _DTYPE_ATTRIBUTES and attribute.name == _DTYPE_ATTRIBUTES[node.op_type]:
            if attribute.i == TensorProto.FLOAT16:
                attribute.i = TensorProto.FLOAT
                changed += 1
        elif attribute.type == onnx.AttributeProto.TENSOR and node.op_type in _TENSOR_ATTRIBUTES:
            changed += _upcast_tensor(attribute.t)
        elif attribute.type == onnx.AttributeProto.SPARSE_TENSOR and node.op_type == "Constant":
            changed += _upcast_tensor(attribute.sparse_tensor.values)
    return changed


def _rename_inside(graph: onnx.GraphProto, outer: str, inner: str) -> None:
    """``rename_tensor`` everywhere but the graph's interface, which keeps the name ``outer``."""
    rename_tensor(graph, outer, inner)
    for value in [*graph.input, *graph.output]:
        if value.name == inner:
            value.name = outer


@register
@dataclass
class Float16ToFloat32(Surgeon):
    """Compute a float16 model in float32: float16 weights, constants, Cast targets, dtype attributes
    and declared types become float32, in If/Loop/Scan bodies too. With ``keep_io_types`` (the default)
    float16 graph inputs and outputs stay float16 behind Cast nodes, so callers feed and read the same
    arrays as before.

    Not exact: float32 arithmetic skips the float16 rounding of every intermediate, so outputs move by
    about one float16 step (a relative 1e-3), toward the values the float16 model approximates.
    """

    exact: ClassVar[bool] = False
    keep_io_types: bool = True

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        boundary = {v.name for v in [*graph.input, *graph.output]} if self.keep_io_types else set()
        changed = 0
        for inner in all_graphs(graph):
            changed += sum(_upcast_tensor(tensor) for tensor in inner.initializer)
            changed += sum(_upcast_tensor(tensor.values) for tensor in inner.sparse_initializer)
            changed += sum(_upcast_node(node) for node in inner.node)
            changed += sum(_upcast_type(value.type) for value in inner.value_info)
            if inner is not graph:
                changed += sum(_upcast_type(value.type) for value in [*inner.input, *inner.output])
        initializer_names = {t.name for t in graph.initializer}
        for value in [*graph.input, *graph.output]:
            if value.name in initializer_names or value.name not in boundary:
                changed += _upcast_type(value.type)
        if not changed:
            return SurgeryOutcome(result, False, "no float16 tensor, type or attribute: nothing to upcast")
        casts = self._keep_float16_boundary(graph, initializer_names) if self.keep_io_types else 0
        kept = f"; {casts} float16 input(s)/output(s) kept behind Cast nodes" if casts else ""
        return SurgeryOutcome(result, True, f"upcast {changed} float16 item(s) to float32{kept}")

    @staticmethod
    def _keep_float16_boundary(graph: onnx.GraphProto, initializer_names: set[str]) -> int:
        """Cast float16 graph inputs to float32 on entry and float32 results back to float16 on exit."""
        taken = used_names(graph)
        entry: list[onnx.NodeProto] = []
        exit_casts: list[onnx.NodeProto] = []
        float16 = lambda value: value.type.tensor_type.elem_type == TensorProto.FLOAT16  # noqa: E731
        inputs = {v.name for v in graph.input}
        for value in graph.input:
            if value.name in initializer_names or not float16(value):
                continue
            outer, inner = value.name, unique_name(graph, f"{value.name}_float32", taken)
            _rename_inside(graph, outer, inner)
            entry.append(helper.make_node("Cast", [outer], [inner], f"{inner}_cast", to=TensorProto.FLOAT))
        for value in graph.output:
            if not float16(value) or value.name in inputs:
                continue  # an input passed straight through is float16 already
            outer, inner = value.name, unique_name(graph, f"{value.name}_float32", taken)
            _rename_inside(graph, outer, inner)  # its producer (node or initializer) now makes the float32 value
            exit_casts.append(helper.make_node("Cast", [inner], [outer], f"{inner}_cast", to=TensorProto.FLOAT16))
        nodes = [*entry, *graph.node, *exit_casts]
        del graph.node[:]
        graph.node.extend(nodes)
        return len(entry) + len(exit_casts)


def store_in_float16(model: onnx.ModelProto, names: Collection[str] | None = None, min_elements: int = 1024) -> int:
    """In place: float32 weights float16 holds exactly stored as float16 behind a Cast back to float32 (see
    :class:`Float16Storage`); the number of bytes saved."""
    graph = model.graph
    overridable = {value.name for value in graph.input}
    taken = used_names(graph)
    casts: list[onnx.NodeProto] = []
    saved = 0
    for tensor in graph.initializer:
        if tensor.data_type != TensorProto.FLOAT or tensor.name in overridable:
            continue
        if names is not None and tensor.name not in names:
            continue
        if tensor.data_location == TensorProto.EXTERNAL or int(np.prod(tensor.dims)) < min_elements:
            continue
        values = numpy_helper.to_array(tensor)
        half = values.astype(np.float16)
        if not np.array_equal(half.astype(np.float32).view(np.uint32), values.view(np.uint32)):
            continue  # float16 would round it
        stored = unique_name(graph, f"{tensor.name}_float16", taken)
        cast_name = unique_name(graph, f"{stored}_cast", taken)
        casts.append(helper.make_node("Cast", [stored], [tensor.name], cast_name, to=TensorProto.FLOAT))
        saved += values.nbytes - half.nbytes
        tensor.CopyFrom(numpy_helper.from_array(half, stored))
    if casts:
        nodes = [*casts, *graph.node]
        del graph.node[:]
        graph.node.extend(nodes)
    return saved


@register
@dataclass
class Float16Storage(Surgeon):
    """Store float32 weights whose values float16 holds exactly as float16, each behind a Cast back to
    float32: those weights take half the bytes, every output stays bit for bit the same, and ONNX Runtime
    folds the Casts when it loads the model, so it runs as before. Weights of a float16 model computed in
    float32 are all exact in float16; weights computed in float32 rarely are, and stay as they are.

    ``names``: only these weights (default: any); ``min_elements``: smaller weights are not worth a node.
    Weights a graph input can override, and weights stored outside the model file, stay as they are.
    """

    names: list[str] | None = None
    min_elements: int = 1024

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        saved = store_in_float16(result, self.names, self.min_elements)
        if not saved:
            return SurgeryOutcome(result, False, "no float32 weight float16 holds exactly: nothing to store smaller")
        return SurgeryOutcome(result, True, f"weights stored in float16 behind Casts: {saved:,} bytes less")
