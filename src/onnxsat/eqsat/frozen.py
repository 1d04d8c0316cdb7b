"""A read-only snapshot of the e-graph as plain Python: e-classes, their e-nodes, literal fields.

Read from egglog's frozen tables (``bindings.EGraph.freeze``) in one pass, without recursion: egglog's
own ``extract`` turns the result into a nested Python expression and overflows the stack about a
hundred layers deep, and its tree cost, which counts a shared tensor once per path to it, saturates at
2^64 on residual graphs. With the snapshot, the project's extractor and decoder work per e-class, so
shared tensors are handled once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from egglog import EGraph, bindings

# Sorts of the term language (language.py); everything else in the tables is a relation, a literal
# or egglog-python bookkeeping.
LANGUAGE_SORTS = frozenset({"Tensor", "OnnxNode", "Args", "Attrs", "Dims"})


@dataclass(frozen=True)
class ENode:
    """One e-node: its constructor, literal fields in order, and child e-classes in order."""

    op: str
    literals: tuple[str | int | float, ...]
    children: tuple[bindings.Value, ...]
    seq: int  # position in the tables: original terms come before rule-made ones


@dataclass
class FrozenEGraph:
    classes: dict[bindings.Value, list[ENode]] = field(default_factory=lambda: defaultdict(list))
    tensor_class: dict[int, bindings.Value] = field(default_factory=dict)
    out_class: dict[tuple[bindings.Value, int], bindings.Value] = field(default_factory=dict)
    class_tensor_ids: dict[bindings.Value, list[int]] = field(default_factory=lambda: defaultdict(list))
    shape_class: dict[bindings.Value, bindings.Value] = field(default_factory=dict)
    """Tensor class -> the Dims class shape inference (or the rule that made it) gave it."""
    elem_type: dict[bindings.Value, int] = field(default_factory=dict)
    static: set[bindings.Value] = field(default_factory=set)
    """Tensor classes known at optimization time (constants: produced for free at run time)."""

    @property
    def n_enodes(self) -> int:
        return sum(len(nodes) for nodes in self.classes.values())


def freeze(egraph: EGraph) -> FrozenEGraph:
    """Snapshot ``egraph``; ``Tensor.ref`` handles become the tensor-id <-> e-class maps."""
    raw = egraph._egraph  # egglog-python exposes the frozen tables only on its private bindings handle
    tables = raw.freeze().functions
    readers = {"String": raw.value_to_string, "i64": raw.value_to_i64, "f64": raw.value_to_f64}
    snapshot = FrozenEGraph()
    seq = 0
    for name in sorted(tables):
        table = tables[name]
        if name in FACT_TABLES:
            _read_facts(snapshot, name, table, raw)
            continue
        if table.output_sort not in LANGUAGE_SORTS or table.is_let_binding:
            continue
        for row in table.rows:
            if row.subsumed:
                continue
            literals = []
            children = []
            for sort, value in zip(table.input_sorts, row.inputs, strict=True):
                if sort in LANGUAGE_SORTS:
                    children.append(value)
                else:
                    literals.append(readers[sort](value))
            if name == "TensorRef":
                tensor_id = int(literals[0])
                if tensor_id >= 0:
                    snapshot.tensor_class[tensor_id] = row.output
                    snapshot.class_tensor_ids[row.output].append(tensor_id)
                continue
            if name == "Out":
                snapshot.out_class[(children[0], int(literals[0]))] = row.output
            snapshot.classes[row.output].append(ENode(name, tuple(literals), tuple(children), seq))
            seq += 1
    return snapshot


FACT_TABLES = frozenset({"HasShape", "HasType", "StaticValue"})
"""Relations the extractor reads to price nodes: shapes, element types, constness."""


def _read_facts(snapshot: FrozenEGraph, name: str, table: bindings.FrozenFunction, raw: bindings.EGraph) -> None:
    for row in table.rows:
        tensor = row.inputs[0]
        if name == "HasShape":
            snapshot.shape_class.setdefault(tensor, row.inputs[1])
        elif name == "HasType":
            snapshot.elem_type.setdefault(tensor, int(raw.value_to_i64(row.inputs[1])))
        else:
            snapshot.static.add(tensor)


def value_only_children(enode: ENode) -> tuple[bindings.Value, ...]:
    """Children read only for their value when decoding (folded into constants, never emitted as nodes).

    A folded weight's inputs and a fused Clip's bounds are computed with numpy at decode time, so they
    cost nothing at run time and extraction must not price them.
    """
    if enode.op in VALUE_ONLY_OPS:
        return enode.children
    if enode.op == "AttrsWithActivation":
        return enode.children[2:]
    if enode.op == "AttrsComputed":
        return enode.children[2:]
    return ()


VALUE_ONLY_OPS = frozenset({"TensorDerived", "TensorFolded", "TensorShapeOf", "TensorInts"})
"""Constants made at decode time: every child is read for its value only."""


def cons_cells(eclass: bindings.Value, pick: Callable[[bindings.Value], ENode], cons: str) -> list[ENode]:
    """The cells of a cons list (``ArgsCons``, ``DimsCons``) from ``eclass``, each read with ``pick``
    (the extracted choice when decoding, any e-node when pricing); the tail is a cell's last child."""
    cells = []
    enode = pick(eclass)
    while enode.op == cons:
        cells.append(enode)
        enode = pick(enode.children[-1])
    return cells
