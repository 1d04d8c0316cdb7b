"""Seeded generator of random valid ONNX models, for differential fuzzing of the optimizer.

``generate_model(seed)`` builds one model from ``numpy.random.default_rng(seed)`` alone, so a seed is
a complete bug report. A graph mixes ~115 op types with numpy broadcasting, random attributes,
constants (initializers, some in typed fields, and Constant nodes), shared tensors, multi-output
nodes, dead nodes, intermediate tensors exposed as graph outputs, If branches that capture outer
tensors, model-local function calls, symbolic dimensions and odd tensor names, over opsets 7..21
(mostly 13..21). On purpose it also builds what the rewrite rules match (Conv/ConvTranspose ->
BatchNormalization -> Relu/Clip, Gemm -> Relu) and their near-misses (a shared, captured or exposed
intermediate, a non-constant weight or bound, BatchNormalization in training mode, float64 Gemm,
float16 Conv), because random wiring alone would almost never line them up.

The generator tracks every tensor's static shape itself (so shapes stay small and every op gets
operands it accepts) and a rough bound on its magnitude, so values stay tame: Exp and products only
see bounded inputs, Log/Sqrt/Div only positive ones. A rewrite may change results by float32
rounding, so tensors downstream of a rewritable pattern are never fed to discontinuous ops (Floor,
comparisons, ArgMax, ...) whose outputs would jump on a last-bit difference: the comparison under ORT
then measures the optimizer, not float noise.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.facts import subgraph_captures

IR_VERSION = 9
"""ONNX Runtime 1.31 rejects the IR version onnx 1.23 writes by default."""

FLOAT, DOUBLE, INT64, BOOL = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL
MAX_ELEMENTS = 512
"""Largest tensor the generator makes: enough for every op's edge cases, small enough to run fast."""
PERTURBED_LIMIT = 20.0
"""A rewritten value may move by float32 rounding (~1e-7 relative); below this magnitude that stays
under the verifier's absolute tolerance, so larger perturbable values are squashed first."""
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Value:
    """A tensor the generator may read: name, type, static shape and what is known of its values."""

    name: str
    elem: int
    shape: tuple[int, ...]
    mag: float = 4.0  # rough bound on |value| for float tensors
    exact: bool = True  # False once a rewrite may change it by rounding: discontinuous ops avoid it
    positive: bool = False  # every value >= 1: safe for Log, Sqrt, Reciprocal, a divisor, a Pow base
    const: bool = False  # an initializer or Constant output: what rules call static
    upper: int = 0  # int64 tensors: every value lies in [0, upper)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        return None


def _window_length(
    size: int, kernel: int, stride: int, dilation: int, pads: tuple[int, int], ceil: bool = False
) -> int:
    """Output length of a convolution or pooling window along one axis (ONNX's formula).

    In ceil mode ONNX Runtime drops a last window that would start in the trailing pad and onnx's shape
    inference does not; 0 (no valid length) is returned there, so the caller chooses other attributes.
    """
    span = size + sum(pads) - ((kernel - 1) * dilation + 1)
    if span < 0:
        return 0
    if not ceil:
        return span // stride + 1
    length = -(-span // stride) + 1
    return 0 if (length - 1) * stride >= size + pads[0] else length


class _Builder:
    """Accumulates one graph: nodes, initializers, inputs and the pool of values ops can read."""

    def __init__(self, rng: np.random.Generator, opset: int) -> None:
        self.rng = rng
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.pool: list[Value] = []
        self.reads: Counter[str] = Counter()
        self.exposed: dict[str, Value] = {}  # intermediates that must become graph outputs (near-misses)
        self.pattern_results: set[str] = set()  # what the rule patterns produced: kept live more often
        self.functions: dict[str, onnx.FunctionProto] = {}  # model-local functions, by name
        self.symbolic = False
        self.odd_names = self.chance(0.1)  # quotes, backslashes, unicode: names pass through egglog literals
        self._count = 0
        self._one: Value | None = None

    # ---- randomness ---------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, items: Sequence[object]) -> object:
        return items[int(self.rng.integers(len(items)))]

    def randint(self, low: int, high: int) -> int:
        """Uniform integer in [low, high] (both ends included)."""
        return int(self.rng.integers(low, high + 1))

    def normal(self, shape: Sequence[int], scale: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal(tuple(shape)) * scale).astype(np.float32)

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f'{prefix}/{self._count} "é\\' if self.odd_names else f"{prefix}_{self._count}"

    def random_shape(self, max_rank: int = 4) -> tuple[int, ...]:
        rank = int(self.rng.choice([0, 1, 2, 3, 4][: max_rank + 1], p=_RANK_WEIGHTS[max_rank]))
        shape = [self.randint(1, 5) if self.chance(0.8) else 1 for _ in range(rank)]
        while math.prod(shape) > MAX_ELEMENTS // 4:
            shape[int(np.argmax(shape))] //= 2
        return tuple(shape)

    # ---- graph pieces -------------------------------------------------------------------------
    def graph_input(self, shape: Sequence[int], elem: int = FLOAT, symbolic: bool = False) -> Value:
        """A new graph input; ``symbolic`` declares the first dim as ``N`` (the verifier feeds size 1)."""
        name = self.fresh("in")
        dims: list[int | str] = list(shape)
        if symbolic and dims and dims[0] == 1:
            dims[0] = "N"
            self.symbolic = True
        self.inputs.append(helper.make_tensor_value_info(name, elem, dims))
        return self.add(Value(name, elem, tuple(shape), upper=2))  # the verifier's ints are 0 or 1

    def constant(self, array: np.ndarray, as_node: bool | None = None, prefix: str = "c") -> Value:
        """A constant as an initializer or a Constant node (whichever ``as_node`` says, else random)."""
        array = np.asarray(array)
        name = self.fresh(prefix)
        if as_node is None:
            as_node = self.chance(0.3)
        if as_node and (self.opset >= 9 or array.dtype.kind == "f"):  # Constant-1 holds floats only
            self.nodes.append(
                helper.make_node("Constant", [], [name], name=self.fresh("Constant"), **self._attr(array))
            )
        elif array.dtype in (np.float32, np.int64) and array.size and self.chance(0.15):  # typed field, not raw bytes
            elem = helper.np_dtype_to_tensor_dtype(array.dtype)
            self.initializers.append(helper.make_tensor(name, elem, array.shape, array.flatten().tolist()))
        else:
            self.initializers.append(numpy_helper.from_array(array, name))
        return self.describe_constant(name, array)

    def overridable(self, array: np.ndarray, prefix: str = "ov") -> Value:
        """An initializer also declared as a graph input: a caller may replace it, so it is not static."""
        array = np.asarray(array)
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(array, name))
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(array.shape)))
        return replace(self.describe_constant(name, array), const=False)

    @staticmethod
    def describe_constant(name: str, array: np.ndarray) -> Value:
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        numeric = array.dtype != np.bool_ and array.size
        mag = float(np.abs(array).max()) + 0.1 if numeric else 1.0
        positive = bool(numeric and array.min() >= 1)
        upper = int(array.max()) + 1 if array.dtype == np.int64 and array.size and array.min() >= 0 else 0
        return Value(name, elem, tuple(array.shape), mag=mag, positive=positive, const=True, upper=upper)

    def _attr(self, array: np.ndarray) -> dict[str, object]:
        """A Constant node's value attribute, using the scalar/list forms of opset 12 where they fit."""
        if self.opset >= 12 and array.ndim <= 1 and array.size and self.chance(0.5):
            if array.dtype == np.float32:
                return {"value_float": float(array)} if array.ndim == 0 else {"value_floats": array.tolist()}
            if array.dtype == np.int64:
                return {"value_int": int(array)} if array.ndim == 0 else {"value_ints": array.tolist()}
        return {"value": numpy_helper.from_array(array, "value")}

    def ints(self, values: Sequence[int], as_node: bool | None = None) -> Value:
        return self.constant(np.array(list(values), dtype=np.int64), as_node)

    def scalar(self, value: float, dtype: type = np.float32, as_node: bool | None = None) -> Value:
        return self.constant(np.array(value, dtype=dtype), as_node)

    def one(self) -> Value:
        """One scalar 1.0 shared by every node that needs it: a tensor with many readers."""
        if self._one is None:
            self._one = self.scalar(1.0, as_node=False)
        return self._one

    def node(self, op: str, inputs: Sequence[Value | str | None], outputs: int = 1, **attrs: object) -> list[str]:
        """Append a node (attributes set to None are left out); return its output names."""
        names = [x.name if isinstance(x, Value) else (x or "") for x in inputs]
        out_names = [self.fresh(op.lower()) for _ in range(outputs)]
        node_name = self.fresh(op) if self.chance(0.85) else ""
        kept = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op, names, out_names, name=node_name, **kept))
        self.reads.update(n for n in names if n)
        return out_names

    def emit(
        self,
        op: str,
        inputs: Sequence[Value | str | None],
        shape: Sequence[int],
        elem: int = FLOAT,
        mag: float = 4.0,
        exact: bool | None = None,
        positive: bool = False,
        upper: int = 0,
        pool: bool = True,
        **attrs: object,
    ) -> Value:
        """A one-output node; its value is exact only if every input is (unless ``exact`` says)."""
        (name,) = self.node(op, inputs, 1, **attrs)
        if exact is None:
            exact = all(x.exact for x in inputs if isinstance(x, Value))
        value = Value(name, elem, tuple(shape), mag=mag, exact=exact, positive=positive, upper=upper)
        return self.add(value) if pool else value

    def add(self, value: Value) -> Value:
        self.pool.append(value)
        return value

    def expose(self, value: Value) -> None:
        self.exposed[value.name] = value

    # ---- choosing operands --------------------------------------------------------------------
    def pick(self, accept: Callable[[Value], bool]) -> Value | None:
        """A pool value ``accept`` takes, favouring recent ones (deep chains) but reaching back (sharing)."""
        candidates = [v for v in self.pool if accept(v)]
        if not candidates:
            return None
        if self.chance(0.5):
            candidates = candidates[-3:]
        return candidates[int(self.rng.integers(len(candidates)))]

    def floats(
        self, accept: Callable[[Value], bool] = lambda v: True, exact: bool = False, make: bool = True
    ) -> Value | None:
        """A float32 operand (a new graph input when none fits and ``make``), squashed if perturbable and large."""
        value = self.pick(lambda v: v.elem == FLOAT and (v.exact or not exact) and accept(v))
        if value is None:
            if not make:
                return None
            shape = self.random_shape()
            for _ in range(200):
                if accept(Value("", FLOAT, shape)):
                    break
                shape = self.random_shape()
            else:
                raise AssertionError("no random shape fits the operand's constraints")  # a generator bug
            value = self.graph_input(shape, symbolic=self.chance(0.1))
        return self.bounded(value)

    def bounded(self, value: Value, limit: float = PERTURBED_LIMIT) -> Value:
        return value if value.exact or value.mag <= limit else self.tame(value, limit)

    def tame(self, value: Value, limit: float = 3.0) -> Value:
        """``value`` squashed into [-1.6, 1.6] by a bounded activation when its magnitude exceeds ``limit``."""
        if value.mag <= limit:
            return value
        op = str(self.choice(["Tanh", "Sigmoid", "Softsign", "Atan"] if self.opset >= 7 else ["Tanh", "Sigmoid"]))
        return self.emit(op, [value], value.shape, mag=1.6 if op == "Atan" else 1.0)

    def positive(self, value: Value) -> Value:
        """``Abs(value) + 1`` (values >= 1), unless ``value`` is already positive."""
        if value.positive:
            return value
        absolute = self.emit("Abs", [value], value.shape, mag=value.mag)
        return self.emit("Add", [absolute, self.one()], value.shape, mag=value.mag + 1, positive=True)

    def broadcast_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with ``shape`` under numpy rules (dropped, unit or extra dims)."""
        kind = self.randint(0, 4)
        if kind == 0 or not shape:
            return shape if self.chance(0.5) else ()
        if kind == 1:
            return shape[self.randint(1, len(shape)) :]
        if kind == 2:
            return tuple(1 if self.chance(0.5) else d for d in shape)
        if kind == 3 and math.prod(shape) * 2 <= MAX_ELEMENTS and len(shape) < 5:
            return (2, *shape)
        return shape

    def partner(self, value: Value, exact: bool = False) -> Value:
        """A float operand that broadcasts with ``value``: another tensor of the graph or a constant."""

        def fits(other: Value) -> bool:
            shape = _broadcast(other.shape, value.shape)
            return shape is not None and math.prod(shape) <= MAX_ELEMENTS

        if self.chance(0.45):
            other = self.pick(lambda v: v.elem == FLOAT and fits(v) and (v.exact or not exact))
            if other is not None:
                return self.bounded(other)
        return self.constant(self.normal(self.broadcast_shape(value.shape)))

    def axes_input(self, axes: Sequence[int], first_input_opset: int) -> tuple[list[Value], dict[str, object]]:
        """Axes as an attribute (before ``first_input_opset``) or as a constant int64 input."""
        if self.opset >= first_input_opset:
            return [self.ints(axes)], {}
        return [], {"axes": list(axes)}

    def axis(self, rank: int) -> int:
        """An axis of a tensor of ``rank``, negative sometimes where the opset allows it."""
        axis = self.randint(0, rank - 1)
        return axis - rank if self.opset >= 13 and self.chance(0.3) else axis


_RANK_WEIGHTS = {
    4: [0.05, 0.2, 0.35, 0.25, 0.15],
    3: [0.05, 0.25, 0.4, 0.3],
    2: [0.1, 0.4, 0.5],
}

# ---- the op catalog ---------------------------------------------------------------------------------

OpBuilder = Callable[[_Builder], object]
_CATALOG: list[tuple[str, int, float, OpBuilder]] = []


def _op(name: str, weight: float = 1.0, opset: int = 7) -> Callable[[OpBuilder], OpBuilder]:
    """Register an op builder; it returns False when the graph so far offers it nothing to work on."""

    def register(builder: OpBuilder) -> OpBuilder:
        _CATALOG.append((name, opset, weight, builder))
        return builder

    return register


@dataclass(frozen=True)
class _Unary:
    opset: int
    needs: str  # "any" | "tame" (|x| <= 3) | "positive" (x >= 1) | "exact" (discontinuous op)
    mag: Callable[[float], float]
    attrs: Callable[[_Builder], dict[str, object]] = lambda b: {}


def _maybe(b: _Builder, name: str, value: Callable[[], object]) -> dict[str, object]:
    """``{name: value()}`` half of the time, else nothing: attributes are exercised and defaulted."""
    return {name: value()} if b.chance(0.5) else {}


def _uniform(b: _Builder, low: float, high: float) -> float:
    return round(float(b.rng.uniform(low, high)), 3)


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
    "Elu": _Unary(6, "any", lambda m: m, lambda b: _maybe(b, "alpha", lambda: _uniform(b, 0.1, 2))),
    "Selu": _Unary(6, "any", lambda m: 2 * m, lambda b: _maybe(b, "gamma", lambda: _uniform(b, 0.5, 1.5))),
    "LeakyRelu": _Unary(6, "any", lambda m: m, lambda b: _maybe(b, "alpha", lambda: _uniform(b, 0.01, 0.5))),
    "HardSigmoid": _Unary(6, "any", lambda m: 1.0, lambda b: _maybe(b, "alpha", lambda: _uniform(b, 0.1, 0.5))),
    "HardSwish": _Unary(14, "any", lambda m: m),
    "Celu": _Unary(12, "any", lambda m: m, lambda b: _maybe(b, "alpha", lambda: _uniform(b, 0.2, 2))),
    "Mish": _Unary(18, "any", lambda m: m),
    "Gelu": _Unary(20, "any", lambda m: m, lambda b: _maybe(b, "approximate", lambda: b.choice(["none", "tanh"]))),
    "ThresholdedRelu": _Unary(10, "exact", lambda m: m, lambda b: _maybe(b, "alpha", lambda: _uniform(b, 0, 1))),
    "Floor": _Unary(6, "exact", lambda m: m + 1),
    "Ceil": _Unary(6, "exact", lambda m: m + 1),
    "Round": _Unary(11, "exact", lambda m: m + 1),
    "Sign": _Unary(9, "exact", lambda m: 1.0),
    "Shrink": _Unary(9, "exact", lambda m: m + 1, lambda b: {"bias": _uniform(b, 0, 1), "lambd": _uniform(b, 0, 1)}),
    "Identity": _Unary(1, "any", lambda m: m),
}


def _unary(op: str) -> OpBuilder:
    spec = _UNARY[op]

    def build(b: _Builder) -> object:
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
    _op(_name, 1.0, _spec.opset)(_unary(_name))


@_op("IsNaN", 0.3, 10)
def _is_special(b: _Builder) -> object:
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
    def build(b: _Builder) -> object:
        x = b.floats()
        y = b.partner(x)
        if op == "Mul":
            x, y = b.tame(x, 8.0), b.tame(y, 8.0)
        shape = _broadcast(x.shape, y.shape)
        operands = [x, y] if b.chance(0.5) else [y, x]
        return b.emit(op, operands, shape, mag=_BINARY_MAG[op](x.mag, y.mag))

    return build


for _name in _BINARY_MAG:  # Max and Min broadcast from opset 8
    _op(_name, 2.0 if _name in ("Add", "Mul") else 1.0, 8 if _name in ("Max", "Min") else 7)(_binary(_name))


@_op("Div", 1.0)
def _div(b: _Builder) -> object:
    x = b.floats()
    y = b.positive(b.partner(x))
    return b.emit("Div", [x, y], _broadcast(x.shape, y.shape), mag=x.mag)


@_op("Pow", 1.0)
def _pow(b: _Builder) -> object:
    base = b.positive(b.tame(b.floats(), 4.0))
    exponent = b.scalar(float(b.choice([0.5, 1.5, 2.0, -1.0, 3.0]))) if b.chance(0.5) else b.tame(b.partner(base), 1.0)
    shape = _broadcast(base.shape, exponent.shape)
    return b.emit("Pow", [base, exponent], shape, mag=base.mag ** max(exponent.mag, 1.0) + 1)


@_op("Sum", 1.0, 8)
def _variadic(b: _Builder) -> object:
    op = str(b.choice(["Sum", "Mean", "Max", "Min"]))
    first = b.floats()
    operands = [first]
    for _ in range(b.randint(0, 2)):
        operands.append(b.partner(first))
    shape = _broadcast(*(v.shape for v in operands))
    if shape is None or math.prod(shape) > MAX_ELEMENTS:  # partners fit the first, not always each other
        operands = operands[:1]
        shape = first.shape
    mag = sum(v.mag for v in operands) if op == "Sum" else max(v.mag for v in operands)
    return b.emit(op, operands, shape, mag=mag)


@_op("PRelu", 1.0)
def _prelu(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    if x.rank >= 3 and b.chance(0.5):
        slope_shape: tuple[int, ...] = (x.shape[1], *[1] * (x.rank - 2))
    else:
        slope_shape = tuple(1 if b.chance(0.4) else d for d in x.shape[b.randint(0, x.rank - 1) :])
    slope = b.constant((b.rng.random(slope_shape) * 0.5).astype(np.float32))
    return b.emit("PRelu", [x, slope], x.shape, mag=x.mag)


@_op("Greater", 1.5)
def _compare(b: _Builder) -> object:
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
    return b.emit(op, [x, y], _broadcast(x.shape, y.shape), elem=BOOL)


@_op("And", 1.0)
def _logical(b: _Builder) -> object:
    x = b.pick(lambda v: v.elem == BOOL)
    if x is None:
        return False
    if b.chance(0.3):
        return b.emit("Not", [x], x.shape, elem=BOOL)
    y = b.pick(lambda v: v.elem == BOOL and _broadcast(v.shape, x.shape) is not None)
    if y is None or b.chance(0.3):
        y = b.constant(b.rng.random(b.broadcast_shape(x.shape)) < 0.5)
    return b.emit(str(b.choice(["And", "Or", "Xor"])), [x, y], _broadcast(x.shape, y.shape), elem=BOOL)


@_op("Where", 1.5, 9)
def _where(b: _Builder) -> object:
    cond = b.pick(lambda v: v.elem == BOOL and v.size <= MAX_ELEMENTS // 2)
    x = b.floats()
    if cond is None:
        source = b.floats(exact=True)
        if source is None or not source.exact:
            return False
        cond = b.emit("Greater", [source, b.scalar(0.0)], source.shape, elem=BOOL)
    y = b.partner(x)
    shape = _broadcast(cond.shape, x.shape, y.shape)
    if shape is None or math.prod(shape) > MAX_ELEMENTS:
        y = b.constant(b.normal(()))
        shape = _broadcast(cond.shape, x.shape)
        if shape is None:
            x = b.constant(b.normal(cond.shape))
            shape = cond.shape
    return b.emit("Where", [cond, x, y], shape, mag=max(x.mag, y.mag), exact=x.exact and y.exact)


@_op("Mod", 0.5, 10)
def _mod(b: _Builder) -> object:
    ints = b.pick(lambda v: v.elem == INT64 and v.upper > 0)
    if ints is not None and b.chance(0.5):
        divisor = b.randint(1, 4)
        return b.emit("Mod", [ints, b.constant(np.array(divisor, np.int64))], ints.shape, elem=INT64, upper=divisor)
    x = b.floats(exact=True)
    if x is None or not x.exact:
        return False
    divisor_value = b.positive(b.partner(x, exact=True))
    return b.emit("Mod", [x, divisor_value], _broadcast(x.shape, divisor_value.shape), mag=x.mag, fmod=1)


@_op("Add/int64", 1.0)
def _int_arith(b: _Builder) -> object:
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


# ---- reductions -----------------------------------------------------------------------------------

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


def _reduced(b: _Builder, shape: tuple[int, ...]) -> tuple[list[int] | None, tuple[int, ...], int, int]:
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
    def build(b: _Builder) -> object:
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
    _op(_name, 0.7)(_reduce(_name))


@_op("ArgMax", 1.0)
def _argmax(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1, exact=True)
    if x is None or not x.exact:
        return False
    axis = b.axis(x.rank)
    keepdims = b.randint(0, 1)
    shape = tuple(1 if a == axis % x.rank else d for a, d in enumerate(x.shape) if keepdims or a != axis % x.rank)
    last = _maybe(b, "select_last_index", lambda: b.randint(0, 1)) if b.opset >= 12 else {}
    op = str(b.choice(["ArgMax", "ArgMin"]))
    return b.emit(op, [x], shape, elem=INT64, upper=x.shape[axis], axis=axis, keepdims=keepdims, **last)


# ---- shapes and data movement -----------------------------------------------------------------


def _factor(b: _Builder, n: int) -> list[int]:
    """A random shape (rank 1..4) with ``n`` elements."""
    dims = [1] * b.randint(1, 4)
    remaining, p = n, 2
    while remaining > 1:
        while remaining % p:
            p += 1
        remaining //= p
        dims[b.randint(0, len(dims) - 1)] *= p
    return dims


@_op("Reshape", 2.0, 5)
def _reshape(b: _Builder) -> object:
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


@_op("Transpose", 1.5)
def _transpose(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 2)
    if x is None or x.rank < 2:
        return False
    perm = [int(p) for p in b.rng.permutation(x.rank)] if b.chance(0.8) else None
    order = perm if perm is not None else list(reversed(range(x.rank)))
    return b.emit("Transpose", [x], [x.shape[p] for p in order], mag=x.mag, perm=perm)


@_op("Flatten", 1.0)
def _flatten(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.randint(0, x.rank)
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    if b.opset >= 11 and 0 < axis < x.rank and b.chance(0.3):
        axis -= x.rank
    return b.emit("Flatten", [x], shape, mag=x.mag, axis=axis)


@_op("Squeeze", 1.0)
def _squeeze(b: _Builder) -> object:
    x = b.floats(lambda v: 1 in v.shape)
    if x is None or 1 not in x.shape:
        return False
    ones = [a for a, d in enumerate(x.shape) if d == 1]
    axes = [a for a in ones if b.chance(0.6)] or ones[:1]
    if b.chance(0.2):
        return b.emit("Squeeze", [x], [d for d in x.shape if d != 1], mag=x.mag)
    inputs, attrs = b.axes_input([a - x.rank if b.opset >= 11 and b.chance(0.3) else a for a in axes], 13)
    return b.emit("Squeeze", [x, *inputs], [d for a, d in enumerate(x.shape) if a not in axes], mag=x.mag, **attrs)


@_op("Unsqueeze", 1.0)
def _unsqueeze(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank <= 3)
    if x is None or x.rank > 3:
        return False
    rank = x.rank + b.randint(1, 2)
    axes = sorted(int(a) for a in b.rng.choice(rank, size=rank - x.rank, replace=False))
    dims = iter(x.shape)
    shape = [1 if a in axes else next(dims) for a in range(rank)]
    inputs, attrs = b.axes_input([a - rank if b.opset >= 11 and b.chance(0.3) else a for a in axes], 13)
    return b.emit("Unsqueeze", [x, *inputs], shape, mag=x.mag, **attrs)


@_op("Concat", 1.5)
def _concat(b: _Builder) -> object:
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


@_op("Split", 1.5)
def _split(b: _Builder) -> object:
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


@_op("Slice", 1.5, 10)
def _slice(b: _Builder) -> object:
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


@_op("Gather", 1.5)
def _gather(b: _Builder) -> object:
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


@_op("GatherElements", 0.7, 11)
def _gather_elements(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.randint(0, x.rank - 1)
    shape = list(x.shape)
    shape[axis] = b.randint(1, 3)
    indices = b.constant(b.rng.integers(-x.shape[axis], x.shape[axis], size=shape).astype(np.int64))
    return b.emit("GatherElements", [x, indices], shape, mag=x.mag, axis=axis)


@_op("Expand", 1.0, 8)
def _expand(b: _Builder) -> object:
    x = b.floats(lambda v: v.size <= MAX_ELEMENTS // 4)
    target = [b.randint(2, 3) if d == 1 and b.chance(0.6) else (1 if b.chance(0.2) else d) for d in x.shape]
    if b.chance(0.3):
        target.insert(0, b.randint(1, 2))
    return _with_int_spec(b, "Expand", x, target, _broadcast(x.shape, target))


@_op("Tile", 1.0)
def _tile(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1 and v.size <= MAX_ELEMENTS // 4)
    repeats = [b.randint(1, 2) for _ in x.shape]
    return _with_int_spec(b, "Tile", x, repeats, [d * r for d, r in zip(x.shape, repeats, strict=True)])


def _with_int_spec(b: _Builder, op: str, x: Value, spec: list[int], shape: Sequence[int]) -> object:
    """``op(x, spec)`` with ``spec`` a constant int64 input, unless the result would be too large."""
    if math.prod(shape) > MAX_ELEMENTS:
        return False
    return b.emit(op, [x, b.ints(spec)], shape, mag=x.mag)


@_op("Pad", 1.5)
def _pad(b: _Builder) -> object:
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
    value = _uniform(b, -1, 1)
    if b.opset < 11:
        return b.emit("Pad", [x], shape, mag=x.mag + 1, mode=mode, pads=flat, value=value if b.chance(0.5) else None)
    inputs: list[Value | None] = [x, b.ints(flat)]
    if axes != list(range(x.rank)):
        inputs += [b.scalar(value) if b.chance(0.5) else None, b.ints(axes)]
    elif mode == "constant" and b.chance(0.5):
        inputs.append(b.scalar(value))
    return b.emit("Pad", inputs, shape, mag=x.mag + 1, mode=mode if mode != "constant" or b.chance(0.5) else None)


@_op("Shape", 1.5)
def _shape(b: _Builder) -> object:
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
        value = {"value": numpy_helper.from_array(np.array([_uniform(b, -2, 2)], np.float32))} if b.chance(0.5) else {}
        return b.emit("ConstantOfShape", [shape], dims, mag=2.0, exact=True, **value)
    if reader == 1:
        other = b.floats(lambda v: v.size == math.prod(dims), make=False)
        if other is not None:
            return b.emit("Reshape", [other, shape], dims, mag=other.mag)
    if reader == 2 and b.opset >= 8:
        other = b.floats(lambda v: v.rank <= len(dims) and _broadcast(v.shape, dims) == tuple(dims), make=False)
        if other is not None:
            return b.emit("Expand", [other, shape], dims, mag=other.mag)
    return b.emit("Cast", [shape], shape.shape, mag=max(dims), to=FLOAT)


@_op("Cast", 1.0)
def _cast(b: _Builder) -> object:
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


@_op("DepthToSpace", 0.7)
def _depth_space(b: _Builder) -> object:
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
        mode = _maybe(b, "mode", lambda: b.choice(["DCR", "CRD"])) if b.opset >= 11 else {}
        shape = (n, c // (block * block), h * block, w * block)
        return b.emit("DepthToSpace", [x], shape, mag=x.mag, blocksize=block, **mode)
    shape = (n, c * block * block, h // block, w // block)
    return b.emit("SpaceToDepth", [x], shape, mag=x.mag, blocksize=block)


@_op("Range", 0.5, 11)
def _range(b: _Builder) -> object:
    start, delta = b.randint(-3, 3), int(b.choice([1, 2, -1]))
    count = b.randint(1, 5)
    limit = start + delta * count
    dtype = np.float32 if b.chance(0.6) else np.int64
    bounds = [b.constant(np.array(v, dtype)) for v in (start, limit, delta)]
    elem = FLOAT if dtype == np.float32 else INT64
    value = b.emit("Range", bounds, (count,), elem=elem, mag=abs(start) + abs(limit) + 1, exact=True)
    return value if elem == FLOAT else b.emit("Cast", [value], (count,), mag=value.mag, to=FLOAT)


@_op("EyeLike", 0.5, 9)
def _eye_like(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank == 2)
    if x is None or x.rank != 2:
        return False
    k = _maybe(b, "k", lambda: b.randint(-1, 1))
    return b.emit("EyeLike", [x], x.shape, mag=1.0, exact=True, **k)


@_op("Trilu", 0.7, 14)
def _trilu(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 2)
    if x is None or x.rank < 2:
        return False
    inputs: list[Value] = [x] + ([b.constant(np.array(b.randint(-1, 1), np.int64))] if b.chance(0.5) else [])
    return b.emit("Trilu", inputs, x.shape, mag=x.mag, **_maybe(b, "upper", lambda: b.randint(0, 1)))


@_op("CumSum", 0.7, 11)
def _cumsum(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 1)
    axis = b.axis(x.rank)
    axis_value = b.constant(np.array(axis if b.chance(0.5) else [axis], np.int64))
    attrs = {**_maybe(b, "exclusive", lambda: b.randint(0, 1)), **_maybe(b, "reverse", lambda: b.randint(0, 1))}
    return b.emit("CumSum", [x, axis_value], x.shape, mag=x.mag * x.shape[axis], **attrs)


@_op("OneHot", 0.5, 11)
def _one_hot(b: _Builder) -> object:
    indices = b.pick(lambda v: v.elem == INT64 and v.upper > 0 and v.rank >= 1 and v.size <= 32)
    if indices is None:
        indices = b.constant(b.rng.integers(0, 4, size=(b.randint(1, 3),)).astype(np.int64))
    depth = max(indices.upper, 2) + b.randint(0, 1)
    depth_value = b.constant(np.array(depth, np.int64 if b.chance(0.5) else np.float32))
    values = b.constant(np.array([_uniform(b, -1, 0), _uniform(b, 0.5, 2)], np.float32))
    axis = b.randint(-indices.rank - 1, indices.rank)
    shape = list(indices.shape)
    shape.insert(axis % (indices.rank + 1), depth)
    return b.emit("OneHot", [indices, depth_value, values], shape, mag=2.0, exact=True, axis=axis)


# ---- neural-network ops ------------------------------------------------------------------------


@_op("MatMul", 1.5)
def _matmul(b: _Builder) -> object:
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
        shape = (*_broadcast(x.shape[:-2], weight_shape[:-2]), x.shape[-2], n)
    result = b.emit("MatMul", [x, weight], shape, mag=x.mag * weight.mag * math.sqrt(k) + 1)
    return b.emit("Relu", [result], shape, mag=result.mag) if b.chance(0.3) else result


@_op("Einsum", 0.5, 12)
def _einsum(b: _Builder) -> object:
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


@_op("Softmax", 1.5)
def _softmax(b: _Builder) -> object:
    op = str(b.choice(["Softmax", "LogSoftmax", "Hardmax"]))
    x = b.floats(lambda v: v.rank >= 1, exact=op == "Hardmax")
    if x is None or (op == "Hardmax" and not x.exact):
        return False
    axis = b.axis(x.rank) if b.opset >= 11 else b.randint(0, x.rank - 1)
    mag = {"Softmax": 1.0, "Hardmax": 1.0, "LogSoftmax": 2 * x.mag + math.log(x.size) + 1}[op]
    default_fits = (b.opset >= 13 and axis in (-1, x.rank - 1)) or (b.opset < 13 and axis == 1)
    return b.emit(op, [x], x.shape, mag=mag, axis=None if default_fits and b.chance(0.3) else axis)


def _epsilon(b: _Builder, x: Value) -> float | None:
    """Normalizations divide by a standard deviation: a perturbable input gets a large epsilon."""
    if x.exact:
        return float(b.choice([1e-5, 1e-3, 0.1])) if b.chance(0.5) else None
    return float(b.choice([0.01, 0.1]))


@_op("LayerNormalization", 1.0, 17)
def _layer_norm(b: _Builder) -> object:
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


@_op("InstanceNormalization", 1.0)
def _instance_norm(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank >= 3 and v.shape[1] <= 8, make=False) or b.graph_input((1, 2, 3, 3))
    channels = x.shape[1]
    params = [b.constant(1 + b.normal((channels,), 0.3)), b.constant(b.normal((channels,), 0.3))]
    mag = math.sqrt(math.prod(x.shape[2:])) * params[0].mag + params[1].mag
    return b.emit("InstanceNormalization", [x, *params], x.shape, mag=mag, epsilon=_epsilon(b, x))


@_op("LRN", 0.5)
def _lrn(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank == 4, make=False) or b.graph_input((1, 3, 2, 2))
    attrs = {"size": int(b.choice([1, 3, 5])), **_maybe(b, "alpha", lambda: _uniform(b, 0.001, 0.1))}
    attrs.update(_maybe(b, "beta", lambda: _uniform(b, 0.5, 1)))
    attrs.update(_maybe(b, "bias", lambda: _uniform(b, 1, 2)))
    return b.emit("LRN", [x], x.shape, mag=x.mag, **attrs)


@_op("MeanVarianceNormalization", 0.5, 9)
def _mvn(b: _Builder) -> object:
    x = b.floats(lambda v: v.rank == 4, exact=True, make=False)
    if x is None or not x.exact or b.opset >= 13:  # onnx's checker rejects its own opset-13 function body
        return False
    axes = b.choice([None, [2, 3], [1, 2, 3], [0, 1]])
    return b.emit("MeanVarianceNormalization", [x], x.shape, mag=math.sqrt(x.size), axes=axes)


@_op("BatchNormalization", 0.7)
def _batchnorm_alone(b: _Builder) -> object:
    """BatchNormalization after something other than a convolution: nothing to fold."""
    x = b.floats(lambda v: v.rank >= 2 and v.shape[1] <= 16)
    if x is None or x.rank < 2:
        return False
    return _batchnorm(b, x, _bn_params(b, x.shape[1], "constant"), training=False)


@_op("Dropout", 0.7)
def _dropout(b: _Builder) -> object:
    x = b.floats()
    inputs: list[Value | None] = [x]
    attrs: dict[str, object] = {}
    if b.opset >= 12:
        if b.chance(0.5):
            inputs.append(b.scalar(_uniform(b, 0, 0.9)))
            if b.chance(0.4):
                inputs.append(b.constant(np.array(False)))
    elif b.chance(0.5):
        attrs["ratio"] = _uniform(b, 0, 0.9)
    mask = b.opset >= 10 and b.chance(0.4)  # before opset 10 the mask has the data's type
    names = b.node("Dropout", inputs, 2 if mask else 1, **attrs)
    b.add(Value(names[0], FLOAT, x.shape, mag=x.mag, exact=x.exact))
    if mask:
        b.add(Value(names[1], BOOL, x.shape))
    return True


@_op("Clip", 1.0)
def _clip_alone(b: _Builder) -> object:
    return _clip(b, b.floats())


@_op("TopK", 1.0, 10)
def _topk(b: _Builder) -> object:
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


def _spatial(b: _Builder, dims: int) -> tuple[int, ...]:
    return tuple(b.randint(2, 4) if dims == 3 else b.randint(3, 7) for _ in range(dims))


def _image(b: _Builder, max_channels: int = 8, dims: int | None = None) -> Value:
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


@_op("MaxPool", 1.5)
def _pool(b: _Builder) -> object:
    x = _image(b)
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
        _window_length(d, k, s, dl, (pads[i], pads[i + len(spatial)]), ceil)
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


@_op("GlobalAveragePool", 1.0)
def _global_pool(b: _Builder) -> object:
    x = _image(b, 16)
    op = str(b.choice(["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]))
    shape = (*x.shape[:2], *[1] * (x.rank - 2))
    mag = x.mag * math.prod(x.shape[2:]) if op == "GlobalLpPool" else x.mag
    return b.emit(op, [x], shape, mag=mag)


@_op("If", 0.8, 11)
def _if(b: _Builder) -> object:
    return _if_reading(b, b.floats())


def _if_reading(b: _Builder, value: Value) -> object:
    """An If whose branches read ``value`` from the outer scope (a capture, not a listed input).

    The encoder must count a capture as a read, keep the captured tensor and its name, and the
    condition comes from an exact tensor (a perturbed condition would flip the branch).
    """
    source = b.floats(exact=True)
    if source is None or not source.exact:
        return False
    total = b.emit("ReduceSum", [source], (), mag=source.mag * source.size, keepdims=0)
    condition = b.emit("Greater", [total, b.scalar(0.0)], (), elem=BOOL)
    branches, mag = [], value.mag
    for branch in ("then", "else"):
        op = str(b.choice(["Relu", "Neg", "Abs", "Tanh", "Identity"]))
        out = b.fresh(branch)
        nodes = [helper.make_node(op, [value.name], [out], name=b.fresh(op))]
        if b.chance(0.5):  # also read a constant: an outer one (captured too) or the branch's own
            array = b.normal(tuple(1 if b.chance(0.5) else d for d in value.shape))
            if b.chance(0.5):
                constant = b.constant(array).name
                b.reads[constant] += 1
            else:
                constant = b.fresh("inner")
                nodes.append(helper.make_node("Constant", [], [constant], value=numpy_helper.from_array(array)))
            nodes.append(helper.make_node("Add", [out, constant], [out + "_plus"], name=b.fresh("Add")))
            out += "_plus"
            mag = max(mag, value.mag + float(np.abs(array).max()) + 0.1)
        output = helper.make_tensor_value_info(out, FLOAT, [None] * value.rank)
        branches.append(helper.make_graph(nodes, b.fresh(branch), [], [output]))
    (name,) = b.node("If", [condition], 1, then_branch=branches[0], else_branch=branches[1])
    b.reads[value.name] += 1
    return b.add(Value(name, FLOAT, value.shape, mag=mag, exact=value.exact))


FUNCTION_DOMAIN = "onnxsat.fuzz"


@_op("ScaledResidual", 0.5, 13)
def _local_function(b: _Builder) -> object:
    """A call of a model-local function: ONNX Runtime inlines it; the optimizer must pass it through."""
    x = b.floats()
    if "ScaledResidual" not in b.functions:
        body = [
            helper.make_node("Constant", [], ["half"], value_float=0.5),
            helper.make_node("Mul", ["x", "half"], ["scaled"]),
            helper.make_node("Tanh", ["scaled"], ["squashed"]),
            helper.make_node("Add", ["squashed", "x"], ["y"]),
        ]
        opsets = [helper.make_opsetid("", b.opset)]
        b.functions["ScaledResidual"] = helper.make_function(
            FUNCTION_DOMAIN, "ScaledResidual", ["x"], ["y"], body, opsets
        )
    return b.emit("ScaledResidual", [x], x.shape, mag=x.mag + 1, domain=FUNCTION_DOMAIN)


# ---- the patterns the rules match, and their near-misses --------------------------------------

_BN_KEYS = ("gamma", "beta", "mean", "var")


def _bn_params(b: _Builder, channels: int, kind: str, dtype: type = np.float32) -> list[Value]:
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


def _batchnorm(b: _Builder, x: Value, params: list[Value], training: bool) -> Value:
    """BatchNormalization of ``x`` (inference mode unless ``training``; then 3 outputs, as ONNX requires)."""
    attrs: dict[str, object] = {"epsilon": float(b.choice([1e-5, 1e-3, 0.01])) if b.chance(0.4) else None}
    attrs["momentum"] = _uniform(b, 0.5, 0.99) if b.chance(0.2) else None
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


def _clip(b: _Builder, x: Value) -> Value:
    """Clip in the attribute form (opset < 11) or with optional bound inputs, static or not."""
    low, high = sorted((_uniform(b, -2, 0.5), _uniform(b, 0, 6)))
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


def _bound(b: _Builder, bound: float) -> Value:
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


def _activation(b: _Builder, x: Value, fusable: Sequence[str]) -> Value:
    """Relu or Clip most of the time (what the fusion matches), else an activation it does not fuse."""
    roll = b.rng.random()
    if roll < 0.45 and "Relu" in fusable:
        return b.emit("Relu", [x], x.shape, mag=x.mag)
    if roll < 0.85:
        return _clip(b, x)
    op = str(b.choice(["LeakyRelu", "Sigmoid", "HardSwish" if b.opset >= 14 else "Elu"]))
    return b.emit(op, [x], x.shape, mag=x.mag)


def _near_miss_reader(b: _Builder, value: Value) -> None:
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
        _if_reading(b, value)
    elif roll < 0.2:
        b.add(value)  # free for any later op to read


def _conv_weight(b: _Builder, shape: tuple[int, ...], fan_in: int, dtype: type = np.float32) -> Value:
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


def _conv_shape(b: _Builder, x: Value, transpose: bool) -> _ConvShape | None:
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
                _window_length(d, k, s, dl, p)
                for d, k, s, dl, p in zip(spatial, kernel, strides, dilations, pairs, strict=True)
            ]
            attrs["pads"] = pads if auto_pad == "NOTSET" and any(pads) else None
        attrs["auto_pad"] = auto_pad if auto_pad != "NOTSET" or b.chance(0.1) else None
        weight = (c_out, c_in // group, *kernel)
    shape = (x.shape[0], c_out, *out)
    if min(out) < 1 or math.prod(shape) > MAX_ELEMENTS:
        return None
    return _ConvShape(attrs, shape, weight, fan_in, group)


@_op("Conv", 7.0)
def _conv_pattern(b: _Builder) -> object:
    """Conv or ConvTranspose (bias or not, grouped, depthwise, 1-3 spatial dims) [-> BN] [-> Relu/Clip].

    Now and then the Conv runs in float16 (cast in and out): BatchNormalization folding applies there
    too, the float32-only activation fusion must not.
    """
    transpose = b.chance(0.25)
    x = b.bounded(_image(b))
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
        y = _batchnorm(b, y, _bn_params(b, c_out, kind, dtype), training)
        b.pool.remove(y)  # the BN output is the pattern's, not yet free for others to read
    if b.chance(0.7):
        _near_miss_reader(b, y)
        y = b.emit("Relu", [y], y.shape, elem=elem, mag=y.mag) if half else _activation(b, y, ("Relu", "Clip"))
        b.pool.pop()
    if half:
        y = b.emit("Cast", [y], y.shape, mag=y.mag, to=FLOAT, pool=False)
    b.pattern_results.add(y.name)
    return b.add(y)


@_op("Gemm", 4.0)
def _gemm_pattern(b: _Builder) -> object:
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
    attrs["alpha"] = _uniform(b, 0.2, 2) if b.chance(0.3) else None
    attrs["beta"] = _uniform(b, 0.2, 2) if len(inputs) == 3 and b.chance(0.3) else None
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


# ---- assembling a model -----------------------------------------------------------------------


def _opset(rng: np.random.Generator) -> int:
    """Mostly 13..21; sometimes 11..12, or 7..10 (Clip's attribute form, older op signatures)."""
    roll = rng.random()
    if roll < 0.8:
        return int(rng.integers(13, 22))
    if roll < 0.88:
        return int(rng.integers(11, 13))
    return int(rng.integers(7, 11))


def _outputs(b: _Builder) -> list[Value]:
    """Most unread values (the rest stay dead), the near-miss intermediates, sometimes more."""
    inputs = {v.name for v in b.inputs}
    unread = [v for v in b.pool if b.reads[v.name] == 0 and v.name not in inputs]
    chosen = {v.name: v for v in unread if b.chance(0.9 if v.name in b.pattern_results else 0.7)}
    if not chosen and unread:
        chosen[unread[-1].name] = unread[-1]
    chosen.update(b.exposed)
    read = [v for v in b.pool if b.reads[v.name] > 0 and v.name not in inputs]
    if read and b.chance(0.15):
        extra = read[int(b.rng.integers(len(read)))]
        chosen[extra.name] = extra
    if b.chance(0.03) and b.pool:  # a graph input returned as it is
        first = b.pool[0]
        chosen[first.name] = first
    if b.chance(0.03):  # an initializer returned as it is
        value = b.constant(b.normal((2,)), as_node=False)
        chosen[value.name] = value
    if not chosen:
        value = b.pool[-1] if b.pool else b.graph_input((2,))
        chosen[value.name] = value
    order = [int(i) for i in b.rng.permutation(len(chosen))]
    values = list(chosen.values())
    return [values[i] for i in order]


def _value_info(value: Value, shaped: bool) -> onnx.ValueInfoProto:
    """A declared type: the static shape, or just the rank (dims unknown: a symbolic input's model)."""
    dims = list(value.shape) if shaped else [None] * value.rank
    return helper.make_tensor_value_info(value.name, value.elem, dims)


def generate_model(seed: int) -> onnx.ModelProto:
    """A random valid model, the same bytes for the same seed (see the module docstring)."""
    rng = np.random.default_rng(seed)
    b = _Builder(rng, _opset(rng))
    catalog = [
        builder for _, opset, weight, builder in _CATALOG if opset <= b.opset for _ in range(round(weight * 2) or 1)
    ]
    for _ in range(b.randint(1, 2)):
        b.graph_input(b.random_shape(), symbolic=b.chance(0.1))
    if b.chance(0.3):
        b.graph_input((b.randint(1, 3),), INT64)
    if b.chance(0.2):
        b.graph_input(b.random_shape(2), BOOL)
    for _ in range(b.randint(3, 14)):
        for _attempt in range(10):
            if catalog[int(rng.integers(len(catalog)))](b) is not False:
                break
    outputs = _outputs(b)
    shaped = not b.symbolic and b.chance(0.9)
    graph = helper.make_graph(
        b.nodes,
        f"fuzz_{seed}",
        b.inputs,
        [_value_info(v, shaped) for v in outputs],
        b.initializers,
    )
    if shaped and b.chance(0.2):
        produced = {o for n in b.nodes for o in n.output} - {v.name for v in outputs}
        graph.value_info.extend(_value_info(v, True) for v in b.pool if v.name in produced and b.chance(0.5))
    opsets = [helper.make_opsetid("", b.opset)] + [helper.make_opsetid(FUNCTION_DOMAIN, 1)] * bool(b.functions)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, functions=list(b.functions.values()))
    model.producer_name = "onnxsat-fuzz"
    return model


def op_types(model: onnx.ModelProto) -> set[str]:
    """The standard ONNX op types of the main graph's nodes (model-local functions not counted)."""
    return {node.op_type for node in model.graph.node if node.domain in ("", "ai.onnx")}


_CONVOLUTIONS = ("Conv", "ConvTranspose")


def pattern_census(model: onnx.ModelProto) -> Counter[str]:
    """The rule patterns, near-misses and graph features ``model`` contains, read from its structure.

    Read from the graph, not from what the generator meant to build, so that tests can check the
    generator really produces what the rules match (and just fail to match).
    """
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    readers = Counter(i for n in graph.node for i in _reads(n))
    outputs = {o.name for o in graph.output}
    inputs = {v.name for v in graph.input}
    initializers = {t.name: t for t in graph.initializer if t.name not in inputs}
    static = set(initializers) | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    tags: Counter[str] = Counter()

    def made_by(name: str, *ops: str) -> onnx.NodeProto | None:
        node = producer.get(name)
        return node if node is not None and node.op_type in ops else None

    def shared(name: str) -> bool:
        return readers[name] > 1 or name in outputs

    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in _CONVOLUTIONS and attrs.get("group", 1) > 1:
            weight = initializers.get(node.input[1])
            depthwise = weight is not None and node.op_type == "Conv" and weight.dims[1] == 1
            tags["depthwise convolution" if depthwise else "grouped convolution"] += 1
        conv = made_by(node.input[0], *_CONVOLUTIONS) if node.input else None
        if node.op_type == "BatchNormalization" and conv is not None:
            tags[f"{conv.op_type}+BatchNormalization"] += 1
            cast = made_by(conv.input[0], "Cast")
            tags["float16 Conv+BatchNormalization"] += cast is not None and cast.attribute[0].i == TensorProto.FLOAT16
            tags["near-miss: convolution output read twice or a graph output"] += shared(node.input[0])
            tags["near-miss: BatchNormalization parameter not constant"] += any(p not in static for p in node.input[1:])
            tags["near-miss: BatchNormalization in training mode"] += attrs.get("training_mode", 0) == 1
            tags["near-miss: convolution weight not constant"] += node.input[1] not in static
        if node.op_type in ("Relu", "Clip") and node.input:
            source = node.input[0]
            batchnorm = made_by(source, "BatchNormalization")
            conv = made_by(batchnorm.input[0], "Conv") if batchnorm is not None else made_by(source, "Conv")
            gemm = made_by(source, "Gemm")
            if conv is not None:
                tags[f"Conv{'+BatchNormalization' if batchnorm is not None else ''}+{node.op_type}"] += 1
            if gemm is not None:
                tags[f"Gemm+{node.op_type}"] += 1
                cast = made_by(gemm.input[0], "Cast")
                tags["near-miss: Gemm weight not constant"] += gemm.input[1] not in static
                tags["near-miss: Gemm in float64"] += cast is not None and cast.attribute[0].i == DOUBLE
            if conv is not None or gemm is not None:
                tags["near-miss: activation input read twice or a graph output"] += shared(source)
        if node.op_type == "Clip":
            tags["Clip (attribute form)" if opset < 11 else "Clip (input form)"] += 1
            bounds = list(node.input[1:])
            tags["near-miss: Clip bound not constant"] += any(x and x not in static for x in bounds)
            tags["Clip with a bound omitted"] += len([x for x in bounds if x]) < 2 and opset >= 11
        captured = subgraph_captures(node)
        tags["If reading outer-scope tensors"] += bool(captured)
        patterned = [c for c in captured if made_by(c, *_CONVOLUTIONS, "BatchNormalization", "Gemm")]
        tags["near-miss: pattern intermediate captured by a subgraph"] += bool(patterned)
        tags["model-local function call"] += node.domain == FUNCTION_DOMAIN
        tags["Constant node"] += node.op_type == "Constant"
        tags["multi-output node"] += len([o for o in node.output if o]) > 1
    tags["shared tensor"] += any(count > 1 for count in readers.values())
    tags["intermediate graph output"] += any(name in readers for name in outputs)
    tags["initializer"] += bool(initializers)
    tags["symbolic dimension"] += any(d.dim_param for v in graph.input for d in v.type.tensor_type.shape.dim)
    tags["dead node"] += _has_dead_node(graph)
    return +tags  # drop zero counts


def _reads(node: onnx.NodeProto) -> list[str]:
    """What a node reads: its inputs and the outer tensors its subgraphs capture."""
    return [name for name in [*node.input, *subgraph_captures(node)] if name]


def _has_dead_node(graph: onnx.GraphProto) -> bool:
    """Some node's outputs reach no graph output."""
    producer = {o: n for n in graph.node for o in n.output if o}
    live: set[str] = set()
    stack = [o.name for o in graph.output]
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is None or node.name + node.output[0] in live:
            continue
        live.add(node.name + node.output[0])
        stack.extend(_reads(node))
    return len(live) < len(graph.node)
