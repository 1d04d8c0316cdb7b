"""The graph under construction: its nodes, constants and inputs, and the pool of tensors ops may read.

The generator tracks every tensor's static shape itself (so shapes stay small and every op gets operands it
accepts) and a rough bound on its magnitude, so values stay tame: Exp and products only see bounded inputs,
Log/Sqrt/Div only positive ones. A rewrite may change results by float32 rounding, so tensors downstream of a
rewritable pattern are never fed to discontinuous ops (Floor, comparisons, ArgMax, ...) whose outputs would
jump on a last-bit difference: the comparison under ORT then measures the optimizer, not float noise.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT, DOUBLE, INT64, BOOL = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL
MAX_ELEMENTS = 512
"""Largest tensor the generator makes: enough for every op's edge cases, small enough to run fast."""
PERTURBED_LIMIT = 20.0
"""A rewritten value may move by float32 rounding (~1e-7 relative); below this magnitude that stays
under the verifier's absolute tolerance, so larger perturbable values are squashed first."""


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


def broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        return None


def window_length(size: int, kernel: int, stride: int, dilation: int, pads: tuple[int, int], ceil: bool = False) -> int:
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


_RANK_WEIGHTS = {
    4: [0.05, 0.2, 0.35, 0.25, 0.15],
    3: [0.05, 0.25, 0.4, 0.3],
    2: [0.1, 0.4, 0.5],
}


class Builder:
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
            shape = broadcast(other.shape, value.shape)
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


def maybe(b: Builder, name: str, value: Callable[[], object]) -> dict[str, object]:
    """``{name: value()}`` half of the time, else nothing: attributes are exercised and defaulted."""
    return {name: value()} if b.chance(0.5) else {}


def uniform(b: Builder, low: float, high: float) -> float:
    """A float attribute value in [low, high], rounded to 3 decimals."""
    return round(float(b.rng.uniform(low, high)), 3)
