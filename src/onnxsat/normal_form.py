"""One form for the ways exporters write the same model, made once when a model is loaded for work.

Exporters differ in where they put weights and how they spell an unknown size. Paddle2ONNX and tf2onnx
put weights in ``Constant`` nodes, PyTorch in initializers; some exporters write an unknown dimension
as ``0``. Every feature (sparsify, prune, profile, quantize) wants weights as initializers and dynamic
dims as dynamic, so the model is brought to that form here, before any pass sees it, rather than each
feature learning every spelling:

- a main-graph ``Constant`` node's tensor becomes an initializer of the same name (the node goes); a
  model of IR version < 4 also lists it as a graph input, as that IR requires of initializers. A
  Constant that is itself a graph output, or holds a sparse tensor, stays a node.
- a graph input or output dimension declared ``0`` becomes dynamic: ONNX Runtime would take it as a
  fixed size of zero, refusing every real input. Symbolic names (``dim_param``) are kept as written.

Both are lossless: the model computes the same, for every input it accepted before.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_TENSOR_ATTRIBUTES = (
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
)
"""The attributes a Constant node holds a dense tensor in (``sparse_value`` stays a node)."""


def normal_form(model: onnx.ModelProto, in_place: bool = False) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` in the form described in the module doc, and one line per kind of change made.

    Returns ``model`` itself when nothing changes, else a changed copy; ``in_place`` changes ``model`` itself
    instead (for a caller that just loaded it: a large model is not held twice).
    """
    liftable = [node for node in model.graph.node if _liftable(node, model.graph)]
    zero_dims = [value.name for value in _interface(model.graph) if _zero_dims(value)]
    if not liftable and not zero_dims:
        return model, []
    result = model
    if not in_place:
        result = onnx.ModelProto()
        result.CopyFrom(model)
    notes = []
    if liftable:
        _lift_constants(result)
        notes.append(f"{len(liftable)} Constant node tensors read as initializers of the same names")
    if zero_dims:
        for value in _interface(result.graph):
            for dim in _zero_dims(value):
                dim.ClearField("dim_value")
        notes.append(f"dims declared 0 read as dynamic on {', '.join(zero_dims)}")
    return result, notes


def _interface(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [*graph.input, *graph.output]


def _zero_dims(value: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return []
    return [d for d in value.type.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value == 0]


def _liftable(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return False
    outputs = {value.name for value in graph.output}
    return len(node.attribute) == 1 and node.attribute[0].name in _TENSOR_ATTRIBUTES and node.output[0] not in outputs


def _lift_constants(model: onnx.ModelProto) -> None:
    graph = model.graph
    kept = []
    lifted = []
    for node in graph.node:
        if not _liftable(node, graph):
            kept.append(node)
            continue
        tensor = _tensor(node.attribute[0])
        tensor.name = node.output[0]
        lifted.append(tensor)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(lifted)
    if model.ir_version < 4:
        graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in lifted)


def _tensor(attribute: onnx.AttributeProto) -> onnx.TensorProto:
    """A Constant node's attribute as the tensor it defines (a copy, so the node's stays untouched)."""
    if attribute.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attribute.t)
        return tensor
    value = onnx.helper.get_attribute_value(attribute)
    if attribute.name.startswith("value_string"):
        strings = [value] if attribute.name == "value_string" else list(value)
        dims = [] if attribute.name == "value_string" else [len(strings)]
        return onnx.helper.make_tensor("", onnx.TensorProto.STRING, dims, strings)
    dtype = np.float32 if attribute.name.startswith("value_float") else np.int64
    return numpy_helper.from_array(np.asarray(value, dtype=dtype))
