"""Neural-network op builders: MatMul/Einsum, Softmax, normalizations, Dropout, Clip, TopK and pooling.

BatchNormalization (``batchnorm``, ``bn_params``), Clip (``clip``) and image-shaped operands (``image``) are also
what the rule patterns are built from (see ``patterns``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tools.fuzz.graphs.builder import (
    BOOL,
    FLOAT,
    INT64,
    Builder,
    Value,
    broadcast,
    maybe,
    uniform,
    window_length,
)
from tools.fuzz.graphs.catalog import OpFamily

OPS = OpFamily()


@OPS.register("MatMul", 1.5)
def _matmul(b: Builder) -> object:
    """MatMul with a constant or another tensor; sometimes + Relu (not fused: FusedGemm wants a Gemm)."""
    x = b.tame(b.floats(lambda v: v.rank >= 1), 8.0)
    k = x.shape[-1]
    n = b.randint(1, 5)
    kind = b.randint(0, 3)
    if kind == 0 and x.rank >= 3:
        weight_shape: tuple[int, ...] = (*x.shape[:-2], k, n)
    elif kind == 1:
        weight_shape = (k,)
    else:
        weight_shape = (k, n)
    weight = b.pick(lambda v: v.elem == FLOAT and v.shape == weight_shape) if b.chance(0.3) else None
    weight = b.tame(weight, 8.0) if weight is not None else b.constant(b.normal(weight_shape, 1 / math.sqrt(k)))
    lead = x.shape[:-1] if x.rank >= 2 else ()
    shape = lead + weight_shape[-1:] if len(weight_shape) >= 2 else lead
    if len(weight_shape) > 2:
        shape = (*broadcast(x.shape[:-2], weight_shape[:-2]), x.shape[-2], n)
    result = b.emit("MatMul", [x, weight], shape, mag=x.mag * weight.mag * math.sqrt(k) + 1)
    return b.emit("Relu", [result], shape, mag=result.mag) if b.chance(0.3) else result


@OPS.register("Einsum", 0.5, 12)
def _einsum(b: Builder) -> object:
    x = b.tame(b.floats(lambda v: v.rank in (2, 3), make=False) or b.graph_input((2, 3)), 8.0)
    if x.rank == 3:
        n = b.randint(1, 4)
        w = b.constant(b.normal((x.shape[0], x.shape[2], n), 0.5))
        return b.emit("Einsum", [x, w], (x.shape[0], x.shape[1], n), mag=x.mag * x.shape[2], equation="bij,bjk->bik")
    kind = b.randint(0, 2)
    if kind == 0:
        return b.emit("Einsum", [x], x.shape[::-1], mag=x.mag, equation="ij->ji")
    if kind == 1:
        return b.emit("Einsum", [x], x.shape[:1], mag=x.mag * x.shape[1], equation="ij->i")
    n = b.randint(1, 4)
    w = b.constant(b.normal((x.shape[1], n), 0.5))
    return b.emit("Einsum", [x, w], (x.shape[0], n), mag=x.mag * x.shape[1], equation="ij,jk->ik")


@OPS.register("Softmax", 1.5)
def _softmax(b: Builder) -> object:
    op = str(b.choice(["Softmax", "LogSoftmax", "Hardmax"]))
    x = b.floats(lambda v: v.rank >= 1, exact=op == "Hardmax")
    if x is None or (op == "Hardmax" and not x.exact):
        return False
    axis = b.axis(x.rank) if b.opset >= 11 else b.randint(0, x.rank - 1)
    mag = {"Softmax": 1.0, "Hardmax": 1.0, "LogSoftmax": 2 * x.mag + math.log(x.size) + 1}[op]
    default_fits = (b.opset >= 13 and axis in (-1, x.rank - 1)) or (b.opset < 13 and axis == 1)
    return b.emit(op, [x], x.shape, mag=mag, axis=None if default_fits and b.chance(0.3) else axis)


def _epsilon(b: Builder, x: Value) -> float | None:
    """Normalizations divide by a standard deviation: a perturbable input gets a large epsilon."""
    if x.exact:
        return float(b.choice([1e-5, 1e-3, 0.1])) if b.chance(0.5) else None
    return float(b.choice([0.01, 0.1]))


@OPS.register("LayerNormalization", 1.0, 17)
def _layer_norm(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.axis(x.rank) if b.chance(0.8) else -1
    normalized = x.shape[axis:]
    scale = b.constant(1 + b.normal(normalized, 0.3))
    inputs = [x, scale] + ([b.constant(b.normal(normalized, 0.3))] if b.chance(0.5) else [])
    outputs = 3 if b.chance(0.25) else 1
    attr_axis = None if axis == -1 and b.chance(0.5) else axis
    names = b.node("LayerNormalization", inputs, outputs, axis=attr_axis, epsilon=_epsilon(b, x))
    mag = math.sqrt(math.prod(normalized)) * scale.mag + 1
    b.add(Value(names[0], FLOAT, x.shape, mag=mag, exact=x.exact))
    stats_shape = x.shape[: axis % x.rank] + (1,) * len(normalized)
    for name in names[1:]:
        b.add(Value(name, FLOAT, stats_shape, mag=x.mag + 300, exact=x.exact))
    return True


@OPS.register("InstanceNormalization", 1.0)
def _instance_norm(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 3 and v.shape[1] <= 8, make=False) or b.graph_input((1, 2, 3, 3))
    channels = x.shape[1]
    params = [b.constant(1 + b.normal((channels,), 0.3)), b.constant(b.normal((channels,), 0.3))]
    mag = math.sqrt(math.prod(x.shape[2:])) * params[0].mag + params[1].mag
    return b.emit("InstanceNormalization", [x, *params], x.shape, mag=mag, epsilon=_epsilon(b, x))


@OPS.register("LRN", 0.5)
def _lrn(b: Builder) -> object:
    x = b.floats(lambda v: v.rank == 4, make=False) or b.graph_input((1, 3, 2, 2))
    attrs = {"size": int(b.choice([1, 3, 5])), **maybe(b, "alpha", lambda: uniform(b, 0.001, 0.1))}
    attrs.update(maybe(b, "beta", lambda: uniform(b, 0.5, 1)))
    attrs.update(maybe(b, "bias", lambda: uniform(b, 1, 2)))
    return b.emit("LRN", [x], x.shape, mag=x.mag, **attrs)


@OPS.register("MeanVarianceNormalization", 0.5, 9)
def _mvn(b: Builder) -> object:
    x = b.floats(lambda v: v.rank == 4, exact=True, make=False)
    if x is None or not x.exact or b.opset >= 13:  # onnx's checker rejects its own opset-13 function body
        return False
    axes = b.choice([None, [2, 3], [1, 2, 3], [0, 1]])
    return b.emit("MeanVarianceNormalization", [x], x.shape, mag=math.sqrt(x.size), axes=axes)


@OPS.register("BatchNormalization", 0.7)
def _batchnorm_alone(b: Builder) -> object:
    """BatchNormalization after something other than a convolution: nothing to fold."""
    x = b.floats(lambda v: v.rank >= 2 and v.shape[1] <= 16)
    if x is None or x.rank < 2:
        return False
    return batchnorm(b, x, bn_params(b, x.shape[1], "constant"), training=False)


_BN_KEYS = ("gamma", "beta", "mean", "var")


def bn_params(b: Builder, channels: int, kind: str, dtype: type = np.float32) -> list[Value]:
    """gamma, beta, mean, var: away from the identity so folding is real arithmetic.

    ``kind`` is "constant", or a near-miss: "input" (one parameter is fed at run time), "overridable"
    (one is an initializer that is also a graph input) or "computed" (one is computed in the graph).
    """
    values = {
        "gamma": 1.0 + 0.3 * b.rng.standard_normal(channels),
        "beta": 0.2 * b.rng.standard_normal(channels),
        "mean": 0.2 * b.rng.standard_normal(channels),
        "var": 0.2 + b.rng.random(channels),
    }
    odd = str(b.choice(_BN_KEYS)) if kind != "constant" else ""
    params = []
    for key in _BN_KEYS:
        array = values[key].astype(dtype)
        if key != odd:
            params.append(b.constant(array))
        elif kind == "overridable":
            params.append(b.overridable(array, prefix=f"bn_{key}"))
        elif kind == "input" and key != "var":
            params.append(replace(b.graph_input((channels,)), mag=4.0))
        else:  # a parameter computed at run time (var through Abs + 1, so it stays positive)
            source = b.graph_input((channels,)) if key == "var" else b.constant(array)
            params.append(
                b.positive(source) if key == "var" else b.emit("Identity", [source], (channels,), mag=source.mag)
            )
    return params


def batchnorm(b: Builder, x: Value, params: list[Value], training: bool) -> Value:
    """BatchNormalization of ``x`` (inference mode unless ``training``; then 3 outputs, as ONNX requires)."""
    attrs: dict[str, object] = {"epsilon": float(b.choice([1e-5, 1e-3, 0.01])) if b.chance(0.4) else None}
    attrs["momentum"] = uniform(b, 0.5, 0.99) if b.chance(0.2) else None
    if b.opset >= 14 and (training or b.chance(0.2)):
        attrs["training_mode"] = int(training)
    if b.opset < 9:
        attrs["spatial"] = 1 if b.chance(0.3) else None
    names = b.node("BatchNormalization", [x, *params], 3 if training else 1, **attrs)
    gain = params[0].mag / math.sqrt(0.2) if all(p.const for p in params) else 10.0
    mag = (x.mag + params[2].mag) * gain + params[1].mag
    value = b.add(Value(names[0], x.elem, x.shape, mag=mag, exact=False))
    for name in names[1:]:
        b.add(Value(name, FLOAT, (x.shape[1],), mag=10.0, exact=False))
    return value


@OPS.register("Dropout", 0.7)
def _dropout(b: Builder) -> object:
    x = b.floats()
    inputs: list[Value | None] = [x]
    attrs: dict[str, object] = {}
    if b.opset >= 12:
        if b.chance(0.5):
            inputs.append(b.scalar(uniform(b, 0, 0.9)))
            if b.chance(0.4):
                inputs.append(b.constant(np.array(False)))
    elif b.chance(0.5):
        attrs["ratio"] = uniform(b, 0, 0.9)
    mask = b.opset >= 10 and b.chance(0.4)  # before opset 10 the mask has the data's type
    names = b.node("Dropout", inputs, 2 if mask else 1, **attrs)
    b.add(Value(names[0], FLOAT, x.shape, mag=x.mag, exact=x.exact))
    if mask:
        b.add(Value(names[1], BOOL, x.shape))
    return True


@OPS.register("Clip", 1.0)
def _clip_alone(b: Builder) -> object:
    return clip(b, b.floats())


def clip(b: Builder, x: Value) -> Value:
    """Clip in the attribute form (opset < 11) or with optional bound inputs, static or not."""
    low, high = sorted((uniform(b, -2, 0.5), uniform(b, 0, 6)))
    if b.opset >= 11 and b.chance(0.05):
        low, high = high, low  # min > max: every value becomes max (Clip-6 refuses it)
    mag = max(abs(low), abs(high)) + 0.1
    if b.opset < 11:
        attrs = {"min": low if b.chance(0.7) else None, "max": high if b.chance(0.7) else None}
        return b.emit("Clip", [x], x.shape, mag=x.mag if attrs["max"] is None else mag, **attrs)
    present = int(b.choice([0, 1, 2, 3, 3, 3]))  # bit 0: min, bit 1: max
    inputs: list[Value | None] = [x]
    for bit, bound in ((1, low), (2, high)):
        inputs.append(_bound(b, bound) if present & bit else None)
    while inputs[-1] is None:
        inputs.pop()
    return b.emit("Clip", inputs, x.shape, mag=x.mag if not present & 2 else mag)


def _bound(b: Builder, bound: float) -> Value:
    """A scalar Clip bound: mostly a constant, sometimes a near-miss the fusion must not take."""
    kind = b.randint(0, 9)
    if kind <= 6:
        return b.scalar(bound)
    if kind == 7:
        return b.overridable(np.array(bound, np.float32), prefix="clip_bound")
    if kind == 8:
        return b.graph_input(())
    source = b.constant(np.array([bound, bound + 1], np.float32))
    return b.emit("ReduceMin", [source], (), mag=abs(bound) + 1, keepdims=0)


@OPS.register("TopK", 1.0, 10)
def _topk(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.axis(x.rank)
    k = b.randint(1, x.shape[axis])
    shape = list(x.shape)
    shape[axis] = k
    attrs = {"axis": axis if axis != -1 or b.chance(0.5) else None}
    if b.opset >= 11:
        attrs["largest"] = b.randint(0, 1) if b.chance(0.5) else None
        attrs["sorted"] = 0 if x.exact and b.chance(0.2) else None
    values, indices = b.node("TopK", [x, b.ints([k])], 2, **attrs)
    b.add(Value(values, FLOAT, tuple(shape), mag=x.mag, exact=x.exact))
    if x.exact:  # the indices jump when a rewrite perturbs near-equal values
        b.add(Value(indices, INT64, tuple(shape), upper=x.shape[axis]))
    return True


def _spatial(b: Builder, dims: int) -> tuple[int, ...]:
    return tuple(b.randint(2, 4) if dims == 3 else b.randint(3, 7) for _ in range(dims))


def image(b: Builder, max_channels: int = 8, dims: int | None = None) -> Value:
    """An N,C,spatial... float tensor: one of the graph's, or a new input."""

    def fits(v: Value) -> bool:
        ok = 3 <= v.rank <= 5 and v.shape[1] <= max_channels and all(d <= 10 for d in v.shape[2:])
        return ok and (dims is None or v.rank == dims + 2)

    x = b.floats(fits, make=False) if b.chance(0.6) else None
    if x is None:
        spatial_dims = dims or int(b.choice([1, 2, 2, 2, 3]))
        shape = (b.randint(1, 2), b.randint(1, max_channels), *_spatial(b, spatial_dims))
        x = b.graph_input(shape, symbolic=b.chance(0.15))
    return x


@OPS.register("MaxPool", 1.5)
def _pool(b: Builder) -> object:
    x = image(b)
    op = str(b.choice(["MaxPool", "AveragePool", "LpPool", "MaxPool"]))
    spatial = x.shape[2:]
    kernel = [b.randint(1, min(3, d)) for d in spatial]
    strides = [b.randint(1, 2) for _ in spatial]
    dilations = [
        b.randint(1, 2) if op == "MaxPool" and b.opset >= 10 and k * 2 <= d else 1
        for k, d in zip(kernel, spatial, strict=True)
    ]
    pads = [b.randint(0, k - 1) if op != "LpPool" or b.opset >= 11 else 0 for k in kernel * 2]
    ceil = op != "LpPool" and b.opset >= 10 and b.chance(0.3)
    out = [
        window_length(d, k, s, dl, (pads[i], pads[i + len(spatial)]), ceil)
        for i, (d, k, s, dl) in enumerate(zip(spatial, kernel, strides, dilations, strict=True))
    ]
    if min(out) < 1:
        return False
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides if any(s > 1 for s in strides) else None}
    attrs["pads"] = pads if any(pads) else None
    attrs["dilations"] = dilations if any(d > 1 for d in dilations) else None
    attrs["ceil_mode"] = 1 if ceil else None
    if op == "AveragePool":
        attrs["count_include_pad"] = b.randint(0, 1) if b.chance(0.5) else None
    if op == "LpPool":
        attrs["p"] = b.randint(1, 2) if b.chance(0.5) else None
        if b.opset < 11:
            attrs.pop("pads")
    shape = (*x.shape[:2], *out)
    mag = x.mag * math.prod(kernel) if op == "LpPool" else x.mag
    if op == "MaxPool" and x.exact and b.opset >= 8 and b.chance(0.3):
        names = b.node("MaxPool", [x], 2, storage_order=b.randint(0, 1) if b.chance(0.5) else None, **attrs)
        b.add(Value(names[0], FLOAT, shape, mag=mag))
        b.add(Value(names[1], INT64, shape, upper=x.size))
        return True
    return b.emit(op, [x], shape, mag=mag, **attrs)


@OPS.register("GlobalAveragePool", 1.0)
def _global_pool(b: Builder) -> object:
    x = image(b, 16)
    op = str(b.choice(["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]))
    shape = (*x.shape[:2], *[1] * (x.rank - 2))
    mag = x.mag * math.prod(x.shape[2:]) if op == "GlobalLpPool" else x.mag
    return b.emit(op, [x], shape, mag=mag)
