"""The IR version ONNX Runtime reads, and models written with a newer one brought down to it.

The ``onnx`` package stamps every model it makes with its own newest IR version (``helper.make_model``
in onnx 1.23 writes IR 14) whatever opsets the model imports; ONNX Runtime 1.31 reads IR 13 at most and
refuses the rest outright. A model whose opsets an older IR already covers means the same at that IR,
which is what a user fixing it by hand would set.
"""

from __future__ import annotations

import functools
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxsat.op_kinds import default_opset_version

_ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training")


@functools.cache
def runtime_ir_version() -> int:
    """The newest IR version this ONNX Runtime loads, found once by loading a one-node model."""
    for version in range(onnx.IR_VERSION, 3, -1):
        if _loads(opset=13, ir_version=version):
            return version
    return 3


@functools.cache
def runtime_opset() -> int:
    """The newest ai.onnx opset this ONNX Runtime loads (at the IR version it reads), found the same way."""
    for opset in range(onnx.defs.onnx_opset_version(), 7, -1):
        if _loads(opset=opset, ir_version=runtime_ir_version()):
            return opset
    return 7


def _loads(opset: int, ir_version: int) -> bool:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # refused
        return False
    return True


def too_new_ir(model: onnx.ModelProto) -> str:
    """Why ONNX Runtime refuses ``model``'s IR version, said by what the user can change: the opset it was
    exported at (ORT names only the IR version, which no exporter exposes)."""
    opset = default_opset_version(model, missing=0)
    reads = f"ONNX Runtime {ort.__version__} reads IR version {runtime_ir_version()} at most"
    if not opset or opset <= runtime_opset():
        return f"the model's IR version is {model.ir_version}; {reads}"
    return (
        f"the model uses ai.onnx opset {opset}, which needs IR version {model.ir_version}; {reads} and opset "
        f"{runtime_opset()} at most: export at opset {runtime_opset()} or convert with onnx.version_converter"
    )


def lower_ir_version(model: onnx.ModelProto) -> str | None:
    """Set ``model``'s IR version (in place) to the newest ONNX Runtime reads when it is above that and
    its opsets need no newer; a note saying so, or None when nothing changed."""
    readable = runtime_ir_version()
    if model.ir_version <= readable:
        return None
    try:  # ONNX's own domains must be in onnx's table (a version past it needs what this runtime lacks)
        needed = helper.find_min_ir_version_for([o for o in model.opset_import if o.domain in _ONNX_DOMAINS], False)
    except ValueError:
        return None
    if needed > readable:
        return None  # its opsets need the newer IR: ONNX Runtime's own refusal says so
    before, model.ir_version = model.ir_version, readable
    newest = f"the newest ONNX Runtime {ort.__version__} loads"
    return f"IR version {before} read as {readable}, {newest} (its opsets need no newer)"


def file_ir_version(path: Path) -> int | None:
    """The IR version a model file declares, read from its first field (``ir_version``, field 1, where every
    writer puts it) without parsing the rest; None when the file does not start with it."""
    with open(path, "rb") as stream:
        head = stream.read(11)
    if not head or head[0] != 0x08:  # field 1, varint
        return None
    value, shift = 0, 0
    for byte in head[1:]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    return None
