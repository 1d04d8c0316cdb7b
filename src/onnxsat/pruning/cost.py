"""What a pruned model costs: parameters and MACs, counted by :mod:`onnxsat.profile.counting`.

One counter for the whole tool, so that ``onnxsat prune``'s before / after figures are the ones
``onnxsat profile`` shows: MACs as onnx-tool counts them (elementwise ops included), per inference at
the input shapes given, dynamic dims otherwise 1 (pruning is measured, not profiled for a user, so
it does not stop to ask for them). Shapes ONNX shape inference cannot tell (a Reshape target computed
through a Cast at an old opset, as Paddle2ONNX exports write) are learnt from one ONNX Runtime run,
as ``onnxsat profile`` does. Parameters are counted in normal form (Constant nodes read as initializers,
as pruning works on it), since exporters that store weights as Constant nodes would otherwise show none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from onnxsat.errors import InvalidModelError, RuntimeUnsupportedError, SettingsError
from onnxsat.inputs import DEFAULT_DYNAMIC_DIM, InputSpec, fixed_dim
from onnxsat.normal_form import normal_form
from onnxsat.profile.counting import parameter_count as _initializer_count
from onnxsat.profile.counting import profile_model

__all__ = ["counted_macs", "mac_count", "parameter_count"]


def parameter_count(model: onnx.ModelProto) -> int:
    """Elements of every initializer and every Constant node's tensor (weights either way)."""
    return _initializer_count(normal_form(model)[0])


def mac_count(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None, base_dir: Path | None = None
) -> int | None:
    """MACs of one inference, or None when they cannot be counted (``counted_macs`` says why)."""
    return counted_macs(model, input_shapes, base_dir)[0]


def counted_macs(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: Path | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> tuple[int | None, str]:
    """MACs of one inference and "", or None and why not (a shape neither inference nor a run can tell).
    ``given``: the user's values, fed as they are where a run is needed (a run on random values can end the
    process in a custom op: an image decoder fed bytes that are no image)."""
    try:
        given = dict(given or {})
        shapes = {n: s for n, s in _all_input_shapes(model, input_shapes or {}).items() if n not in given}
        return profile_model(model, InputSpec(shapes, given), base_dir=base_dir).macs, ""
    except (SettingsError, InvalidModelError, RuntimeUnsupportedError) as error:
        return None, str(error)


def _all_input_shapes(model: onnx.ModelProto, given: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """``given``, plus every other input's declared shape with its dynamic dims (-1 included) set to 1."""
    initializers = {t.name for t in model.graph.initializer}
    shapes = {name: list(shape) for name, shape in given.items()}
    for value in model.graph.input:
        if value.name in shapes or value.name in initializers or not value.type.tensor_type.HasField("shape"):
            continue
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [DEFAULT_DYNAMIC_DIM if fixed_dim(d) is None else d.dim_value for d in dims]
    return shapes
