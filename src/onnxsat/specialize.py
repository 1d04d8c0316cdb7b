"""A model specialised to the inputs its user fixed: given values become constants, given sizes fixed dims.

Used when the user asks for it (``--specialize``): a voice model's sample-rate switch, a detector's image
size. Its constants then fold, and the control flow they decide settles to the path taken. The result
accepts only what was fixed, so every change is named in the report: a fixed input is no longer an input
at all (a caller still feeding it gets ONNX Runtime's error rather than a silently ignored value).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec


def specialize(model: onnx.ModelProto, spec: InputSpec) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` (a copy) with ``spec``'s given arrays as constants and its sizes as fixed dims; one note each."""
    if not spec:
        raise SettingsError("--specialize needs --inputs (values to fix) or --input-shape (sizes to fix)")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    notes = []
    declared = {value.name: value for value in graph.input}
    for name, array in spec.given.items():
        if name not in declared:
            continue
        value = np.asarray(array)
        kept = [initializer for initializer in graph.initializer if initializer.name != name]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        graph.initializer.append(numpy_helper.from_array(value, name))
        if result.ir_version >= 4:  # before IR 4 an initializer stays listed as an input, and is a constant
            del graph.input[[v.name for v in graph.input].index(name)]
        shown = value.reshape(-1)[0].item() if value.size == 1 else f"{value.dtype} {list(value.shape)}"
        notes.append(f"input {name!r} fixed to {shown}: the result no longer takes it")
    for name, dims in spec.shapes.items():
        if name not in declared or name in spec.given:
            continue
        shape = declared[name].type.tensor_type.shape
        for dim, size in zip(shape.dim, dims, strict=True):
            dim.Clear()
            dim.dim_value = int(size)
        notes.append(f"input {name!r} fixed to size {list(dims)}: the result takes no other")
    return result, notes
