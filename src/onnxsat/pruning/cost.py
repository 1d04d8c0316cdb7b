"""What a pruned model costs: parameters and MACs, counted by :mod:`onnxsat.profile.counting`.

One counter for the whole tool, so that ``onnxsat prune``'s before / after figures are the ones
``onnxsat profile`` shows: MACs as onnx-tool counts them (elementwise ops included), per inference at
the input shapes given, dynamic dims otherwise 1 (pruning is measured, not profiled for a user, so
it does not stop to ask for them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from onnxsat.inputs import DEFAULT_DYNAMIC_DIM
from onnxsat.profile.counting import parameter_count, profile_model
from onnxsat.profile.shapes import ShapesUnknownError

__all__ = ["mac_count", "parameter_count"]


def mac_count(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> int | None:
    """MACs of one inference, or None when shape inference cannot tell a shape (no ONNX Runtime run here)."""
    try:
        return profile_model(model, _all_input_shapes(model, input_shapes or {}), allow_onnxruntime=False).macs
    except ShapesUnknownError:
        return None


def _all_input_shapes(model: onnx.ModelProto, given: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """``given``, plus every other input's declared shape with its dynamic dims set to 1."""
    initializers = {t.name for t in model.graph.initializer}
    shapes = {name: list(shape) for name, shape in given.items()}
    for value in model.graph.input:
        if value.name in shapes or value.name in initializers or not value.type.tensor_type.HasField("shape"):
            continue
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else DEFAULT_DYNAMIC_DIM for d in dims]
    return shapes
