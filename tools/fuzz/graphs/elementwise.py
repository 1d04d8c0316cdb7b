"""Elementwise op builders: unary functions, binary and variadic arithmetic, comparisons, logic, Where, Mod."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tools.fuzz.graphs.builder import BOOL, FLOAT, INT64, MAX_ELEMENTS, Builder, broadcast, maybe, uniform
from tools.fuzz.graphs.catalog import OpBuilder, OpFamily

OPS = OpFamily()


@dataclass(frozen=True)
class _Unary:
    opset: int
    needs: str  # "any" | "tame" (|x| <= 3) | "positive" (x >= 1) | "exact" (discontinuous op)
    mag: Callable[[float], float]
    attrs: Callable[[Builder], dict[str, object]] = lambda b: {}


_UNARY: dict[str, _Unary] = {
    "Abs": _Unary(6, "any", lambda m: m),
    "Neg": _Unary(6, "any", lambda m: m),
    "Relu": _Unary(6, "any", lambda m: m),
    "Sigmoid": _Unary(6, "any", lambda m: 1.0),
    "Tanh": _Unary(6, "any", lambda m: 1.0),
    "Exp": _Unary(6, "tame", math.exp),
    "Log": _Unary(6, "positive", lambda m: math.log(m) + 1),
    "Sqrt": _Unary(6, "positive", math.sqrt),
    "Reciprocal": _Unary(6, "positive", lambda m: 1.0),
    "Softplus": _Unary(7, "any", lambda m: m + 1),
    "Softsign": _Unary(7, "any", lambda m: 1.0),
    "Erf": _Unary(9, "any", lambda m: 1.0),
    "Sin": _Unary(7, "tame", lambda m: 1.0),
    "Cos": _Unary(7, "tame", lambda m: 1.0),
    "Atan": _Unary(7, "any", lambda m: 1.6),
    "Asinh": _Unary(9, "any", lambda m: math.log(2 * m + 1) + 1),
    "Sinh": _Unary(9, "tame", math.exp),
    "Cosh": _Unary(9, "tame", math.exp),
    "Elu": _Unary(6, "any", lambda m: m, lambda b: maybe(b, "alpha", lambda: uniform(b, 0.1, 2))),
    "Selu": _Unary(6, "any", lambda m: 2 * m, lambda b: maybe(b, "gamma", lambda: uniform(b, 0.5, 1.5))),
    "LeakyRelu": _Unary(6, "any", lambda m: m, lambda b: maybe(b, "alpha", lambda: uniform(b, 0.01, 0.5))),
    "HardSigmoid": _Unary(6, "any", lambda m: 1.0, lambda b: maybe(b, "alpha", lambda: uniform(b, 0.1, 0.5))),
    "HardSwish": _Unary(14, "any", lambda m: m),
    "Celu": _Unary(12, "any", lambda m: m, lambda b: maybe(b, "alpha", lambda: uniform(b, 0.2, 2))),
    "Mish": _Unary(18, "any", lambda m: m),
    "Gelu": _Unary(20, "any", lambda m: m, lambda b: maybe(b, "approximate", lambda: b.choice(["none", "tanh"]))),
    "ThresholdedRelu": _Unary(10, "exact", lambda m: m, lambda b: maybe(b, "alpha", lambda: uniform(b, 0, 1))),
    "Floor": _Unary(6, "exact", lambda m: m + 1),
    "Ceil": _Unary(6, "exact", lambda m: m + 1),
    "Round": _Unary(11, "exact", lambda m: m + 1),
    "Sign": _Unary(9, "exact", lambda m: 1.0),
    "Shrink": _Unary(9, "exact", lambda m: m + 1, lambda b: {"bias": uniform(b, 0, 1), "lambd": uniform(b, 0, 1)}),
    "Identity": _Unary(1, "any", lambda m: m),
}


def _unary(op: str) -> OpBuilder:
    spec = _UNARY[op]

    def build(b: Builder) -> object:
        x = b.floats(exact=spec.needs == "exact")
        if x is None:
            return False
        if spec.needs == "tame":
            x = b.tame(x)
        elif spec.needs == "positive":
            x = b.positive(x)
        return b.emit(op, [x], x.shape, mag=spec.mag(x.mag), positive=op == "Sqrt" and x.positive, **spec.attrs(b))

    return build


for _name, _spec in _UNARY.items():
    OPS.register(_name, 1.0, _spec.opset)(_unary(_name))


@OPS.register("IsNaN", 0.3, 10)
def _is_special(b: Builder) -> object:
    x = b.floats()
    op = "IsNaN" if b.chance(0.5) else "IsInf"
    flag = b.emit(op, [x], x.shape, elem=BOOL, exact=True)
    return b.emit("Not", [flag], x.shape, elem=BOOL) if b.chance(0.5) else flag


_BINARY_MAG: dict[str, Callable[[float, float], float]] = {
    "Add": lambda m, n: m + n,
    "Sub": lambda m, n: m + n,
    "Mul": lambda m, n: m * n,
    "Max": max,
    "Min": max,
}


def _binary(op: str) -> OpBuilder:
    def build(b: Builder) -> object:
        x = b.floats()
        y = b.partner(x)
        if op == "Mul":
            x, y = b.tame(x, 8.0), b.tame(y, 8.0)
        shape = broadcast(x.shape, y.shape)
        operands = [x, y] if b.chance(0.5) else [y, x]
        return b.emit(op, operands, shape, mag=_BINARY_MAG[op](x.mag, y.mag))

    return build


for _name in _BINARY_MAG:  # Max and Min broadcast from opset 8
    OPS.register(_name, 2.0 if _name in ("Add", "Mul") else 1.0, 8 if _name in ("Max", "Min") else 7)(_binary(_name))


@OPS.register("Div", 1.0)
def _div(b: Builder) -> object:
    x = b.floats()
    y = b.positive(b.partner(x))
    return b.emit("Div", [x, y], broadcast(x.shape, y.shape), mag=x.mag)


@OPS.register("Pow", 1.0)
def _pow(b: Builder) -> object:
    base = b.positive(b.tame(b.floats(), 4.0))
    exponent = b.scalar(float(b.choice([0.5, 1.5, 2.0, -1.0, 3.0]))) if b.chance(0.5) else b.tame(b.partner(base), 1.0)
    shape = broadcast(base.shape, exponent.shape)
    return b.emit("Pow", [base, exponent], shape, mag=base.mag ** max(exponent.mag, 1.0) + 1)


@OPS.register("Sum", 1.0, 8)
def _variadic(b: Builder) -> object:
    op = str(b.choice(["Sum", "Mean", "Max", "Min"]))
    first = b.floats()
    operands = [first]
    for _ in range(b.randint(0, 2)):
        operands.append(b.partner(first))
    shape = broadcast(*(v.shape for v in operands))
    if shape is None or math.prod(shape) > MAX_ELEMENTS:  # partners fit the first, not always each other
        operands = operands[:1]
        shape = first.shape
    mag = sum(v.mag for v in operands) if op == "Sum" else max(v.mag for v in operands)
    return b.emit(op, operands, shape, mag=mag)


@OPS.register("PRelu", 1.0)
def _prelu(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    if x.rank >= 3 and b.chance(0.5):
        slope_shape: tuple[int, ...] = (x.shape[1], *[1] * (x.rank - 2))
    else:
        slope_shape = tuple(1 if b.chance(0.4) else d for d in x.shape[b.randint(0, x.rank - 1) :])
    slope = b.constant((b.rng.random(slope_shape) * 0.5).astype(np.float32))
    return b.emit("PRelu", [x, slope], x.shape, mag=x.mag)


@OPS.register("Greater", 1.5)
def _compare(b: Builder) -> object:
    ops = (
        ["Greater", "Less"]
        + (["Equal"] if b.opset >= 11 else [])
        + (["GreaterOrEqual", "LessOrEqual"] * (b.opset >= 12))
    )
    x = b.floats(exact=True)
    if x is None or not x.exact:
        return False
    y = b.partner(x, exact=True)
    op = str(b.choice(ops))
    if op == "Equal":  # equal floats are rare; compare rounded values so both outcomes happen
        x = b.emit("Floor", [x], x.shape, mag=x.mag + 1)
        y = b.emit("Floor", [y], y.shape, mag=y.mag + 1)
    return b.emit(op, [x, y], broadcast(x.shape, y.shape), elem=BOOL)


@OPS.register("And", 1.0)
def _logical(b: Builder) -> object:
    x = b.pick(lambda v: v.elem == BOOL)
    if x is None:
        return False
    if b.chance(0.3):
        return b.emit("Not", [x], x.shape, elem=BOOL)
    y = b.pick(lambda v: v.elem == BOOL and broadcast(v.shape, x.shape) is not None)
    if y is None or b.chance(0.3):
        y = b.constant(b.rng.random(b.broadcast_shape(x.shape)) < 0.5)
    return b.emit(str(b.choice(["And", "Or", "Xor"])), [x, y], broadcast(x.shape, y.shape), elem=BOOL)


@OPS.register("Where", 1.5, 9)
def _where(b: Builder) -> object:
    cond = b.pick(lambda v: v.elem == BOOL and v.size <= MAX_ELEMENTS // 2)
    x = b.floats()
    if cond is None:
        source = b.floats(exact=True)
        if source is None or not source.exact:
            return False
        cond = b.emit("Greater", [source, b.scalar(0.0)], source.shape, elem=BOOL)
    y = b.partner(x)
    shape = broadcast(cond.shape, x.shape, y.shape)
    if shape is None or math.prod(shape) > MAX_ELEMENTS:
        y = b.constant(b.normal(()))
        shape = broadcast(cond.shape, x.shape)
        if shape is None:
            x = b.constant(b.normal(cond.shape))
            shape = cond.shape
    return b.emit("Where", [cond, x, y], shape, mag=max(x.mag, y.mag), exact=x.exact and y.exact)


@OPS.register("Mod", 0.5, 10)
def _mod(b: Builder) -> object:
    ints = b.pick(lambda v: v.elem == INT64 and v.upper > 0)
    if ints is not None and b.chance(0.5):
        divisor = b.randint(1, 4)
        return b.emit("Mod", [ints, b.constant(np.array(divisor, np.int64))], ints.shape, elem=INT64, upper=divisor)
    x = b.floats(exact=True)
    if x is None or not x.exact:
        return False
    divisor_value = b.positive(b.partner(x, exact=True))
    return b.emit("Mod", [x, divisor_value], broadcast(x.shape, divisor_value.shape), mag=x.mag, fmod=1)


@OPS.register("Add/int64", 1.0)
def _int_arith(b: Builder) -> object:
    x = b.pick(lambda v: v.elem == INT64 and v.upper > 0 and v.rank <= 4)
    if x is None:
        return False
    op = str(b.choice(["Add", "Mul", "Max", "Min"] if b.opset >= 12 else ["Add", "Mul"]))
    c = b.randint(0 if op != "Mul" else 1, 3)
    upper = {"Add": x.upper + c, "Mul": (x.upper - 1) * c + 1, "Max": max(x.upper, c + 1), "Min": x.upper}[op]
    result = b.emit(op, [x, b.constant(np.array(c, np.int64))], x.shape, elem=INT64, upper=upper)
    if b.chance(0.5):
        return b.emit("Cast", [result], result.shape, mag=upper, to=FLOAT)
    return result
