"""The patterns the rewrite rules match, and their near-misses.

On purpose the generator builds what the rules match (Conv/ConvTranspose -> BatchNormalization -> Relu/Clip,
Gemm -> Relu) and their near-misses (a shared, captured or exposed intermediate, a non-constant weight or bound,
BatchNormalization in training mode, float64 Gemm, float16 Conv), because random wiring alone would almost never
line them up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from onnx import TensorProto

from tools.fuzz.graphs.builder import DOUBLE, FLOAT, MAX_ELEMENTS, Builder, Value, uniform, window_length
from tools.fuzz.graphs.catalog import OpFamily
from tools.fuzz.graphs.control import if_reading
from tools.fuzz.graphs.nn import batchnorm, bn_params, clip, image

OPS = OpFamily()


def _activation(b: Builder, x: Value, fusable: Sequence[str]) -> Value:
    """Relu or Clip most of the time (what the fusion matches), else an activation it does not fuse."""
    roll = b.rng.random()
    if roll < 0.45 and "Relu" in fusable:
        return b.emit("Relu", [x], x.shape, mag=x.mag)
    if roll < 0.85:
        return clip(b, x)
    op = str(b.choice(["LeakyRelu", "Sigmoid", "HardSwish" if b.opset >= 14 else "Elu"]))
    return b.emit(op, [x], x.shape, mag=x.mag)


def _near_miss_reader(b: Builder, value: Value) -> None:
    """Sometimes give an intermediate a second reader (a node or a subgraph) or make it a graph output.

    The rules must then leave it alone: fusing it away would lose a value someone still reads.
    """
    roll = b.rng.random()
    if roll < 0.07:
        b.expose(value)
    elif value.elem != FLOAT:
        return  # ONNX Runtime has few float16 kernels on CPU: no reader beyond being an output
    elif roll < 0.14:
        b.emit("ReduceMean", [value], (), elem=value.elem, mag=value.mag, keepdims=0)
    elif roll < 0.17 and value.elem == FLOAT and b.opset >= 11:
        if_reading(b, value)
    elif roll < 0.2:
        b.add(value)  # free for any later op to read


def _conv_weight(b: Builder, shape: tuple[int, ...], fan_in: int, dtype: type = np.float32) -> Value:
    """A convolution weight: a constant, or (near-miss) a graph input or computed tensor."""
    array = b.normal(shape, 1 / math.sqrt(max(fan_in, 1))).astype(dtype)
    kind = b.randint(0, 19) if dtype == np.float32 else 0
    if kind < 17:
        return b.constant(array)
    if kind == 17:
        return b.overridable(array, prefix="weight")
    if kind == 18:
        return b.emit("Identity", [b.constant(array)], shape, mag=float(np.abs(array).max()), pool=False)
    return replace(b.graph_input(shape), mag=1.0)


@dataclass(frozen=True)
class _ConvShape:
    """What a convolution's attributes make of its input: output shape, weight shape, fan-in."""

    attrs: dict[str, object]
    shape: tuple[int, ...]
    weight: tuple[int, ...]
    fan_in: int
    group: int


def _conv_shape(b: Builder, x: Value, transpose: bool) -> _ConvShape | None:
    """Random attributes (group, kernel, strides, dilations, pads or auto_pad) and what they give."""
    c_in, spatial = x.shape[1], x.shape[2:]
    groups = [1] + ([c_in] if c_in > 1 else []) + [g for g in range(2, c_in) if c_in % g == 0]
    group = int(b.choice(groups)) if b.chance(0.5) else 1
    c_out = group * b.randint(1, 3) if group > 1 else b.randint(1, 6)
    kernel = [b.randint(1, min(3, d)) for d in spatial]
    strides = [b.randint(1, 2) for _ in spatial]
    dilations = [
        b.randint(1, 2) if (k - 1) * 2 + 1 <= d and b.chance(0.4) else 1 for k, d in zip(kernel, spatial, strict=True)
    ]
    pads = [b.randint(0, k - 1) for k in kernel * 2]
    n = len(spatial)
    attrs: dict[str, object] = {"group": group if group > 1 or b.chance(0.3) else None}
    attrs["kernel_shape"] = kernel if b.chance(0.6) else None
    attrs["strides"] = strides if any(s > 1 for s in strides) or b.chance(0.2) else None
    attrs["dilations"] = dilations if any(d > 1 for d in dilations) else None
    fan_in = c_in // group * math.prod(kernel)
    if transpose:
        attrs["pads"] = pads if any(pads) else None
        output_padding = [b.randint(0, s - 1) if b.chance(0.3) else 0 for s in strides]
        attrs["output_padding"] = output_padding if any(output_padding) else None
        out = [
            s * (d - 1) + op + (k - 1) * dl + 1 - pads[i] - pads[i + n]
            for i, (d, k, s, dl, op) in enumerate(zip(spatial, kernel, strides, dilations, output_padding, strict=True))
        ]
        weight = (c_in, c_out // group, *kernel)
    else:
        auto_pad = str(b.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        if any(d > 1 for d in dilations) and auto_pad.startswith("SAME"):
            auto_pad = "NOTSET"  # ONNX Runtime does not implement dilated SAME padding
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = [-(-d // s) for d, s in zip(spatial, strides, strict=True)]
        else:
            pairs = [(0, 0) if auto_pad == "VALID" else (pads[i], pads[i + n]) for i in range(n)]
            out = [
                window_length(d, k, s, dl, p)
                for d, k, s, dl, p in zip(spatial, kernel, strides, dilations, pairs, strict=True)
            ]
            attrs["pads"] = pads if auto_pad == "NOTSET" and any(pads) else None
        attrs["auto_pad"] = auto_pad if auto_pad != "NOTSET" or b.chance(0.1) else None
        weight = (c_out, c_in // group, *kernel)
    shape = (x.shape[0], c_out, *out)
    if min(out) < 1 or math.prod(shape) > MAX_ELEMENTS:
        return None
    return _ConvShape(attrs, shape, weight, fan_in, group)


@OPS.register("Conv", 7.0)
def _conv_pattern(b: Builder) -> object:
    """Conv or ConvTranspose (bias or not, grouped, depthwise, 1-3 spatial dims) [-> BN] [-> Relu/Clip].

    Now and then the Conv runs in float16 (cast in and out): BatchNormalization folding applies there
    too, the float32-only activation fusion must not.
    """
    transpose = b.chance(0.25)
    x = b.bounded(image(b))
    geometry = _conv_shape(b, x, transpose)
    if geometry is None:
        return False
    half = not transpose and b.chance(0.06)
    dtype, elem = (np.float16, TensorProto.FLOAT16) if half else (np.float32, FLOAT)
    if half:
        x = b.emit("Cast", [x], x.shape, elem=elem, mag=x.mag, to=elem, pool=False)
    c_out = geometry.shape[1]
    weight = _conv_weight(b, geometry.weight, geometry.fan_in, dtype)
    inputs: list[Value | None] = [x, weight]
    bias_kind = b.randint(0, 10)
    if bias_kind >= 4:
        bias = (0.2 * b.rng.standard_normal(c_out)).astype(dtype)
        inputs.append(b.constant(bias) if bias_kind < 9 else b.overridable(bias))
    elif bias_kind == 3 and b.chance(0.5):
        inputs.append(None)  # the optional bias spelled as an empty name
    op = "ConvTranspose" if transpose else "Conv"
    mag = x.mag * weight.mag * math.sqrt(geometry.fan_in) + 1
    y = b.emit(op, inputs, geometry.shape, elem=elem, mag=mag, exact=False, pool=False, **geometry.attrs)
    if b.chance(0.7):
        _near_miss_reader(b, y)
        kind = "constant" if half else str(b.choice(["constant"] * 12 + ["input", "overridable", "computed"]))
        training = b.opset >= 14 and not half and b.chance(0.06)
        y = batchnorm(b, y, bn_params(b, c_out, kind, dtype), training)
        b.pool.remove(y)  # the BN output is the pattern's, not yet free for others to read
    if b.chance(0.7):
        _near_miss_reader(b, y)
        y = b.emit("Relu", [y], y.shape, elem=elem, mag=y.mag) if half else _activation(b, y, ("Relu", "Clip"))
        b.pool.pop()
    if half:
        y = b.emit("Cast", [y], y.shape, mag=y.mag, to=FLOAT, pool=False)
    b.pattern_results.add(y.name)
    return b.add(y)


@OPS.register("Gemm", 4.0)
def _gemm_pattern(b: Builder) -> object:
    """Gemm (transA/transB, alpha/beta, C absent or broadcast) [-> Relu], sometimes in float64."""
    a = b.floats(lambda v: v.rank == 2 and v.size <= 64, make=False)
    if a is None:
        source = b.floats(lambda v: v.rank >= 2 and v.size <= 64, make=False)
        if source is not None and b.chance(0.6):
            a = b.emit("Flatten", [source], (source.shape[0], math.prod(source.shape[1:])), mag=source.mag)
        else:
            a = b.graph_input((b.randint(1, 4), b.randint(1, 6)), symbolic=b.chance(0.1))
    a = b.tame(a, 8.0)
    trans_a, trans_b = b.chance(0.3), b.chance(0.4)
    m, k = a.shape[::-1] if trans_a else a.shape
    n = b.randint(1, 6)
    double = b.chance(0.12)
    dtype = np.float64 if double else np.float32
    weight_array = b.normal((n, k) if trans_b else (k, n), 1 / math.sqrt(k)).astype(dtype)
    kind = b.randint(0, 9)
    if kind < 7 or double:
        weight = b.constant(weight_array)
    elif kind == 7:
        weight = b.overridable(weight_array, prefix="gemm_weight")
    elif kind == 8:
        weight = b.emit("Identity", [b.constant(weight_array)], weight_array.shape, mag=1.0, pool=False)
    else:
        weight = replace(b.graph_input(weight_array.shape), mag=1.0)
    inputs: list[Value | None] = [a, weight]
    c_shapes = [(n,), (1, n), (m, 1), (m, n), ()]
    if b.opset < 11 or b.chance(0.75):
        c_shape = c_shapes[b.randint(0, 4)]
        bias = (0.2 * b.rng.standard_normal(c_shape)).astype(dtype)
        inputs.append(b.constant(bias) if double or b.chance(0.9) else b.graph_input(c_shape))
    if double:
        inputs = [b.emit("Cast", [a], a.shape, elem=DOUBLE, mag=a.mag, to=DOUBLE, pool=False), *inputs[1:]]
    attrs = {"transA": 1 if trans_a else None, "transB": 1 if trans_b else None}
    attrs["alpha"] = uniform(b, 0.2, 2) if b.chance(0.3) else None
    attrs["beta"] = uniform(b, 0.2, 2) if len(inputs) == 3 and b.chance(0.3) else None
    elem = DOUBLE if double else FLOAT
    y = b.emit(
        "Gemm",
        inputs,
        (m, n),
        elem=elem,
        mag=a.mag * weight.mag * math.sqrt(k) * 2 + 1,
        exact=False,
        pool=False,
        **attrs,
    )
    if b.chance(0.75):
        _near_miss_reader(b, y)
        y = b.emit("Relu", [y], y.shape, elem=elem, mag=y.mag, pool=False) if double else _activation(b, y, ("Relu",))
        if not double:
            b.pool.pop()
    if double:
        y = b.emit("Cast", [y], y.shape, mag=y.mag, to=FLOAT, pool=False)
    b.pattern_results.add(y.name)
    return b.add(y)
