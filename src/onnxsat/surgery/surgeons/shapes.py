"""InferShapes and RemoveShapes: add or drop the type/shape annotations of intermediate tensors.

Also :func:`tensor_types`, the typed view of every tensor that the other surgeon families read element
types and static shapes from (a zero tensor must match the input it replaces, a new constant the dtype
of the tensor it multiplies).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import shape_inference

from onnxsat.inputs import fixed_dim
from onnxsat.proto_fields import all_graphs
from onnxsat.surgery.graph_edit import copy_model
from onnxsat.surgery.surgeon import Surgeon, SurgeryError, SurgeryOutcome, register

Dims = list[int | None]
"""A static shape: each dimension's size, or None where it is symbolic or unknown."""


def _infer(model: onnx.ModelProto, strict: bool) -> onnx.ModelProto:
    """ONNX shape inference, with data propagation so Shape -> Gather -> Reshape chains resolve too.

    ``strict`` reports a node whose inferred type contradicts the model's annotation instead of
    skipping it; ops ONNX has no schema for (ORT contrib ops) are skipped either way.
    """
    return shape_inference.infer_shapes(model, check_type=strict, strict_mode=strict, data_prop=True)


def tensor_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto.Tensor]:
    """Every main-graph tensor whose element type is known: initializers, declared and inferred values.

    Inference is best effort here: a model it cannot handle (an inconsistent annotation, over 2 GB)
    keeps only its own annotations, and a surgeon that needs an unknown type says so.
    """
    try:
        typed = _infer(model, strict=False)
    except (shape_inference.InferenceError, ValueError):
        typed = model
    graph = typed.graph
    types = {
        tensor.name: onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)).tensor_type
        for tensor in graph.initializer
    }
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types.setdefault(value.name, value.type.tensor_type)
    return types


def static_dims(tensor_type: onnx.TypeProto.Tensor | None) -> Dims | None:
    """The shape of ``tensor_type`` with None for dynamic dimensions, or None when even the rank is unknown."""
    if tensor_type is None or not tensor_type.HasField("shape"):
        return None
    return [fixed_dim(dim) for dim in tensor_type.shape.dim]


@register
@dataclass
class InferShapes(Surgeon):
    """Run ONNX shape inference so intermediate tensors and graph outputs carry their type and shape.

    Tools downstream (quantizers, execution-provider partitioners) read ``value_info`` instead of
    inferring shapes themselves. Ops ONNX does not know (ORT contrib ops) are left unannotated. An
    annotation that contradicts the graph is a :class:`SurgeryError` rather than silently kept (run
    RemoveShapes first to start over from the graph).
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        try:
            result = _infer(model, strict=True)
        except (shape_inference.InferenceError, ValueError) as error:
            text = " ".join(str(error).split())
            raise SurgeryError(f"InferShapes: ONNX shape inference fails on this model: {text[:300]}") from None
        if result == model:
            return SurgeryOutcome(result, False, "shape inference found nothing new to annotate")
        added = len(result.graph.value_info) - len(model.graph.value_info)
        return SurgeryOutcome(result, True, f"shape inference annotated the graph ({added:+d} value_info entries)")


@register
@dataclass
class RemoveShapes(Surgeon):
    """Delete every ``value_info`` entry (main graph and subgraphs); graph inputs and outputs keep theirs.

    Stale shapes left by an edit make later shape inference fail with a merge conflict, and some tools
    trust ``value_info`` over the graph: removing it lets them (or InferShapes) start from the graph.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        removed = 0
        for graph in all_graphs(result.graph):
            removed += len(graph.value_info)
            del graph.value_info[:]
        if not removed:
            return SurgeryOutcome(result, False, "no value_info: nothing to remove")
        return SurgeryOutcome(result, True, f"removed {removed} value_info entries")
