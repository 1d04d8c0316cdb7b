"""Weights inside a one-file model, left in that file: the graph is loaded without them, and they are
streamed back when the result is written.

Why: parsing a 500 MB model puts its weights in the Python heap, and every serialization for ONNX
Runtime copies them again; optimizing a transformer then peaked near five times its file size. Yet
the e-graph needs only names, shapes and types, the few rules that fold a weight read it on demand,
and ONNX Runtime can read the rest from disk. So each large initializer's bytes are found in the file
by walking protobuf's wire format (their payloads are never read), and the model is parsed with those
tensors turned into external references to the file itself, at the payload's offset. From there on
the model is an ordinary model with external data (``external_data.py``). On save, the referenced
payloads are copied back into one protobuf file in chunks: protobuf merges a message field that occurs
twice, so the graph's weights can follow the rest of the model as a second ``graph`` field.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import onnx
from onnx import TensorProto

from onnxsat import external_data
from onnxsat.proto_fields import copy_fields

MIN_LAZY_BYTES = 64 * 2**10
"""Initializers with at least this many payload bytes stay in the file; smaller ones are parsed as usual."""

MIN_LAZY_FILE = 16 * 2**20
"""Files smaller than this are parsed whole: the saving would be small, and tools that read weights
directly (the pruning and sparsity passes) need them in memory anyway."""

_GRAPH, _INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
_NAME, _RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 8, 9, 13, 14  # TensorProto fields
_LENGTH_DELIMITED = 2


class _WireError(ValueError):
    """The bytes are not the protobuf this walker expects; the caller falls back to onnx's parser."""


def _varint(buffer: mmap.mmap | bytes, position: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if position >= end or shift > 63:
            raise _WireError("truncated varint")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _fields(buffer: mmap.mmap | bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end) of each field in [start, end)."""
    position = start
    while position < end:
        field_start = position
        key, position = _varint(buffer, position, end)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, value_end = _varint(buffer, position, end)
        elif wire_type == 1:
            value_end = position + 8
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _varint(buffer, position, end)
            value_end = position + length
        elif wire_type == 5:
            value_end = position + 4
        else:
            raise _WireError(f"wire type {wire_type}")
        if value_end > end or number == 0:
            raise _WireError("field past its message")
        yield number, wire_type, field_start, position, value_end
        position = value_end


def _key(number: int, wire_type: int) -> bytes:
    return _encode_varint(number << 3 | wire_type)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, _LENGTH_DELIMITED) + _encode_varint(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _delimited(_EXTERNAL_DATA, _delimited(1, key.encode()) + _delimited(2, value.encode()))


def _tensor_without_payload(buffer: mmap.mmap, start: int, end: int, location: str) -> bytes | None:
    """The TensorProto in [start, end) as an external reference to its raw payload, or None to keep it."""
    fields = list(_fields(buffer, start, end))
    raw = [f for f in fields if f[0] == _RAW_DATA and f[1] == _LENGTH_DELIMITED]
    if len(raw) != 1 or raw[0][4] - raw[0][3] < MIN_LAZY_BYTES:
        return None
    if any(f[0] in (_EXTERNAL_DATA, _DATA_LOCATION) for f in fields):
        return None
    _, _, _, payload_start, payload_end = raw[0]
    kept = b"".join(buffer[f[2] : f[4]] for f in fields if f[0] != _RAW_DATA)
    reference = b"".join(
        _entry(key, value)
        for key, value in (
            ("location", location),
            ("offset", str(payload_start)),
            ("length", str(payload_end - payload_start)),
        )
    )
    return kept + reference + _key(_DATA_LOCATION, 0) + _encode_varint(TensorProto.EXTERNAL)


def _graph_without_payloads(buffer: mmap.mmap, start: int, end: int, location: str) -> tuple[bytes, int]:
    parts, lazy = [], 0
    for number, wire_type, field_start, value_start, value_end in _fields(buffer, start, end):
        stripped = None
        if number == _INITIALIZER and wire_type == _LENGTH_DELIMITED:
            stripped = _tensor_without_payload(buffer, value_start, value_end, location)
        if stripped is None:
            parts.append(buffer[field_start:value_end])
        else:
            parts.append(_delimited(_INITIALIZER, stripped))
            lazy += 1
    return b"".join(parts), lazy


def load_structure(path: Path) -> onnx.ModelProto | None:
    """The model at ``path`` with its large initializers left in the file as external references to it.

    None when there is nothing to leave (a small file, no large raw initializer, weights already
    external) or when the bytes are not the protobuf expected: the caller then parses the file as usual,
    which also gives the clear error for a damaged one.
    """
    resolved = path.resolve()
    if resolved.stat().st_size < MIN_LAZY_FILE:
        return None
    with open(resolved, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        try:
            parts, lazy = [], 0
            for number, wire_type, field_start, value_start, value_end in _fields(buffer, 0, len(buffer)):
                if number == _GRAPH and wire_type == _LENGTH_DELIMITED:
                    graph, count = _graph_without_payloads(buffer, value_start, value_end, resolved.name)
                    parts.append(_delimited(_GRAPH, graph))
                    lazy += count
                else:
                    parts.append(buffer[field_start:value_end])
        except _WireError:
            return None
    if not lazy:
        return None
    try:
        return onnx.ModelProto.FromString(b"".join(parts))
    except Exception:  # any parser complaint: let onnx's own loader report it
        return None


def _lazy_tensors(model: onnx.ModelProto, base_dir: Path, source: Path) -> list[TensorProto]:
    source = source.resolve()
    return [
        tensor
        for tensor in model.graph.initializer
        if external_data.is_external(tensor) and external_data.reference(tensor, base_dir).path == source
    ]


def only_refers_to(model: onnx.ModelProto, base_dir: Path, source: Path) -> bool:
    """Every external tensor of ``model`` is a main-graph initializer left in ``source`` by :func:`load_structure`."""
    external = [t for t in external_data.iter_tensors(model) if external_data.is_external(t)]
    return bool(external) and len(_lazy_tensors(model, base_dir, source)) == len(external)


def write_one_file(model: onnx.ModelProto, base_dir: Path, source: Path, model_file: str) -> None:
    """Write ``model`` as one protobuf file, its weights that live in ``source`` copied in chunks.

    The model without its initializers is written first, then a second ``graph`` field holding only
    them: a protobuf parser merges the two, so the file is the whole model. The in-memory initializers
    are serialized one at a time as they are written: a copy of the model, or its serialization, would
    hold every weight a rule made once more (Q, K and V merged for ViT-base's Attention: 81 MB each).
    """
    out = onnx.ModelProto()
    copy_fields(model, out, skip={"graph"})
    copy_fields(model.graph, out.graph, skip={"initializer"})
    lazy_names = {t.name for t in _lazy_tensors(model, base_dir, source)}  # initializer names are unique
    in_memory = [t for t in model.graph.initializer if t.name not in lazy_names]
    lazy = []
    for tensor in model.graph.initializer:
        if tensor.name not in lazy_names:
            continue
        header = TensorProto()
        header.CopyFrom(tensor)
        header.ClearField("data_location")
        del header.external_data[:]
        ref = external_data.reference(tensor, base_dir)
        head = header.SerializeToString() + _key(_RAW_DATA, _LENGTH_DELIMITED) + _encode_varint(ref.length)
        lazy.append((head, ref, len(head) + ref.length))
    lengths = [t.ByteSize() for t in in_memory] + [length for _, _, length in lazy]
    graph_length = sum(len(_key(_INITIALIZER, 2)) + len(_encode_varint(n)) + n for n in lengths)
    with open(model_file, "wb") as stream:
        stream.write(out.SerializeToString())
        stream.write(_key(_GRAPH, _LENGTH_DELIMITED) + _encode_varint(graph_length))
        for tensor, length in zip(in_memory, lengths, strict=False):
            stream.write(_key(_INITIALIZER, _LENGTH_DELIMITED) + _encode_varint(length) + tensor.SerializeToString())
        for head, ref, length in lazy:
            stream.write(_key(_INITIALIZER, _LENGTH_DELIMITED) + _encode_varint(length) + head)
            external_data.copy_range(ref, stream)
        stream.flush()
        os.fsync(stream.fileno())
