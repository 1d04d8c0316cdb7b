"""Seeded byte mutators over a serialized ONNX model, for the byte-mutation campaign.

Two families. The byte-level mutators (bit flips, overwrites, truncation, chunk moves...) know nothing
about the format: they model a damaged download or a disk error, and mostly exercise the loader's
refusal path, because a random flip in the framing stops protobuf from parsing at all (and a flip in
``raw_data`` changes a weight, which nobody can tell). The protobuf-aware mutator walks the wire
format with ONNX's own message descriptors, picks one field anywhere in the tree (a node's input
name, an attribute's int, an initializer's dims, an external-data offset...) and changes it, then
re-serializes so that every enclosing length prefix stays consistent. Most of its results still parse
as a ``ModelProto``, so they travel past the loader into the checker, ONNX Runtime and the optimizer.

Everything is driven by a ``random.Random`` the caller seeds: the same seed always gives the same
bytes and the same description, which is what makes a saved failure reproducible from its seed.
"""

from __future__ import annotations

import dataclasses
import math
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import onnx
from google.protobuf.descriptor import Descriptor, FieldDescriptor

Mutator = Callable[[bytes, random.Random], tuple[bytes, str]]
"""A mutation: ``(data, rng) -> (mutated data, what was done)``."""

# ----------------------------------------------------------------------------------------- byte level

# Values that sit on an edge somewhere: sign bits, all-ones, and the largest varints protobuf accepts.
# Overwriting a length prefix or a dims entry with one of these is how real parsers fall over.
INTERESTING_BYTES: tuple[bytes, ...] = (
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\x01",
    b"\xff\xff\xff\xff\x07",  # varint 2**31 - 1
    b"\xff\xff\xff\xff\x0f",  # varint 2**32 - 1
    b"\x80\x80\x80\x80\x10",  # varint 2**32
    b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # varint 2**63 - 1
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # varint 2**64 - 1 (also int64 -1)
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an 11-byte varint: longer than protobuf allows
    b"\xff\xff\xff\x7f",  # little-endian int32 max
    b"\x00\x00\x00\x80",  # little-endian int32 min
    b"\xff\xff\xff\xff",
    b"\x00\x00\xc0\x7f",  # float32 NaN
    b"\x00\x00\x80\x7f",  # float32 +inf
)


def _offset(data: bytes, rng: random.Random) -> int:
    return rng.randrange(len(data)) if data else 0


def flip_bits(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Flip one to eight single bits: the classic storage or transfer error."""
    if not data:
        return insert_bytes(data, rng)
    out = bytearray(data)
    flipped = []
    # Distinct bits: flipping one bit twice would undo it.
    for position in sorted(rng.sample(range(8 * len(data)), min(8 * len(data), rng.choice((1, 1, 1, 2, 4, 8))))):
        at, bit = divmod(position, 8)
        out[at] ^= 1 << bit
        flipped.append(f"{at:#x}.{bit}")
    return bytes(out), f"flip bits {','.join(flipped)}"


def overwrite_random(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Overwrite one to eight bytes at a random offset with random values."""
    if not data:
        return insert_bytes(data, rng)
    at = _offset(data, rng)
    size = min(rng.randint(1, 8), len(data) - at)
    noise = bytes(rng.randrange(256) for _ in range(size))
    if noise == data[at : at + size]:  # a no-op would waste a case: make the first byte differ
        noise = bytes([noise[0] ^ rng.randint(1, 255)]) + noise[1:]
    return data[:at] + noise + data[at + size :], f"overwrite {size} random bytes at {at:#x}"


def overwrite_interesting(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Overwrite bytes at a random offset with an edge value (0x00, 0xff, a varint maximum...)."""
    if not data:
        return insert_bytes(data, rng)
    at = _offset(data, rng)
    values = list(INTERESTING_BYTES)
    rng.shuffle(values)
    for value in values:  # the first one that is not already there
        out = data[:at] + value + data[at + len(value) :]
        if out != data:
            break
    return out, f"overwrite {value.hex()} at {at:#x}"


def truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Cut the file short: an interrupted download. Half the cuts fall in the last 64 bytes."""
    if not data:
        return insert_bytes(data, rng)
    keep = rng.randrange(len(data)) if rng.random() < 0.5 else max(0, len(data) - rng.randint(1, 64))
    return data[:keep], f"truncate to {keep} of {len(data)} bytes"


def insert_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Insert random or edge-value bytes, which shifts everything after them."""
    at = rng.randint(0, len(data))
    if rng.random() < 0.5:
        extra = rng.choice(INTERESTING_BYTES)
    else:
        extra = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return data[:at] + extra + data[at:], f"insert {extra.hex()} at {at:#x}"


def delete_range(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Delete 1 to 64 bytes from a random offset."""
    if not data:
        return insert_bytes(data, rng)
    at = _offset(data, rng)
    size = min(rng.randint(1, 64), len(data) - at)
    return data[:at] + data[at + size :], f"delete {size} bytes at {at:#x}"


def _chunk(data: bytes, rng: random.Random, limit: int) -> tuple[int, int]:
    size = rng.randint(1, max(1, min(limit, len(data))))
    return rng.randint(0, len(data) - size), size


def duplicate_chunk(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Copy a chunk of up to 256 bytes to another offset (a repeated field, a doubled record)."""
    if not data:
        return insert_bytes(data, rng)
    start, size = _chunk(data, rng, 256)
    at = rng.randint(0, len(data))
    return data[:at] + data[start : start + size] + data[at:], f"copy {size} bytes from {start:#x} to {at:#x}"


def swap_chunks(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Swap two non-overlapping chunks of the same size (reordered records)."""
    if len(data) < 2:
        return flip_bits(data, rng)
    size = rng.randint(1, max(1, min(128, len(data) // 2)))
    first = rng.randint(0, len(data) - 2 * size)
    second = rng.randint(first + size, len(data) - size)
    out = bytearray(data)
    out[first : first + size], out[second : second + size] = data[second : second + size], data[first : first + size]
    return bytes(out), f"swap {size} bytes at {first:#x} and {second:#x}"


BYTE_MUTATORS: dict[str, Mutator] = {
    "flip_bits": flip_bits,
    "overwrite_random": overwrite_random,
    "overwrite_interesting": overwrite_interesting,
    "truncate": truncate,
    "insert_bytes": insert_bytes,
    "delete_range": delete_range,
    "duplicate_chunk": duplicate_chunk,
    "swap_chunks": swap_chunks,
}

# ------------------------------------------------------------------------------------- protobuf wire

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MASK64 = (1 << 64) - 1
_MAX_DEPTH = 64  # deeper than any sane model; a bound so a crafted nesting cannot exhaust the stack


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


@dataclass
class WireField:
    """One field record. ``value`` is an int (varint), raw bytes (fixed, string, bytes, packed) or,
    for a field the descriptor says is a message, the list of that message's own records.

    The three corruption knobs are applied at serialization, so that a mutation can break exactly
    one record's framing while every enclosing length prefix is still recomputed correctly.
    """

    number: int
    wire: int
    value: int | bytes | list[WireField]
    descriptor: FieldDescriptor | None
    length_delta: int = 0
    raw_tag: bytes | None = None
    varint_padding: int = 0

    @property
    def name(self) -> str:
        return self.descriptor.name if self.descriptor is not None else f"#{self.number}"


def _clone_value(value: int | bytes | list[WireField]) -> int | bytes | list[WireField]:
    """A deep copy that shares descriptors (which ``copy.deepcopy`` cannot copy)."""
    return [_clone(field) for field in value] if isinstance(value, list) else value


def _clone(field: WireField) -> WireField:
    return dataclasses.replace(field, value=_clone_value(field.value))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    for index in range(pos, min(pos + 10, len(data))):
        byte = data[index]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MASK64, index + 1
        shift += 7
    raise WireError(f"bad varint at {pos:#x}")


def encode_varint(value: int, padding: int = 0) -> bytes:
    """Protobuf varint of ``value`` (negative numbers as 64-bit two's complement, like int64).

    ``padding`` adds redundant continuation bytes: a non-canonical but (up to 10 bytes) legal form.
    """
    value &= _MASK64
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value and padding <= 0:
            out.append(byte)
            return bytes(out)
        if not value:
            padding -= 1
        out.append(byte | 0x80)


def parse_message(data: bytes, message: Descriptor | None, depth: int = 0) -> list[WireField]:
    """Split ``data`` into field records, recursing into every field the descriptor calls a message."""
    if depth > _MAX_DEPTH:
        raise WireError("nesting too deep")
    fields: list[WireField] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0 or wire not in (_VARINT, _FIXED64, _LENGTH, _FIXED32):
            raise WireError(f"bad tag {key:#x}")
        descriptor = message.fields_by_number.get(number) if message is not None else None
        value: int | bytes | list[WireField]
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if pos + size > len(data):
                raise WireError("truncated fixed-width value")
            value, pos = data[pos : pos + size], pos + size
        else:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise WireError("length runs past the end")
            payload, pos = data[pos : pos + size], pos + size
            if descriptor is not None and descriptor.type == FieldDescriptor.TYPE_MESSAGE:
                value = parse_message(payload, descriptor.message_type, depth + 1)
            else:
                value = payload
        fields.append(WireField(number, wire, value, descriptor))
    return fields


def serialize_message(fields: list[WireField]) -> bytes:
    """The inverse of :func:`parse_message` (byte-exact for protobuf's canonical output)."""
    out = bytearray()
    for field in fields:
        out += field.raw_tag if field.raw_tag is not None else encode_varint(field.number << 3 | field.wire)
        if isinstance(field.value, int):
            out += encode_varint(field.value, field.varint_padding)
        elif field.wire in (_FIXED64, _FIXED32):
            out += field.value  # type: ignore[operator]
        else:
            payload = serialize_message(field.value) if isinstance(field.value, list) else field.value
            out += encode_varint(max(0, len(payload) + field.length_delta), field.varint_padding)
            out += payload
    return bytes(out)


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    """protobuf >= 6 spells it ``is_repeated``; older releases only have ``label``."""
    if hasattr(descriptor, "is_repeated"):
        return bool(descriptor.is_repeated)
    return descriptor.label == FieldDescriptor.LABEL_REPEATED


@dataclass
class _Site:
    """A field together with the record list that holds it, so it can be replaced or removed."""

    field: WireField
    siblings: list[WireField]
    path: str
    message: Descriptor | None  # the descriptor of the message that holds the field


def _sites(fields: list[WireField], message: Descriptor | None, prefix: str = "") -> Iterator[_Site]:
    seen: dict[int, int] = {}
    for field in fields:
        index = seen.get(field.number, 0)
        seen[field.number] = index + 1
        repeated = field.descriptor is None or _is_repeated(field.descriptor)
        path = f"{prefix}{field.name}[{index}]" if repeated else f"{prefix}{field.name}"
        yield _Site(field, fields, path, message)
        if isinstance(field.value, list):
            nested = field.descriptor.message_type if field.descriptor is not None else None
            yield from _sites(field.value, nested, path + ".")


# ------------------------------------------------------------------------------- field-aware values

_INT_EDGES = (0, 1, -1, 2, 3, 7, 64, 255, 256, 65535, 2**31 - 1, -(2**31), 2**32, 2**53, 2**62, 2**63 - 1, -(2**63))
_FLOAT_EDGES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, 3.4e38, 65504.0)
_OP_TYPES = (
    "Relu", "Conv", "BatchNormalization", "Add", "Mul", "MatMul", "Gemm", "Identity", "Clip", "Reshape",
    "Transpose", "Concat", "Split", "Flatten", "MaxPool", "Sigmoid", "Softmax", "Constant", "If", "Loop",
    "FusedConv", "QuickGelu", "NoSuchOp", "",
)  # fmt: skip
_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training", "org.example.bogus")
_EXTERNAL_KEYS = ("location", "offset", "length", "checksum", "basepath", "bogus")
_EXTERNAL_VALUES = (
    "-1", "0", "1", "4096", "2147483648", "18446744073709551616", "9" * 40, "0x10", " 5", "1e3", "abc", "",
    "../../../../../../etc/passwd", "/etc/passwd", "/dev/zero", "/proc/self/mem", ".", "..", "in.onnx",
    "out.onnx", "no_such_file.bin", "subdir/../weights.bin", "a\x00b",
)  # fmt: skip
_STRING_EDGES = (
    "", " ", "x" * 4096, "a\x00b", "\x7f", "é", "../../../../etc/passwd", "/dev/zero", "-1", "0", "1e400", "nan",
)  # fmt: skip
_BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"abc\x80")


def _varint_value(field: WireField, rng: random.Random) -> int:
    descriptor = field.descriptor
    old = field.value if isinstance(field.value, int) else 0
    if descriptor is not None and descriptor.type == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in descriptor.enum_type.values]
        return rng.choice([*known, -1, max(known) + 1, 2**31 - 1])
    if descriptor is not None and descriptor.type == FieldDescriptor.TYPE_BOOL:
        return rng.choice((0, 1, 2, 255))
    signed = old - (1 << 64) if old >= 1 << 63 else old
    return rng.choice((*_INT_EDGES, signed + 1, signed - 1, -signed, signed * 2, signed // 2, rng.randrange(65)))


def _fixed_value(field: WireField, rng: random.Random) -> bytes:
    width = 8 if field.wire == _FIXED64 else 4
    if rng.random() < 0.2:
        return bytes(rng.randrange(256) for _ in range(width))
    floating = field.descriptor is not None and field.descriptor.type in (
        FieldDescriptor.TYPE_FLOAT,
        FieldDescriptor.TYPE_DOUBLE,
    )
    if floating:
        return struct.pack("<d" if width == 8 else "<f", rng.choice(_FLOAT_EDGES))
    return (rng.choice(_INT_EDGES) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")


def _string_value(site: _Site, names: list[bytes], rng: random.Random) -> bytes:
    """A replacement string that means something where it lands: an op type for ``op_type``, another
    tensor's name for an input (a rewired or dangling edge), a hostile path for an external location."""
    name = site.field.name
    old = site.field.value if isinstance(site.field.value, bytes) else b""
    in_external = ".external_data[" in site.path
    pools: list[tuple[str, ...] | list[bytes]] = [_STRING_EDGES, names]
    if name == "op_type":
        pools.append(_OP_TYPES)
    elif name == "domain":
        pools.append(_DOMAINS)
    elif in_external and name == "key":
        pools.append(_EXTERNAL_KEYS)
    elif in_external and name == "value":
        pools.append(_EXTERNAL_VALUES)
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(_BAD_UTF8)
    if roll < 0.2 and old:
        return old[:-1] if rng.random() < 0.5 else old + b"_"
    pool = pools[-1] if len(pools) > 2 and rng.random() < 0.6 else rng.choice(pools) or _STRING_EDGES
    choice = rng.choice(pool)
    return choice.encode("utf-8") if isinstance(choice, str) else choice


def _bytes_value(field: WireField, rng: random.Random) -> bytes:
    """For raw tensor data and packed numbers: a length that no longer matches what the dims promise."""
    old = field.value if isinstance(field.value, bytes) else b""
    roll = rng.random()
    if roll < 0.3 and old:
        return old[: rng.randrange(len(old))]
    if roll < 0.5:
        return old + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    if roll < 0.6:
        return b""
    if roll < 0.7:
        return old * 2
    if old:  # one byte changed in place: a weight or a packed dimension takes a strange value
        at = rng.randrange(len(old))
        return old[:at] + bytes([rng.randrange(256)]) + old[at + 1 :]
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))


def _new_value(site: _Site, names: list[bytes], rng: random.Random) -> tuple[int | bytes, str]:
    field = site.field
    if field.wire == _VARINT:
        value = _varint_value(field, rng)
        signed = value - (1 << 64) if value >= 1 << 63 else value
        return value, str(signed)
    if field.wire in (_FIXED64, _FIXED32):
        value_bytes = _fixed_value(field, rng)
        return value_bytes, value_bytes.hex()
    if field.descriptor is not None and field.descriptor.type == FieldDescriptor.TYPE_STRING:
        value_bytes = _string_value(site, names, rng)
    else:
        value_bytes = _bytes_value(field, rng)
    shown = value_bytes[:40].decode("utf-8", "backslashreplace")
    return value_bytes, f"{shown!r}{'...' if len(value_bytes) > 40 else ''} ({len(value_bytes)} bytes)"


# --------------------------------------------------------------------------------- proto mutations


def _set_value(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    field = site.field
    if isinstance(field.value, list):  # a message: structure is the only "value" it has
        return _duplicate(site, sites, names, rng)
    field.value, shown = _new_value(site, names, rng)
    return f"set {site.path} = {shown}"


def _delete(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    site.siblings.remove(site.field)
    return f"delete {site.path}"


def _duplicate(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    site.siblings.insert(site.siblings.index(site.field) + 1, _clone(site.field))
    return f"duplicate {site.path}"


def _swap(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Swap with a sibling; a same-number sibling when there is one (reordered nodes or inputs)."""
    others = [f for f in site.siblings if f is not site.field]
    if not others:
        return _duplicate(site, sites, names, rng)
    same = [f for f in others if f.number == site.field.number]
    other = rng.choice(same or others)
    first, second = site.siblings.index(site.field), site.siblings.index(other)
    site.siblings[first], site.siblings[second] = other, site.field
    return f"swap {site.path} with sibling {other.name}"


def _transplant(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Give the field the value of the same kind of field elsewhere (another node's attribute...)."""
    if site.field.descriptor is None:
        return _set_value(site, sites, names, rng)
    kind = site.field.descriptor.full_name
    donors = [s for s in sites if s.field is not site.field and s.field.descriptor is not None]
    donors = [s for s in donors if s.field.descriptor.full_name == kind and s.field.wire == site.field.wire]
    if not donors:
        return _set_value(site, sites, names, rng)
    donor = rng.choice(donors)
    site.field.value = _clone_value(donor.field.value)
    return f"copy {donor.path} into {site.path}"


def _renumber(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Relabel the field as another field of its message with the same wire type (type confusion:
    an attribute's ``i`` read as its ``type``, a node's input read as its output...)."""
    if site.message is None:
        return _set_value(site, sites, names, rng)
    wire_of = {
        FieldDescriptor.TYPE_MESSAGE: _LENGTH,
        FieldDescriptor.TYPE_STRING: _LENGTH,
        FieldDescriptor.TYPE_BYTES: _LENGTH,
        FieldDescriptor.TYPE_FLOAT: _FIXED32,
        FieldDescriptor.TYPE_DOUBLE: _FIXED64,
    }
    candidates = [
        f
        for f in site.message.fields
        if f.number != site.field.number and wire_of.get(f.type, _VARINT) == site.field.wire
    ]
    if not candidates:
        return _set_value(site, sites, names, rng)
    target = rng.choice(candidates)
    site.field.number, site.field.descriptor = target.number, target
    return f"renumber {site.path} as {target.name}"


def _add_field(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Add a field the message does not have yet (a ``data_location`` = EXTERNAL with no location,
    a second graph, a ``segment``): the combinations a well-behaved exporter never writes."""
    holders = [s for s in sites if isinstance(s.field.value, list) and s.field.descriptor is not None]
    if not holders:
        return _set_value(site, sites, names, rng)
    holder = rng.choice(holders)
    descriptor = rng.choice(holder.field.descriptor.message_type.fields)
    value: int | bytes | list[WireField]
    if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
        donors = [s.field.value for s in sites if s.field.descriptor is not None and s.field.descriptor is descriptor]
        wire, value = _LENGTH, _clone_value(rng.choice(donors)) if donors else []
    elif descriptor.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        wire, value = _LENGTH, b""
    elif descriptor.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        wire = _FIXED32 if descriptor.type == FieldDescriptor.TYPE_FLOAT else _FIXED64
        value = bytes(4 if wire == _FIXED32 else 8)
    else:
        wire, value = _VARINT, 0
    field = WireField(descriptor.number, wire, value, descriptor)
    holder.field.value.append(field)  # type: ignore[union-attr]
    shown = "message"
    if not isinstance(value, list):
        field.value, shown = _new_value(_Site(field, holder.field.value, "", None), names, rng)  # type: ignore[arg-type]
    return f"add {holder.path}.{descriptor.name} = {shown}"


def _corrupt_length(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Make one record's length prefix lie: the parser then reads into or past its neighbours."""
    if site.field.wire != _LENGTH:
        return _corrupt_tag(site, sites, names, rng)
    site.field.length_delta = rng.choice((-8, -2, -1, 1, 2, 8, 1 << 20, 1 << 31, 1 << 40))
    return f"length of {site.path} {site.field.length_delta:+d}"


def _corrupt_tag(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Give the record another wire type (or an illegal field number) while its value bytes stay."""
    roll = rng.random()
    if roll < 0.6:
        wire = rng.choice([w for w in (0, 1, 2, 3, 4, 5, 6, 7) if w != site.field.wire])
        site.field.raw_tag = encode_varint(site.field.number << 3 | wire)
        return f"wire type of {site.path} {site.field.wire} -> {wire}"
    number = rng.choice((0, 19000, 2**29 - 1, 2**29, 2**32))
    site.field.raw_tag = encode_varint(number << 3 | site.field.wire)
    return f"field number of {site.path} -> {number}"


def _pad_varint(site: _Site, sites: list[_Site], names: list[bytes], rng: random.Random) -> str:
    """Spell a varint (or a length prefix) with redundant bytes: legal up to ten bytes, not beyond."""
    if site.field.wire not in (_VARINT, _LENGTH):
        return _corrupt_tag(site, sites, names, rng)
    site.field.varint_padding = rng.choice((1, 3, 9, 10))
    return f"pad varint of {site.path} with {site.field.varint_padding} bytes"


_PROTO_OPERATIONS: tuple[tuple[Callable[[_Site, list[_Site], list[bytes], random.Random], str], float], ...] = (
    (_set_value, 0.38),
    (_delete, 0.12),
    (_duplicate, 0.08),
    (_swap, 0.08),
    (_transplant, 0.08),
    (_renumber, 0.06),
    (_add_field, 0.08),
    (_corrupt_length, 0.06),
    (_corrupt_tag, 0.03),
    (_pad_varint, 0.03),
)


def mutate_proto(data: bytes, rng: random.Random, message: Descriptor | None = None) -> tuple[bytes, str] | None:
    """Change one field anywhere in the message tree and re-serialize; None if ``data`` does not parse.

    ``message`` is the descriptor of the top-level message (default: ``onnx.ModelProto``).
    """
    message = message or onnx.ModelProto.DESCRIPTOR
    try:
        tree = parse_message(data, message)
    except WireError:
        return None
    sites = list(_sites(tree, message))
    if not sites:
        return None
    names = sorted({s.field.value for s in sites if isinstance(s.field.value, bytes) and _is_name(s.field)})
    operations, weights = zip(*_PROTO_OPERATIONS, strict=True)
    operation = rng.choices(operations, weights)[0]
    description = operation(rng.choice(sites), sites, names, rng)
    return serialize_message(tree), f"proto {description}"


def external_data_locations(data: bytes) -> set[str]:
    """The ``location`` of every external-data entry in a serialized model (empty if it does not parse).

    Read from the wire format so that it works on any nesting (subgraphs, functions) without loading
    the weights; the campaign uses it to place a seed model's data files beside each mutated copy.
    """
    try:
        tree = parse_message(data, onnx.ModelProto.DESCRIPTOR)
    except WireError:
        return set()
    locations = set()
    for site in _sites(tree, onnx.ModelProto.DESCRIPTOR):
        if site.field.name != "external_data" or not isinstance(site.field.value, list):
            continue
        entry = {f.name: f.value for f in site.field.value if isinstance(f.value, bytes)}
        if entry.get("key") == b"location" and "value" in entry:
            locations.add(entry["value"].decode("utf-8", "replace"))
    return locations


def _is_name(field: WireField) -> bool:
    return field.descriptor is not None and field.descriptor.name in ("name", "input", "output")


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One to three stacked mutations, each protobuf-aware (when the bytes still parse) with
    probability 0.6, else byte-level. Always returns bytes that differ from ``data``."""
    steps = []
    current = data
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        result = mutate_proto(current, rng) if rng.random() < 0.6 else None
        if result is None:
            name = rng.choice(sorted(BYTE_MUTATORS))
            result = BYTE_MUTATORS[name](current, rng)
        current, description = result
        steps.append(description)
    if current == data:  # stacked steps undid each other, or a swap moved equal chunks
        current, description = flip_bits(data, rng)
        steps.append(description)
    return current, "; ".join(steps)
