"""Reduction op builders: the Reduce* family (axes as attribute or input, keepdims) and ArgMax/ArgMin."""

from __future__ import annotations

import math
from collections.abc import Callable

from tools.fuzz.graphs.builder import INT64, Builder, Value, maybe
from tools.fuzz.graphs.catalog import OpBuilder, OpFamily

OPS = OpFamily()


_REDUCE_MAG: dict[str, Callable[[float, int], float]] = {
    "ReduceSum": lambda m, n: m * n,
    "ReduceMean": lambda m, n: m,
    "ReduceMax": lambda m, n: m,
    "ReduceMin": lambda m, n: m,
    "ReduceProd": lambda m, n: m**n,
    "ReduceL1": lambda m, n: m * n,
    "ReduceL2": lambda m, n: m * math.sqrt(n),
    "ReduceSumSquare": lambda m, n: m * m * n,
    "ReduceLogSumExp": lambda m, n: m + math.log(n) + 1,
    "ReduceLogSum": lambda m, n: math.log(m * n) + 1,
}


def _reduced(b: Builder, shape: tuple[int, ...]) -> tuple[list[int] | None, tuple[int, ...], int, int]:
    """Random axes (None = all), the output shape, the keepdims flag and how many values meet."""
    keepdims = 1 if b.chance(0.5) else 0
    if not shape or b.chance(0.2):
        axes = None
        chosen = set(range(len(shape)))
    else:
        chosen = {a for a in range(len(shape)) if b.chance(0.5)} or {b.randint(0, len(shape) - 1)}
        axes = sorted(a - len(shape) if b.opset >= 11 and b.chance(0.3) else a for a in chosen)
    out = tuple(1 if a in chosen else d for a, d in enumerate(shape) if keepdims or a not in chosen)
    return axes, out, keepdims, math.prod(shape[a] for a in chosen)


def _reduce(op: str) -> OpBuilder:
    def build(b: Builder) -> object:
        x = b.floats()
        if op == "ReduceProd":
            x = b.tame(x, 1.2)
        elif op in ("ReduceSumSquare", "ReduceLogSumExp"):
            x = b.tame(x, 5.0)
        elif op == "ReduceLogSum":
            x = b.positive(x)
        axes, shape, keepdims, count = _reduced(b, x.shape)
        inputs: list[Value | None] = [x]
        attrs: dict[str, object] = {"keepdims": None if keepdims and b.chance(0.5) else keepdims}
        if axes is not None:
            extra, axes_attr = b.axes_input(axes, 13 if op == "ReduceSum" else 18)
            inputs += extra
            attrs.update(axes_attr)
        return b.emit(op, inputs, shape, mag=_REDUCE_MAG[op](x.mag, max(count, 1)), **attrs)

    return build


for _name in _REDUCE_MAG:
    OPS.register(_name, 0.7)(_reduce(_name))


@OPS.register("ArgMax", 1.0)
def _argmax(b: Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1, exact=True)
    if x is None or not x.exact:
        return False
    axis = b.axis(x.rank)
    keepdims = b.randint(0, 1)
    shape = tuple(1 if a == axis % x.rank else d for a, d in enumerate(x.shape) if keepdims or a != axis % x.rank)
    last = maybe(b, "select_last_index", lambda: b.randint(0, 1)) if b.opset >= 12 else {}
    op = str(b.choice(["ArgMax", "ArgMin"]))
    return b.emit(op, [x], shape, elem=INT64, upper=x.shape[axis], axis=axis, keepdims=keepdims, **last)
