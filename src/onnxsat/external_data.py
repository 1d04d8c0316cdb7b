"""Weights kept in files beside the model: checked before any read, read lazily, streamed on save.

Why lazy: a model over 2 GB cannot be one protobuf with its weights, and loading every weight would
cost the model's size again in memory. ONNXSat keeps external tensors as references while it rewrites
the graph, reads only the few a rule folds, lets ONNX Runtime read the rest from disk, and copies them
into the output's data file in chunks.

Why checked: a location is a path chosen by whoever made the file. One that leaves the model's folder
(``../../etc/passwd``, an absolute path, a symlink pointing out) would make ONNXSat read, and copy into
its output, a file the user never meant to share; a FIFO or a device would hang it. Every reference is
checked before anything (ONNXSat, onnx or ONNX Runtime) reads it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, TensorProto

from onnxsat.errors import InvalidModelError, UnsafeModelError
from onnxsat.proto_fields import with_initializers_replaced

_ALIGNMENT = 4096
"""Tensors in a written data file start on page boundaries, so ONNX Runtime can memory-map them."""

_INLINE_LIMIT = 1024
"""Tensors smaller than this stay inside the protobuf when a model is written with a data file."""

_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data")

_COPY_CHUNK = 64 * 2**20
"""Bytes copied per read when streaming a tensor from the input's data file to the output's."""


@dataclass(frozen=True)
class ExternalRef:
    """Where one tensor's bytes live: a file inside the model folder, an offset and a length."""

    path: Path
    offset: int
    length: int


def iter_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every TensorProto that can hold data: initializers, sparse parts, attributes, subgraphs, functions."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            for attribute in node.attribute:
                yield from _attribute_tensors(attribute)


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            yield from _attribute_tensors(attribute)


def _attribute_tensors(attribute: AttributeProto) -> Iterator[TensorProto]:
    if attribute.HasField("t"):
        yield attribute.t
    yield from attribute.tensors
    sparse_parts = list(attribute.sparse_tensors)
    if attribute.HasField("sparse_tensor"):
        sparse_parts.append(attribute.sparse_tensor)
    for sparse in sparse_parts:
        yield sparse.values
        yield sparse.indices
    if attribute.HasField("g"):
        yield from _graph_tensors(attribute.g)
    for graph in attribute.graphs:
        yield from _graph_tensors(graph)


def is_external(tensor: TensorProto) -> bool:
    return tensor.data_location == TensorProto.EXTERNAL


def has_external_data(model: onnx.ModelProto) -> bool:
    return any(is_external(t) for t in iter_tensors(model))


def with_data_loaded(model: onnx.ModelProto, base_dir: Path | None) -> onnx.ModelProto:
    """A copy of ``model`` with every external initializer's bytes read in from ``base_dir`` (``model`` itself
    when none is external): for work that hands the model to ONNX Runtime as bytes, or to other processes,
    where a relative data path means nothing."""
    if base_dir is None or not any(is_external(t) for t in model.graph.initializer):
        return model
    from onnx.external_data_helper import load_external_data_for_model

    whole = onnx.ModelProto()
    whole.CopyFrom(model)
    load_external_data_for_model(whole, str(base_dir))
    return whole


def stored_bytes(model: onnx.ModelProto) -> int:
    """Bytes ``model`` takes when saved: its message, and the data its external tensors refer to (a model read
    with its weights left on disk is a few KB as a message)."""
    return model.ByteSize() + _external_bytes(model)


def given_bytes(model: onnx.ModelProto, source: str) -> int:
    """Bytes of the model as the user gave it: its file's size and the data its external tensors refer to.
    The model in memory went through the normal form, which may restate it (a Keras export of 80,118 bytes
    was 78,344 in memory); :func:`stored_bytes` where there is no file (``model`` must not have its external
    data read in yet)."""
    path = Path(source)
    if not path.is_file():
        return stored_bytes(model)
    return path.stat().st_size + _external_bytes(model, path)


def _external_bytes(model: onnx.ModelProto, own_file: Path | None = None) -> int:
    """Bytes external tensors refer to, but those in ``own_file``: a large one-file model's weights read
    lazily are references to the model file itself, whose size already counts them."""
    own = own_file.resolve() if own_file is not None else None
    external = 0
    for tensor in iter_tensors(model):
        if is_external(tensor):
            entries = {entry.key: entry.value for entry in tensor.external_data}
            if own is not None and reference(tensor, own.parent).path == own:
                continue
            length = entries.get("length")
            external += int(length) if length is not None else (expected_nbytes(tensor) or 0)
    return external


def element_size(elem_type: int) -> int:
    """Bytes per element of an ONNX element type (0 where numpy has none: strings)."""
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return 0


def expected_nbytes(tensor: TensorProto) -> int | None:
    """Bytes a tensor's raw data must have (None for strings, whose size the dims do not fix)."""
    itemsize = element_size(tensor.data_type)
    if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED) or not itemsize:
        return None
    count = int(np.prod(tensor.dims, dtype=object)) if tensor.dims else 1
    if tensor.data_type in _PACKED_BITS:
        bits = _PACKED_BITS[tensor.data_type]
        return None if bits is None else (count * bits + 7) // 8
    return count * itemsize


_PACKED_BITS: dict[int, int | None] = {
    getattr(TensorProto, name): bits
    for name, bits in (
        ("INT4", 4),
        ("UINT4", 4),
        ("FLOAT4E2M1", 4),
        ("INT2", 2),
        ("UINT2", 2),
        ("FLOAT6E2M3", None),  # packing of 6-bit types not checked here; ONNX Runtime checks on load
        ("FLOAT6E3M2", None),
    )
    if hasattr(TensorProto, name)
}
"""Element types stored below one byte per element (onnx versions that lack a type skip it)."""


def reference(tensor: TensorProto, base_dir: Path) -> ExternalRef:
    """The checked location of ``tensor``'s bytes, or UnsafeModelError / InvalidModelError saying why not."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location", "")
    name = tensor.name or "(unnamed)"
    if not location:
        raise InvalidModelError(f"tensor {name!r} says its data is external but gives no location")
    if "\0" in location:
        raise UnsafeModelError(f"tensor {name!r}: external data location contains a NUL byte; refused")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise UnsafeModelError(
            f"tensor {name!r}: external data location {location!r} is an absolute path; "
            "only files inside the model's folder are read"
        )
    folder = base_dir.resolve()
    candidate = folder / location
    resolved = candidate.resolve()
    if not resolved.is_relative_to(folder):
        raise UnsafeModelError(
            f"tensor {name!r}: external data location {location!r} points outside the model's folder "
            f"({resolved}); refused"
        )
    try:
        info = os.stat(resolved)
    except OSError as error:
        raise InvalidModelError(
            f"tensor {name!r}: external data file {location!r} cannot be read: {error.strerror}"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeModelError(f"tensor {name!r}: external data location {location!r} is not a regular file; refused")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else info.st_size - offset
    except ValueError:
        raise InvalidModelError(f"tensor {name!r}: external data offset/length are not integers") from None
    if offset < 0 or length < 0 or offset + length > info.st_size:
        raise InvalidModelError(
            f"tensor {name!r}: external data [{offset}, {offset + length}) lies outside {location!r} "
            f"({info.st_size} bytes)"
        )
    expected = expected_nbytes(tensor)
    if expected is not None and expected != length:
        raise InvalidModelError(
            f"tensor {name!r}: external data holds {length} bytes but its dims and type need {expected}"
        )
    return ExternalRef(resolved, offset, length)


def check_references(model: onnx.ModelProto, base_dir: Path) -> None:
    """Check every external reference before anything reads it."""
    for tensor in iter_tensors(model):
        if is_external(tensor):
            reference(tensor, base_dir)


def external_paths(model: onnx.ModelProto, base_dir: Path) -> set[Path]:
    """The resolved data files a (checked) model reads."""
    return {reference(t, base_dir).path for t in iter_tensors(model) if is_external(t)}


def read_bytes(ref: ExternalRef) -> bytes:
    with open(ref.path, "rb") as stream:
        stream.seek(ref.offset)
        return stream.read(ref.length)


def tensor_value(tensor: TensorProto, base_dir: Path | None) -> np.ndarray:
    """The numpy value of a tensor, reading only its own bytes from its data file when it is external."""
    if not is_external(tensor):
        return onnx.numpy_helper.to_array(tensor)
    if base_dir is None:
        raise InvalidModelError(f"tensor {tensor.name!r} has external data but the model's folder is unknown")
    loaded = TensorProto()
    loaded.CopyFrom(tensor)
    loaded.raw_data = read_bytes(reference(tensor, base_dir))
    loaded.data_location = TensorProto.DEFAULT
    del loaded.external_data[:]
    return onnx.numpy_helper.to_array(loaded)


def sparse_tensor_value(sparse: onnx.SparseTensorProto, base_dir: Path | None = None) -> np.ndarray:
    """The dense array a sparse initializer stands for (COO: flat or per-dimension indices)."""
    values = tensor_value(sparse.values, base_dir)
    indices = tensor_value(sparse.indices, base_dir)
    dense = np.zeros(int(np.prod(sparse.dims)), dtype=values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), tuple(sparse.dims))
    dense[flat] = values
    return dense.reshape(tuple(sparse.dims))


STUB_BYTES = 2**20
"""Main-graph initializers held in memory from this size on are stubbed in :func:`structure_view` too."""


def structure_view(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy for ``onnx.checker`` with each external tensor, and each large main-graph weight held in
    memory, replaced by an empty stand-in.

    The checker can only find a data file relative to a model *path*; a model held in memory with
    references into another folder would fail it. The references themselves are checked by
    :func:`reference`, so the checker is left to check the graph's structure. Large weights are left
    out because the checker's copy of them (and ours for it) would be two more copies of the model:
    their data cannot fail a structural check that their type and dims pass.
    """
    view = with_initializers_replaced(model, _empty_stand_in)
    for tensor in iter_tensors(view):
        if is_external(tensor):
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
            del tensor.dims[:]
            tensor.dims.append(0)
    return view


def inference_view(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy for ONNX shape inference, holding no large weight: each external or large main-graph
    initializer becomes a graph input of its type and dims, which is all inference needs of a weight.

    :func:`structure_view`'s empty stand-ins suit the checker, but inference would read their dims [0]: a
    Conv with no output channels, and every shape after it wrong. (A small integer tensor whose values
    inference reads, a Reshape target, cannot be external: ONNX Runtime refuses to load such a model.)
    """
    moved: list[TensorProto] = []

    def lighter(tensor: TensorProto) -> TensorProto | None:
        stand_in = _empty_stand_in(tensor)  # dropped below: the weight is an input instead
        if stand_in is not None:
            moved.append(tensor)
        return stand_in

    view = with_initializers_replaced(model, lighter)
    gone = {tensor.name for tensor in moved}
    kept = [tensor for tensor in view.graph.initializer if tensor.name not in gone]
    del view.graph.initializer[:]
    view.graph.initializer.extend(kept)
    listed = {value.name for value in view.graph.input}
    view.graph.input.extend(
        onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
        for tensor in moved
        if tensor.name not in listed
    )
    return view


def _empty_stand_in(tensor: TensorProto) -> TensorProto | None:
    """An empty tensor of ``tensor``'s name and type if it is external or large (sized by its serialized
    size: reading ``raw_data`` in Python would copy it), else None."""
    if not (is_external(tensor) or (tensor.HasField("raw_data") and tensor.ByteSize() >= STUB_BYTES)):
        return None
    stub = TensorProto(name=tensor.name, data_type=tensor.data_type)
    stub.dims.append(0)
    return stub


def write_model_with_data(
    model: onnx.ModelProto, base_dir: Path | None, model_file: str, data_file: str, location: str
) -> None:
    """Write ``model`` to ``model_file`` with every large tensor's bytes in ``data_file`` (named ``location``).

    Tensors that are external (wherever they sit: initializers, Constant attributes, subgraphs) are
    streamed from their checked source files in chunks. Main-graph initializers held in memory move
    out too when they are 1 KiB or more; other in-memory tensors stay inline, as onnx's own saver
    leaves attribute tensors. The input model object is not changed.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    with open(data_file, "wb") as data:
        for tensor in iter_tensors(out):
            if is_external(tensor):
                if base_dir is None:
                    raise InvalidModelError(f"tensor {tensor.name!r} has external data but its folder is unknown")
                ref = reference(tensor, base_dir)
                offset = pad_to_alignment(data)
                copy_range(ref, data)
                set_reference(tensor, location, offset, ref.length)
        for tensor in out.graph.initializer:
            if not is_external(tensor) and tensor.ByteSize() >= _INLINE_LIMIT and expected_nbytes(tensor) is not None:
                payload = (
                    tensor.raw_data if tensor.HasField("raw_data") else onnx.numpy_helper.to_array(tensor).tobytes()
                )
                offset = pad_to_alignment(data)
                data.write(payload)
                for field in _DATA_FIELDS:
                    tensor.ClearField(field)
                set_reference(tensor, location, offset, len(payload))
        data.flush()
        os.fsync(data.fileno())
    with open(model_file, "wb") as stream:
        stream.write(out.SerializeToString())
        stream.flush()
        os.fsync(stream.fileno())


def set_reference(tensor: TensorProto, location: str, offset: int, length: int) -> None:
    """Make ``tensor`` an external reference to ``length`` bytes at ``offset`` of ``location``."""
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def pad_to_alignment(stream: BinaryIO) -> int:
    """Pad ``stream`` with zeros to the next page boundary and return that offset."""
    position = stream.tell()
    padding = -position % _ALIGNMENT
    if padding:
        stream.write(b"\0" * padding)
    return position + padding


def copy_range(ref: ExternalRef, target: BinaryIO) -> None:
    """Copy the bytes ``ref`` names into ``target``, in chunks."""
    with open(ref.path, "rb") as source:
        source.seek(ref.offset)
        remaining = ref.length
        while remaining:
            chunk = source.read(min(_COPY_CHUNK, remaining))
            if not chunk:
                raise InvalidModelError(f"external data file {ref.path} ended early")
            target.write(chunk)
            remaining -= len(chunk)
