"""A model specialised to the inputs its user fixed: given values become constants, given sizes fixed dims.

Used when the user asks for it (``--specialize``): a voice model's sample-rate switch, a detector's image
size. Its constants then fold, and the control flow they decide settles to the path taken. The result
accepts only what was fixed, so every change is named in the report: a fixed input is no longer an input
at all (a caller still feeding it gets ONNX Runtime's error rather than a silently ignored value).
The outputs' declared dims then follow: those the fixed inputs decide become fixed too
(:func:`declare_fixed_outputs`), those that stay dynamic (a count NonZero finds) keep their names.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec, fixed_dim, spelled


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


def declare_fixed_outputs(model: onnx.ModelProto, inferred: onnx.ModelProto | None) -> list[str]:
    """In place: each graph output's dynamic dims that shape inference on the specialised ``model`` (``inferred``,
    None when it could not run) found fixed are declared so; one note per output changed.

    Without this the result takes only ``[2, 80, 32]`` and still declares its output ``[batch, 1, samples]``,
    names no input carries any more. Only sizes inference proves are written: a dim it leaves open stays
    as declared, and a declared size is never changed.
    """
    if inferred is None:
        return []
    found = {value.name: value for value in inferred.graph.output}
    notes = []
    for value in model.graph.output:
        known = found.get(value.name)
        if known is None or not value.type.HasField("tensor_type") or not known.type.HasField("tensor_type"):
            continue
        before = spelled(value.type.tensor_type.shape.dim)
        if _fix_dims(value.type.tensor_type, known.type.tensor_type):
            after = spelled(value.type.tensor_type.shape.dim)
            notes.append(f"output {value.name!r} declared {after} (was {before}): the fixed inputs decide its size")
    return notes


def _fix_dims(declared: onnx.TypeProto.Tensor, inferred: onnx.TypeProto.Tensor) -> bool:
    """Copy ``inferred``'s fixed sizes into ``declared``'s dynamic dims (a shape left out takes inferred's rank
    when all of it is fixed); whether any changed."""
    sizes = [fixed_dim(d) for d in inferred.shape.dim] if inferred.HasField("shape") else None
    if sizes is None:
        return False
    if not declared.HasField("shape"):
        if None in sizes:
            return False
        declared.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=size) for size in sizes)
        return True
    if len(declared.shape.dim) != len(sizes):
        return False  # inference disagrees with the declaration: trust neither
    changed = False
    for dim, size in zip(declared.shape.dim, sizes, strict=True):
        if size is not None and fixed_dim(dim) is None:
            dim.Clear()
            dim.dim_value = size
            changed = True
    return changed
