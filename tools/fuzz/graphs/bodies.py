"""Models whose graphs hold If, Loop and Scan nodes with random bodies, for fuzzing the optimizer inside them.

``generate_bodies_model(seed)`` is a separate generator from ``generate_model`` (whose seeds keep their meaning):
its main graph mixes catalog ops with control-flow nodes, and every body is itself a random graph drawn with the
same ``Builder`` and op families, so every rewrite rule's pattern can appear inside a body. Bodies nest (If in
Loop in Scan ...), capture outer tensors and initializers, keep dead nodes, hold their own Constants and
initializers, return their inputs or outer tensors unchanged, and declare inputs or initializers named like
outer tensors (shadowing them). If conditions are input-dependent, constant, or computable from constants or
static shapes (so an optimizer can settle the branch); Loop trip counts are constant (0, 1, a few) or
input-dependent, with or without a condition; Scans use axes and directions in the opset 9 and 11+ forms.

The generator knows every tensor's static shape, so a dynamically sized result (a Loop's scan output over an
input-dependent trip count) is summed over its iterations before anything reads it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tools.fuzz.graphs.builder import BOOL, FLOAT, INT64, MAX_ELEMENTS, Builder, Value
from tools.fuzz.graphs.catalog import OpBuilder, weighted
from tools.fuzz.graphs.control import FUNCTION_DOMAIN
from tools.fuzz.graphs.generate import FAMILIES, IR_VERSION, _outputs, _value_info

CONTROL_OPS = ("If", "Loop", "Scan")
MAX_DEPTH = 3
"""Deepest body nesting: a body at depth 3 holds no control flow of its own (models stay small and fast)."""
_BODY_CONTROL = {1: 0.3, 2: 0.15}
"""Chance that a step of a body at that depth is a control-flow node rather than a catalog op."""


class BodyBuilder(Builder):
    """A subgraph under construction: its own nodes, inputs and initializers over a view of the outer pool.

    Names come from the root builder (unique model-wide, except the outer names a body shadows on purpose);
    an operand an op builder cannot find becomes a new model input the body captures.
    """

    def __init__(self, parent: Builder) -> None:
        super().__init__(parent.rng, parent.opset)
        self.parent = parent
        self.root: Builder = parent.root if isinstance(parent, BodyBuilder) else parent
        self.depth = depth(parent) + 1
        self.odd_names = self.root.odd_names
        self.functions = self.root.functions
        self.pool = list(parent.pool)
        self.outer = {v.name for v in self.pool}  # visible outer names: reading one is a capture
        self.declared: set[str] = set()  # this body's inputs and initializers

    def fresh(self, prefix: str) -> str:
        return self.root.fresh(prefix)

    def graph_input(self, shape: Sequence[int], elem: int = FLOAT, symbolic: bool = False) -> Value:
        """A new model input, captured: a body cannot add inputs of its own."""
        value = self.parent.graph_input(shape, elem, symbolic)
        self.outer.add(value.name)
        return self.add(value)

    def overridable(self, array: np.ndarray, prefix: str = "ov") -> Value:
        value = self.parent.overridable(array, prefix)
        self.outer.add(value.name)
        return self.add(value)

    def body_input(
        self, elem: int, shape: Sequence[int], like: Value | None = None, unshaped: bool = False, **flags: object
    ) -> Value:
        """A body input (a Loop's iteration number, condition and carried values, a Scan's state and slices).

        A carried value's input is sometimes named like the outer tensor it starts from: it shadows it.
        """
        name = self.fresh("body_in")
        if like is not None and like.name in self.outer and like.shape == tuple(shape) and self.chance(0.3):
            name = self._hide(like)
        dims = None if unshaped and self.chance(0.15) else list(shape)  # ORT needs a shape but for Loop's carried
        self.inputs.append(helper.make_tensor_value_info(name, elem, dims))
        self.declared.add(name)
        base = like if like is not None else Value(name, elem, tuple(shape))
        return self.add(replace(base, name=name, shape=tuple(shape), const=False, **flags))  # type: ignore[arg-type]

    def shadowing_initializer(self) -> Value | None:
        """An initializer named like an outer float tensor: same type and shape, other values.

        (onnx's shape inference mixes up the types of a shadowed name and its shadow when they differ.)
        """
        outer = [v for v in self.pool if v.name in self.outer and v.elem == FLOAT and v.size]
        if not outer:
            return None
        name = self._hide(outer[int(self.rng.integers(len(outer)))])
        array = self.normal(next(v for v in outer if v.name == name).shape)
        self.initializers.append(numpy_helper.from_array(array, name))
        self.declared.add(name)
        return self.add(self.describe_constant(name, array))

    def _hide(self, value: Value) -> str:
        """Take an outer tensor out of this body's view, so the body can declare its own under that name."""
        self.pool = [v for v in self.pool if v.name != value.name]
        self.outer.discard(value.name)
        return value.name

    def captured(self) -> Counter[str]:
        """Outer names this body's nodes (and nested bodies) read: reads of the node that owns the body."""
        return Counter({name: n for name, n in self.reads.items() if name in self.outer})

    def graph(
        self,
        outputs: Sequence[Value],
        prefix: str,
        shaped: bool = True,
        ranked: Sequence[bool] = (),
        copy_inputs: bool = False,
    ) -> onnx.GraphProto:
        """The finished body; an outer tensor returned as it is goes through an Identity (ONNX requires it).

        Output types are fully shaped when ``shaped`` (a Loop that may run zero times needs the shapes of its
        scan outputs), else some give only the rank or only the element type, as ONNX allows. Outputs flagged in
        ``ranked`` give only their rank (If branches returning different shapes). ``copy_inputs`` returns a body
        input through an Identity too: ONNX Runtime 1.31's Scan returns zeros for a body input returned as it is.
        """
        local = {o for n in self.nodes for o in n.output} | {t.name for t in self.initializers}
        if not copy_inputs:
            local |= self.declared
        values = []
        for value in outputs:
            if value.name not in local or value.name in {v.name for v in values}:  # the second of a pair too
                value = self.emit("Identity", [value], value.shape, value.elem, value.mag, value.exact, pool=False)
            values.append(value)
            self.reads[value.name] += 1
        ranked = list(ranked) + [False] * (len(values) - len(ranked))
        infos = [_value_info(v, not r and (shaped or self.chance(0.5))) for v, r in zip(values, ranked, strict=True)]
        for info in infos:
            if not shaped and self.chance(0.2):
                info.type.tensor_type.ClearField("shape")
        return helper.make_graph(self.nodes, self.fresh(prefix), self.inputs, infos, self.initializers)


def depth(b: Builder) -> int:
    return b.depth if isinstance(b, BodyBuilder) else 0


def finish(parent: Builder, body: BodyBuilder) -> None:
    """Count the body's captures as reads in the parent (a captured tensor is live and keeps its name)."""
    parent.reads.update(body.captured())


# ---- filling a graph ---------------------------------------------------------------------------------------


def populate(b: Builder, catalog: list[OpBuilder], steps: int, control: float) -> int:
    """``steps`` draws: a control-flow node with chance ``control`` (when nesting allows), else a catalog op."""
    made = 0
    for _ in range(steps):
        if depth(b) < MAX_DEPTH and b.chance(control) and control_flow(b, catalog) is not False:
            made += 1
            continue
        for _attempt in range(10):
            if catalog[int(b.rng.integers(len(catalog)))](b) is not False:
                break
    return made


def control_flow(b: Builder, catalog: list[OpBuilder]) -> object:
    roll = b.rng.random()
    if roll < 0.45:
        return if_node(b, catalog)
    if roll < 0.8:
        return loop_node(b, catalog)
    return scan_node(b, catalog)


def _open(b: Builder) -> BodyBuilder:
    return BodyBuilder(b)


def _fill(body: BodyBuilder, catalog: list[OpBuilder], low: int, high: int) -> None:
    if body.chance(0.03):  # rare: the optimizer leaves a model with one alone (ONNX Runtime reads it two ways)
        body.shadowing_initializer()
    populate(body, catalog, body.randint(low, high), _BODY_CONTROL.get(body.depth, 0.0))
    if body.chance(0.15):  # a dead node for sure, whatever the outputs turn out to be
        source = body.floats()
        if source is not None:
            body.emit(str(body.choice(["Neg", "Abs", "Relu", "Identity"])), [source], source.shape, pool=False)


def conform(b: Builder, elem: int, shape: tuple[int, ...], exact: bool, limit: float | None = None) -> Value:
    """A value of ``elem`` and ``shape`` in ``b``: a pool value when one fits, else one made from a pool value
    (its mean plus a constant) or a constant; tamed below ``limit`` (float only) when given."""
    same = b.pick(lambda v: v.elem == elem and v.shape == shape and (v.exact or not exact))
    if same is not None and b.chance(0.75):
        value = same
    elif elem == FLOAT and (source := b.floats(exact=exact, make=False)) is not None and b.chance(0.8):
        mean = b.emit("ReduceMean", [source], (), mag=source.mag, keepdims=0)
        offset = b.normal(shape)
        mag = source.mag + float(np.abs(offset).max(initial=0.0)) + 0.1
        value = b.emit("Add", [mean, b.constant(offset)], shape, mag=mag)
    elif elem == FLOAT:
        value = b.constant(b.normal(shape))
    elif elem == INT64:
        value = b.constant(b.rng.integers(0, 3, shape).astype(np.int64))
    else:
        value = b.constant(b.rng.random(shape) < 0.5)
    if elem == FLOAT and limit is not None:
        value = b.tame(value, limit)
    return value


def _kind(b: Builder) -> int:
    return int(b.choice([FLOAT] * 8 + [INT64, BOOL]))


def _operand(b: Builder, elem: int) -> Value:
    """A pool value of ``elem`` (floats bounded), else a small constant: an initial value or an If result."""
    if elem == FLOAT:
        value = b.floats(make=False)
        if value is not None:
            return value
        return b.constant(b.normal(b.random_shape(3)))
    value = b.pick(lambda v: v.elem == elem and v.size > 0)
    if value is not None:
        return value
    return conform(b, elem, b.random_shape(2), exact=True)


# ---- If ------------------------------------------------------------------------------------------------------


def condition(b: Builder) -> tuple[Value, bool | None]:
    """A bool condition and its value when the generator knows it statically (constant or from static shapes)."""
    kind = str(b.choice(["input", "input", "constant", "computed", "shape"]))
    if kind == "input":
        source = b.floats(exact=True, make=False)
        if source is not None and source.exact:
            reduce, compare = ("ReduceSum", "Greater") if b.chance(0.5) else ("ReduceMax", "Less")
            total = b.emit(reduce, [source], (), mag=source.mag * source.size, keepdims=0)
            return b.emit(compare, [total, b.scalar(0.0)], (), elem=BOOL), None
        kind = "constant"
    if kind == "constant":
        value = bool(b.chance(0.5))
        shape = (1,) if b.opset >= 11 and b.chance(0.2) else ()
        return b.constant(np.full(shape, value)), value
    if kind == "computed":
        left, right = (float(x) for x in np.round(b.rng.standard_normal(2), 2))
        if left == right:
            right += 0.5
        first, second = b.scalar(left), b.scalar(right)
        greater = b.emit("Greater", [first, second], (), elem=BOOL)
        if b.chance(0.3):
            return b.emit("Not", [greater], (), elem=BOOL), not left > right
        return greater, left > right
    source = b.pick(lambda v: v.rank >= 1)
    if source is None:
        return b.constant(np.array(True)), True
    shape = b.emit("Shape", [source], (source.rank,), elem=INT64, upper=max(source.shape) + 1)
    axis = b.randint(0, source.rank - 1)
    size = b.emit("Gather", [shape, b.constant(np.array(axis, np.int64))], (), elem=INT64, axis=0)
    threshold = b.randint(1, 4)
    return b.emit("Greater", [size, b.constant(np.array(threshold, np.int64))], (), elem=BOOL), bool(
        source.shape[axis] > threshold
    )


def if_node(b: Builder, catalog: list[OpBuilder]) -> object:
    """An If whose branches are random graphs returning 1..3 values of the same types.

    When the condition is known to be true, the else branch may return other shapes (same rank): only the
    taken branch's shapes are real, so settling the wrong branch shows.
    """
    cond, known = condition(b)
    then = _open(b)
    _fill(then, catalog, 0, 5)
    specs: list[Value] = []
    for _ in range(b.randint(1, 3)):
        elem = _kind(then)
        if elem == FLOAT and then.chance(0.6):
            spec = then.floats(make=False) or conform(then, FLOAT, then.random_shape(3), exact=False)
        else:
            spec = conform(then, elem, then.random_shape(3), exact=False)
        specs.append(spec)
    other = _open(b)
    _fill(other, catalog, 0, 5)
    others = []
    for spec in specs:
        shape = spec.shape
        if known and spec.elem == FLOAT and b.chance(0.3):  # onnx infers the then branch's shapes
            shape = tuple(b.randint(1, 4) for _ in shape)
        others.append(conform(other, spec.elem, shape, exact=spec.exact))
    differ = [first.shape != second.shape for first, second in zip(specs, others, strict=True)]
    then_graph = then.graph(specs, "then", shaped=b.chance(0.8), ranked=differ)
    else_graph = other.graph(others, "else", shaped=b.chance(0.8), ranked=differ)
    finish(b, then)
    finish(b, other)
    names = b.node("If", [cond], len(specs), then_branch=then_graph, else_branch=else_graph)
    for name, first, second in zip(names, specs, others, strict=True):
        taken = first if known is not False else second
        value = Value(
            name,
            first.elem,
            taken.shape,
            mag=max(first.mag, second.mag),
            exact=first.exact and second.exact and cond.exact,
            positive=first.positive and second.positive,
            upper=max(first.upper, second.upper) if first.upper and second.upper else 0,
        )
        if value.size:
            b.add(value)
    return True


# ---- Loop ----------------------------------------------------------------------------------------------------


def _trip_count(b: Builder) -> tuple[Value | None, Value | None, int | None, int]:
    """Loop's M and initial cond inputs, the trip count when static (else None), and a bound on it."""
    form = str(b.choice(["constant"] * 5 + ["input"] * 2 + ["while", "cond"]))
    if form == "input":
        source = b.floats(exact=True, make=False)
        if source is not None and source.exact:
            total = b.emit("ReduceSum", [source], (), mag=source.mag * source.size, keepdims=0)
            positive = b.emit("Greater", [total, b.scalar(0.0)], (), elem=BOOL)
            count = b.emit("Cast", [positive], (), elem=INT64, upper=2, to=INT64)
            extra = b.randint(0, 2)
            if extra:
                count = b.emit("Add", [count, b.constant(np.array(extra, np.int64))], (), elem=INT64, upper=extra + 2)
            return count, None, None, extra + 1
        form = "constant"
    if form == "cond":  # a constant M and an input-dependent first condition: zero or M iterations
        source = b.floats(exact=True, make=False)
        if source is not None and source.exact:
            total = b.emit("ReduceMean", [source], (), mag=source.mag, keepdims=0)
            first = b.emit("Greater", [total, b.scalar(0.0)], (), elem=BOOL)
            trips = b.randint(1, 3)
            return b.constant(np.array(trips, np.int64)), first, None, trips
        form = "constant"
    if form == "while":  # no M: the body's condition stops it
        return None, b.constant(np.array(True)) if b.chance(0.5) else None, b.randint(1, 3), 3
    trips = int(b.choice([0, 1, 1, 2, 3]))
    cond = b.constant(np.array(True)) if b.chance(0.3) else None
    return b.constant(np.array(trips, np.int64)), cond, trips, max(trips, 1)


def loop_node(b: Builder, catalog: list[OpBuilder]) -> object:
    """A Loop with carried values, scan outputs and a body condition, over a constant or dynamic trip count."""
    count, first, trips, bound = _trip_count(b)
    low = 0 if b.opset >= 11 else 1  # Loop-1 needs a carried value
    initials = [_operand(b, FLOAT if b.chance(0.85) else _kind(b)) for _ in range(b.randint(low, 3))]
    initials = [v for v in initials if v.size] or ([] if low == 0 else [b.constant(b.normal((2,)))])
    body = _open(b)
    iteration = body.body_input(INT64, (), upper=bound)
    cond_in = body.body_input(BOOL, ())
    carried = [
        body.body_input(v.elem, v.shape, like=v, unshaped=True, mag=max(v.mag, 2.0), positive=False, upper=0)
        for v in initials
    ]
    _fill(body, catalog, 1, 6)
    if count is None:  # a while loop: stop after ``trips`` iterations
        last = body.constant(np.array(trips - 1 if trips else 0, np.int64))
        cond_out = body.emit("Less", [iteration, last], (), elem=BOOL)
    elif body.chance(0.5):
        cond_out = cond_in
    else:
        cond_out = body.constant(np.array(True), as_node=True)
    outs = []
    for value in carried:
        if body.chance(0.2):
            outs.append(value)  # a carried value passed through unchanged
        else:
            outs.append(conform(body, value.elem, value.shape, exact=value.exact, limit=value.mag))
    scans = []
    for _ in range(b.randint(0 if carried else 1, 2)):
        elem = FLOAT if body.chance(0.85) else _kind(body)
        value = body.floats(make=False) if elem == FLOAT else None
        scans.append(value if value is not None else conform(body, elem, body.random_shape(3), exact=False))
    graph = body.graph([cond_out, *outs, *scans], "loop_body", shaped=not trips or body.chance(0.5))
    finish(b, body)
    inputs = [count or "", first or "", *initials]
    names = b.node("Loop", inputs, len(outs) + len(scans), body=graph)
    for name, start in zip(names, carried, strict=False):
        b.add(replace(start, name=name))
    for name, scan in zip(names[len(carried) :], scans, strict=True):
        if trips is not None:
            value = Value(name, scan.elem, (trips, *scan.shape), mag=scan.mag, exact=scan.exact, upper=scan.upper)
            if value.size and value.size <= MAX_ELEMENTS:
                b.add(value)
            elif b.chance(0.5):
                b.expose(value)  # an empty or large scan output as a graph output
        elif scan.elem in (FLOAT, INT64) and scan.size * bound <= MAX_ELEMENTS:
            stacked = Value(name, scan.elem, (0, *scan.shape))
            axes, attrs = b.axes_input([0], 13)
            mag = scan.mag * bound
            b.emit("ReduceSum", [stacked, *axes], scan.shape, scan.elem, mag, exact=scan.exact, keepdims=0, **attrs)
    return True


# ---- Scan ----------------------------------------------------------------------------------------------------


def _axis(b: Builder, rank: int, opset: int) -> int:
    axis = b.randint(0, rank - 1)
    return axis - rank if opset >= 11 and b.chance(0.3) else axis


def scan_node(b: Builder, catalog: list[OpBuilder]) -> object:
    """A Scan over 1..2 inputs sharing a sequence length, with state and scan outputs, axes and directions."""
    if b.opset < 9:
        return False
    first = b.pick(lambda v: v.rank >= 1 and v.elem in (FLOAT, INT64) and v.size > 0 and (v.elem == FLOAT or v.upper))
    if first is None:
        first = b.constant(b.normal(b.random_shape(3) or (3,)))
    axis = _axis(b, first.rank, b.opset) if b.chance(0.4) else 0
    length = first.shape[axis]
    sequences, axes = [first], [axis]
    if b.chance(0.35):
        second = b.pick(lambda v: v.elem == FLOAT and length in v.shape and v.name != first.name)
        if second is None:
            second = b.constant(b.normal((length, b.randint(1, 3))))
        choices = [i for i, d in enumerate(second.shape) if d == length]
        axes.append(int(b.choice(choices)))
        sequences.append(second)
    states = [_operand(b, FLOAT if b.chance(0.9) else INT64) for _ in range(b.randint(0, 2))]
    states = [v for v in states if v.size]
    body = _open(b)
    state_in = [body.body_input(v.elem, v.shape, like=v, mag=max(v.mag, 2.0), positive=False, upper=0) for v in states]
    for value, ax in zip(sequences, axes, strict=True):
        shape = tuple(d for i, d in enumerate(value.shape) if i != ax % value.rank)
        body.body_input(value.elem, shape, like=value)
    _fill(body, catalog, 1, 5)
    outs = [
        value if body.chance(0.15) else conform(body, value.elem, value.shape, value.exact, limit=value.mag)
        for value in state_in
    ]
    scans = []
    for _ in range(b.randint(0 if states else 1, 2)):
        value = body.floats(make=False)
        if value is None or value.size * length > MAX_ELEMENTS:
            value = conform(body, FLOAT, body.random_shape(2), exact=False)
        scans.append(value)
    graph = body.graph([*outs, *scans], "scan_body", shaped=b.chance(0.8), copy_inputs=True)
    finish(b, body)
    attrs: dict[str, object] = {"num_scan_inputs": len(sequences)}
    if any(axes) or b.chance(0.2):
        attrs["scan_input_axes"] = axes
    if b.chance(0.3):
        attrs["scan_input_directions"] = [b.randint(0, 1) for _ in sequences]
    out_axes = [_axis(b, v.rank + 1, b.opset) if b.chance(0.4) else 0 for v in scans]
    if any(out_axes) or (scans and b.chance(0.2)):
        attrs["scan_output_axes"] = out_axes
    if scans and b.chance(0.3):
        attrs["scan_output_directions"] = [b.randint(0, 1) for _ in scans]
    names = b.node("Scan", [*states, *sequences], len(outs) + len(scans), body=graph, **attrs)
    for name, start in zip(names, states, strict=False):
        b.add(replace(start, name=name))
    for name, scan, out_axis in zip(names[len(states) :], scans, out_axes, strict=True):
        position = out_axis % (scan.rank + 1)
        shape = (*scan.shape[:position], length, *scan.shape[position:])
        b.add(Value(name, scan.elem, shape, mag=scan.mag, exact=scan.exact, upper=scan.upper))
    return True


# ---- the model -----------------------------------------------------------------------------------------------


def _opset(rng: np.random.Generator) -> int:
    """Mostly 13..21 (Loop-13/16, If-13/16/19/21, Scan-16/19/21); 11..12 (Loop-11, Scan-11); 9..10 (Scan-9)."""
    roll = rng.random()
    if roll < 0.7:
        return int(rng.integers(13, 22))
    if roll < 0.9:
        return int(rng.integers(11, 13))
    return int(rng.integers(9, 11))


def generate_bodies_model(seed: int) -> onnx.ModelProto:
    """A random valid model with control flow, the same bytes for the same seed (see the module docstring)."""
    rng = np.random.default_rng(seed)
    b = Builder(rng, _opset(rng))
    catalog = weighted(FAMILIES, b.opset)
    for _ in range(b.randint(1, 2)):
        b.graph_input(b.random_shape(), symbolic=b.chance(0.1))
    if b.chance(0.3):
        b.graph_input((b.randint(1, 3),), INT64)
    populate(b, catalog, b.randint(0, 3), 0.0)
    while not populate(b, catalog, 1, 1.0):  # at least one control-flow node
        pass
    populate(b, catalog, b.randint(1, 6), 0.4)
    outputs = _outputs(b)
    shaped = not b.symbolic and b.chance(0.9)
    graph = helper.make_graph(
        b.nodes, f"bodies_{seed}", b.inputs, [_value_info(v, shaped) for v in outputs], b.initializers
    )
    opsets = [helper.make_opsetid("", b.opset)] + [helper.make_opsetid(FUNCTION_DOMAIN, 1)] * bool(b.functions)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, functions=list(b.functions.values()))
    model.producer_name = "onnxsat-fuzz"
    return model


# ---- reading it back -----------------------------------------------------------------------------------------


def control_census(model: onnx.ModelProto) -> Counter[str]:
    """What control flow ``model`` holds, read from its structure: node counts per op and depth, nesting,
    captures, shadowed names, body initializers, pass-through outputs, settleable Ifs and constant trip counts."""
    tags: Counter[str] = Counter()
    _walk(model.graph, 0, set(), tags)
    deepest = max((int(k.rsplit(" ", 1)[1]) + 1 for k in tags if " at depth " in k), default=0)
    tags[f"control flow nested {deepest} deep"] = 1  # summed over models: how many reach each depth
    return +tags


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _static(graph: onnx.GraphProto, constants: dict[str, np.ndarray]) -> set[str]:
    """Names computable before run time: constants, shapes, and what plain nodes compute from them alone."""
    static = set(constants)
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type in ("Shape", "Size") or (
            node.op_type not in CONTROL_OPS and inputs and all(i in static for i in inputs)
        ):
            static.update(o for o in node.output if o)
    return static


def _walk(graph: onnx.GraphProto, level: int, outer: set[str], tags: Counter[str]) -> None:
    constants = _constants(graph)
    static = _static(graph, constants)
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output if o}
    if level:
        tags["body"] += 1
        tags["body with initializers"] += bool(graph.initializer)
        tags["body with a Constant node"] += any(n.op_type == "Constant" for n in graph.node)
        declared = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        tags["body shadowing an outer name"] += bool(declared & outer)
        reads = {i for n in graph.node for i in n.input if i}
        tags["body capturing an outer tensor"] += bool((reads - local) & outer)
        inputs = {v.name for v in graph.input}
        tags["body returning its input unchanged"] += any(o.name in inputs for o in graph.output)
        produced = {o: n for n in graph.node for o in n.output}
        tags["body returning an outer tensor"] += any(
            (n := produced.get(o.name)) is not None and n.op_type == "Identity" and n.input[0] not in local
            for o in graph.output
        )
        tags["body with a dead node"] += _dead(graph)
        tags["catalog ops inside bodies"] += sum(n.op_type not in (*CONTROL_OPS, "Constant") for n in graph.node)
    for node in graph.node:
        if node.op_type in CONTROL_OPS:
            tags[node.op_type] += 1
            tags[f"{node.op_type} at depth {level}"] += 1
            tags["nested control flow"] += level > 0
            if node.op_type == "If" and node.input[0] in constants:
                tags["If with a constant condition"] += 1
            elif node.op_type == "If" and node.input[0] in static:
                tags["If with a condition computed from constants or shapes"] += 1
            if node.op_type == "Loop":
                trip = constants.get(node.input[0]) if node.input and node.input[0] else None
                tags["Loop without a trip count"] += trip is None and not node.input[0]
                if trip is not None:
                    tags[f"Loop with constant trip count {int(trip)}"] += 1
            if node.op_type == "Scan":
                attrs = {a.name for a in node.attribute}
                tags["Scan with axes attributes"] += bool(attrs & {"scan_input_axes", "scan_output_axes"})
        for attr in node.attribute:
            for body in [*attr.graphs, *([attr.g] if attr.HasField("g") else [])]:
                _walk(body, level + 1, outer | local, tags)


def _dead(graph: onnx.GraphProto) -> bool:
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    live: set[int] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        index = stack.pop()
        if index in live:
            continue
        live.add(index)
        node = graph.node[index]
        reads = [*node.input, *(c for a in node.attribute for c in _free(a))]
        stack.extend(producer[name] for name in reads if name in producer)
    return len(live) < len(graph.node)


def _free(attr: onnx.AttributeProto) -> list[str]:
    graphs = [*attr.graphs, *([attr.g] if attr.HasField("g") else [])]
    return [i for g in graphs for n in g.node for i in n.input]
