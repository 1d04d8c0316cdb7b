"""Shape and data-movement op builders: reshape, transpose, concat/split, slice, gather, expand/tile, pad, cast.

Also Shape/Size and what reads them (ConstantOfShape, Reshape, Expand), and Range, EyeLike, Trilu, CumSum, OneHot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, numpy_helper

from tools.fuzz.graphs.builder import (
    BOOL,
    DOUBLE,
    FLOAT,
    INT64,
    MAX_ELEMENTS,
    Builder,
    Value,
    broadcast,
    maybe,
    uniform,
)
from tools.fuzz.graphs.catalog import OpFamily

INT64_MAX = 2**63 - 1

OPS = OpFamily()


def _factor(b: Builder, n: int) -> list[int]:
    """A random shape (rank 1..4) with ``n`` elements."""
    dims = [1] * b.randint(1, 4)
    remaining, p = n, 2
    while remaining > 1:
        while remaining % p:
            p += 1
        remaining //= p
        dims[b.randint(0, len(dims) - 1)] *= p
    return dims


@OPS.register("Reshape", 2.0, 5)
def _reshape(b: Builder) -> object:
    x = b.floats()
    dims = _factor(b, x.size)
    spec = list(dims)
    if b.chance(0.4):
        spec[b.randint(0, len(spec) - 1)] = -1
    if b.chance(0.3):
        for i in range(min(len(spec), x.rank)):
            if dims[i] == x.shape[i] and spec[i] != -1:
                spec[i] = 0  # 0 copies the input's dimension
                break
    return b.emit("Reshape", [x, b.ints(spec)], dims, mag=x.mag)


@OPS.register("Transpose", 1.5)
def _transpose(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 2)
    if x is None or x.rank < 2:
        return False
    perm = [int(p) for p in b.rng.permutation(x.rank)] if b.chance(0.8) else None
    order = perm if perm is not None else list(reversed(range(x.rank)))
    return b.emit("Transpose", [x], [x.shape[p] for p in order], mag=x.mag, perm=perm)


@OPS.register("Flatten", 1.0)
def _flatten(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.randint(0, x.rank)
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    if b.opset >= 11 and 0 < axis < x.rank and b.chance(0.3):
        axis -= x.rank
    return b.emit("Flatten", [x], shape, mag=x.mag, axis=axis)


@OPS.register("Squeeze", 1.0)
def _squeeze(b: Builder) -> object:
    x = b.floats(lambda v: 1 in v.shape)
    if x is None or 1 not in x.shape:
        return False
    ones = [a for a, d in enumerate(x.shape) if d == 1]
    axes = [a for a in ones if b.chance(0.6)] or ones[:1]
    if b.chance(0.2):
        return b.emit("Squeeze", [x], [d for d in x.shape if d != 1], mag=x.mag)
    inputs, attrs = b.axes_input([a - x.rank if b.opset >= 11 and b.chance(0.3) else a for a in axes], 13)
    return b.emit("Squeeze", [x, *inputs], [d for a, d in enumerate(x.shape) if a not in axes], mag=x.mag, **attrs)


@OPS.register("Unsqueeze", 1.0)
def _unsqueeze(b: Builder) -> object:
    x = b.floats(lambda v: v.rank <= 3)
    if x is None or x.rank > 3:
        return False
    rank = x.rank + b.randint(1, 2)
    axes = sorted(int(a) for a in b.rng.choice(rank, size=rank - x.rank, replace=False))
    dims = iter(x.shape)
    shape = [1 if a in axes else next(dims) for a in range(rank)]
    inputs, attrs = b.axes_input([a - rank if b.opset >= 11 and b.chance(0.3) else a for a in axes], 13)
    return b.emit("Unsqueeze", [x, *inputs], shape, mag=x.mag, **attrs)


@OPS.register("Concat", 1.5)
def _concat(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.randint(0, x.rank - 1)

    def fits(v: Value) -> bool:
        return (
            v.elem == FLOAT
            and v.rank == x.rank
            and all(d == e for a, (d, e) in enumerate(zip(v.shape, x.shape, strict=True)) if a != axis)
        )

    parts = [x]
    for _ in range(b.randint(1, 2)):
        other = b.pick(fits) if b.chance(0.5) else None
        if other is None:
            shape = list(x.shape)
            shape[axis] = b.randint(1, 3)
            other = b.constant(b.normal(shape))
        parts.append(b.bounded(other))
    shape = list(x.shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    if math.prod(shape) > MAX_ELEMENTS:
        return False
    order = [int(i) for i in b.rng.permutation(len(parts))]
    attr_axis = axis - x.rank if b.opset >= 11 and b.chance(0.3) else axis
    return b.emit("Concat", [parts[i] for i in order], shape, mag=max(p.mag for p in parts), axis=attr_axis)


@OPS.register("Split", 1.5)
def _split(b: Builder) -> object:
    x = b.floats(lambda v: any(d >= 2 for d in v.shape))
    if x is None or not any(d >= 2 for d in x.shape):
        return False
    axis = int(b.choice([a for a, d in enumerate(x.shape) if d >= 2]))
    size = x.shape[axis]
    count = b.randint(2, min(3, size))
    cuts = sorted(int(c) for c in b.rng.choice(range(1, size), size=count - 1, replace=False))
    sizes = [e - s for s, e in zip([0, *cuts], [*cuts, size], strict=True)]
    inputs: list[Value] = [x]
    attrs: dict[str, object] = {"axis": axis if b.chance(0.8) else None}
    if attrs["axis"] is None:
        axis = 0
        size = x.shape[0]
        if size < 2:
            return False
        count = 2
        sizes = [size // 2, size - size // 2]
    chunk = -(-size // count)
    if b.opset >= 18 and b.chance(0.4) and size - chunk * (count - 1) > 0:
        attrs["num_outputs"] = count
        sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
    elif b.opset >= 13:
        inputs.append(b.ints(sizes))
    else:
        attrs["split"] = sizes
    names = b.node("Split", inputs, count, **attrs)
    for name, part in zip(names, sizes, strict=True):
        shape = list(x.shape)
        shape[axis] = part
        b.add(Value(name, FLOAT, tuple(shape), mag=x.mag, exact=x.exact))
    return True


@OPS.register("Slice", 1.5, 10)
def _slice(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axes = [a for a in range(x.rank) if b.chance(0.6)] or [b.randint(0, x.rank - 1)]
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for a in axes:
        size = x.shape[a]
        step = int(b.choice([1, 1, 2, -1]))
        if step > 0:
            start = b.randint(0, size - 1)
            end = int(b.choice([b.randint(start + 1, size), INT64_MAX, size + 3]))
        else:
            start = int(b.choice([b.randint(0, size - 1), -1]))
            end = int(b.choice([-INT64_MAX - 1, -size - 5, -1 - size]))
        if b.chance(0.3) and 0 <= start < size:
            start -= size  # the same position counted from the end
        length = len(range(size)[slice(start, end, step)])
        if length == 0:
            return False
        starts.append(start)
        ends.append(end)
        steps.append(step)
        shape[a] = length
    inputs: list[Value | None] = [x, b.ints(starts), b.ints(ends)]
    with_steps = any(s != 1 for s in steps) or b.chance(0.3)
    if axes != list(range(x.rank)) or b.chance(0.5):
        inputs.append(b.ints([a - x.rank if b.opset >= 13 and b.chance(0.3) else a for a in axes]))
    elif with_steps:
        inputs.append(None)  # axes left out by an empty name, steps given
    if with_steps:
        inputs.append(b.ints(steps))
    return b.emit("Slice", inputs, shape, mag=x.mag)


@OPS.register("Gather", 1.5)
def _gather(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.randint(0, x.rank - 1)
    size = x.shape[axis]
    indices = b.pick(lambda v: v.elem == INT64 and 0 < v.upper <= size and v.rank <= 2)
    if indices is None or b.chance(0.5):
        shape = [b.randint(1, 3) for _ in range(b.randint(0, 2))]
        low = -size if b.opset >= 11 else 0
        indices = b.constant(b.rng.integers(low, size, size=shape).astype(np.int64))
    out = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    if math.prod(out) > MAX_ELEMENTS:
        return False
    return b.emit("Gather", [x, indices], out, mag=x.mag, axis=axis if axis or b.chance(0.5) else None)


@OPS.register("GatherElements", 0.7, 11)
def _gather_elements(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.randint(0, x.rank - 1)
    shape = list(x.shape)
    shape[axis] = b.randint(1, 3)
    indices = b.constant(b.rng.integers(-x.shape[axis], x.shape[axis], size=shape).astype(np.int64))
    return b.emit("GatherElements", [x, indices], shape, mag=x.mag, axis=axis)


@OPS.register("Expand", 1.0, 8)
def _expand(b: Builder) -> object:
    x = b.floats(lambda v: v.size <= MAX_ELEMENTS // 4)
    target = [b.randint(2, 3) if d == 1 and b.chance(0.6) else (1 if b.chance(0.2) else d) for d in x.shape]
    if b.chance(0.3):
        target.insert(0, b.randint(1, 2))
    return _with_int_spec(b, "Expand", x, target, broadcast(x.shape, target))


@OPS.register("Tile", 1.0)
def _tile(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1 and v.size <= MAX_ELEMENTS // 4)
    repeats = [b.randint(1, 2) for _ in x.shape]
    return _with_int_spec(b, "Tile", x, repeats, [d * r for d, r in zip(x.shape, repeats, strict=True)])


def _with_int_spec(b: Builder, op: str, x: Value, spec: list[int], shape: Sequence[int]) -> object:
    """``op(x, spec)`` with ``spec`` a constant int64 input, unless the result would be too large."""
    if math.prod(shape) > MAX_ELEMENTS:
        return False
    return b.emit(op, [x, b.ints(spec)], shape, mag=x.mag)


@OPS.register("Pad", 1.5)
def _pad(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1 and v.size <= MAX_ELEMENTS // 4)
    mode = str(b.choice(["constant", "constant", "reflect", "edge"]))
    axes = list(range(x.rank))
    if b.opset >= 18 and b.chance(0.4):
        axes = [a for a in axes if b.chance(0.6)] or [0]
    pads = [[0, 0] for _ in axes]
    for i, a in enumerate(axes):
        for side in (0, 1):
            most = x.shape[a] - 1 if mode == "reflect" else 2
            crop = mode == "constant" and x.shape[a] > 2 and b.opset >= 11
            pads[i][side] = b.randint(-1 if crop else 0, max(most, 0))
    shape = list(x.shape)
    for (begin, end), a in zip(pads, axes, strict=True):
        shape[a] += begin + end
    if min(shape) < 1 or math.prod(shape) > MAX_ELEMENTS:
        return False
    flat = [p[0] for p in pads] + [p[1] for p in pads]
    value = uniform(b, -1, 1)
    if b.opset < 11:
        return b.emit("Pad", [x], shape, mag=x.mag + 1, mode=mode, pads=flat, value=value if b.chance(0.5) else None)
    inputs: list[Value | None] = [x, b.ints(flat)]
    if axes != list(range(x.rank)):
        inputs += [b.scalar(value) if b.chance(0.5) else None, b.ints(axes)]
    elif mode == "constant" and b.chance(0.5):
        inputs.append(b.scalar(value))
    return b.emit("Pad", inputs, shape, mag=x.mag + 1, mode=mode if mode != "constant" or b.chance(0.5) else None)


@OPS.register("Shape", 1.5)
def _shape(b: Builder) -> object:
    """Shape (or Size) of a tensor, then a typical reader: ConstantOfShape, Reshape, Expand or Cast."""
    x = b.floats(lambda v: v.rank >= 1)
    if b.chance(0.2):
        size = b.emit("Size", [x], (), elem=INT64, exact=True, upper=x.size + 1)
        return b.emit("Cast", [size], (), mag=x.size, to=FLOAT)
    start, end = 0, x.rank
    attrs: dict[str, object] = {}
    if b.opset >= 15 and b.chance(0.3):
        start = b.randint(0, x.rank - 1)
        end = b.randint(start + 1, x.rank)
        attrs = {"start": start - x.rank if b.chance(0.3) else start, "end": end if end < x.rank else None}
    dims = x.shape[start:end]
    shape = b.emit("Shape", [x], (len(dims),), elem=INT64, exact=True, upper=max(dims) + 1, **attrs)
    reader = b.randint(0, 3)
    if reader == 0 and b.opset >= 9:
        value = {"value": numpy_helper.from_array(np.array([uniform(b, -2, 2)], np.float32))} if b.chance(0.5) else {}
        return b.emit("ConstantOfShape", [shape], dims, mag=2.0, exact=True, **value)
    if reader == 1:
        other = b.floats(lambda v: v.size == math.prod(dims), make=False)
        if other is not None:
            return b.emit("Reshape", [other, shape], dims, mag=other.mag)
    if reader == 2 and b.opset >= 8:
        other = b.floats(lambda v: v.rank <= len(dims) and broadcast(v.shape, dims) == tuple(dims), make=False)
        if other is not None:
            return b.emit("Expand", [other, shape], dims, mag=other.mag)
    return b.emit("Cast", [shape], shape.shape, mag=max(dims), to=FLOAT)


@OPS.register("Cast", 1.0)
def _cast(b: Builder) -> object:
    x = b.floats()
    kind = b.randint(0, 3)
    if kind == 0:  # through float64 and back: exact, so allowed on perturbable values
        wide = b.emit("Cast", [x], x.shape, elem=DOUBLE, mag=x.mag, to=DOUBLE)
        return b.emit("Cast", [wide], x.shape, mag=x.mag, to=FLOAT)
    if not x.exact:
        return False
    if kind == 1:  # float16 rounds: a discontinuous op
        half = b.emit("Cast", [x], x.shape, elem=TensorProto.FLOAT16, mag=x.mag, to=TensorProto.FLOAT16)
        return b.emit("Cast", [half], x.shape, mag=x.mag, to=FLOAT)
    if kind == 2:
        flag = b.emit("Cast", [x], x.shape, elem=BOOL, to=BOOL)
        return b.emit("Cast", [flag], x.shape, mag=1.0, to=FLOAT)
    small = b.tame(x, 20.0)
    ints = b.emit("Cast", [small], x.shape, elem=INT64, to=INT64)
    return b.emit("Cast", [ints], x.shape, mag=small.mag, to=FLOAT)


@OPS.register("DepthToSpace", 0.7)
def _depth_space(b: Builder) -> object:
    to_space = b.chance(0.5)
    block = b.randint(1, 2)

    def fits(v: Value) -> bool:
        if v.rank != 4:
            return False
        if to_space:
            return v.shape[1] % (block * block) == 0
        return v.shape[2] % block == 0 and v.shape[3] % block == 0

    x = b.floats(fits, make=False)
    n, c, h, w = x.shape if x is not None else (1, block * block * b.randint(1, 2), block * 2, block * 2)
    if x is None:
        x = b.graph_input((n, c, h, w))
    if to_space:
        mode = maybe(b, "mode", lambda: b.choice(["DCR", "CRD"])) if b.opset >= 11 else {}
        shape = (n, c // (block * block), h * block, w * block)
        return b.emit("DepthToSpace", [x], shape, mag=x.mag, blocksize=block, **mode)
    shape = (n, c * block * block, h // block, w // block)
    return b.emit("SpaceToDepth", [x], shape, mag=x.mag, blocksize=block)


@OPS.register("Range", 0.5, 11)
def _range(b: Builder) -> object:
    start, delta = b.randint(-3, 3), int(b.choice([1, 2, -1]))
    count = b.randint(1, 5)
    limit = start + delta * count
    dtype = np.float32 if b.chance(0.6) else np.int64
    bounds = [b.constant(np.array(v, dtype)) for v in (start, limit, delta)]
    elem = FLOAT if dtype == np.float32 else INT64
    value = b.emit("Range", bounds, (count,), elem=elem, mag=abs(start) + abs(limit) + 1, exact=True)
    return value if elem == FLOAT else b.emit("Cast", [value], (count,), mag=value.mag, to=FLOAT)


@OPS.register("EyeLike", 0.5, 9)
def _eye_like(b: Builder) -> object:
    x = b.floats(lambda v: v.rank == 2)
    if x is None or x.rank != 2:
        return False
    k = maybe(b, "k", lambda: b.randint(-1, 1))
    return b.emit("EyeLike", [x], x.shape, mag=1.0, exact=True, **k)


@OPS.register("Trilu", 0.7, 14)
def _trilu(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 2)
    if x is None or x.rank < 2:
        return False
    inputs: list[Value] = [x] + ([b.constant(np.array(b.randint(-1, 1), np.int64))] if b.chance(0.5) else [])
    return b.emit("Trilu", inputs, x.shape, mag=x.mag, **maybe(b, "upper", lambda: b.randint(0, 1)))


@OPS.register("CumSum", 0.7, 11)
def _cumsum(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.axis(x.rank)
    axis_value = b.constant(np.array(axis if b.chance(0.5) else [axis], np.int64))
    attrs = {**maybe(b, "exclusive", lambda: b.randint(0, 1)), **maybe(b, "reverse", lambda: b.randint(0, 1))}
    return b.emit("CumSum", [x, axis_value], x.shape, mag=x.mag * x.shape[axis], **attrs)


@OPS.register("OneHot", 0.5, 11)
def _one_hot(b: Builder) -> object:
    indices = b.pick(lambda v: v.elem == INT64 and v.upper > 0 and v.rank >= 1 and v.size <= 32)
    if indices is None:
        indices = b.constant(b.rng.integers(0, 4, size=(b.randint(1, 3),)).astype(np.int64))
    depth = max(indices.upper, 2) + b.randint(0, 1)
    depth_value = b.constant(np.array(depth, np.int64 if b.chance(0.5) else np.float32))
    values = b.constant(np.array([uniform(b, -1, 0), uniform(b, 0.5, 2)], np.float32))
    axis = b.randint(-indices.rank - 1, indices.rank)
    shape = list(indices.shape)
    shape.insert(axis % (indices.rank + 1), depth)
    return b.emit("OneHot", [indices, depth_value, values], shape, mag=2.0, exact=True, axis=axis)
