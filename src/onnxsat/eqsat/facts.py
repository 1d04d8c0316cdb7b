"""Facts about an ONNX graph that rules need and the e-graph cannot see by itself.

Computed once in Python at encode time: how many readers each tensor has, which are float32, and
semantic flags of attribute sets (for example "this BatchNormalization runs in inference mode").
Keeping them here keeps rules short and conditions testable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import onnx

FlagPredicate = Callable[[list[onnx.AttributeProto], int], bool]


def _int_attr(attrs: list[onnx.AttributeProto], name: str, default: int) -> int:
    for attr in attrs:
        if attr.name == name:
            return int(attr.i)
    return default


def _bn_inference(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """BatchNormalization normalizes with its stored statistics (not batch statistics)."""
    if opset < 7:
        return _int_attr(attrs, "is_test", 0) == 1 and _int_attr(attrs, "spatial", 1) == 1
    if opset < 9:
        return _int_attr(attrs, "spatial", 1) == 1
    return _int_attr(attrs, "training_mode", 0) == 0


# (domain, op_type) -> {flag name: predicate(attributes, opset of the domain)}
FLAG_PREDICATES: dict[tuple[str, str], dict[str, FlagPredicate]] = {
    ("", "BatchNormalization"): {"inference": _bn_inference},
}


def attribute_flags(domain: str, op_type: str, attrs: list[onnx.AttributeProto], opset: int) -> list[str]:
    """Names of the flags that hold for these attributes of ``domain::op_type``."""
    predicates = FLAG_PREDICATES.get((domain, op_type), {})
    return sorted(name for name, holds in predicates.items() if holds(attrs, opset))


def subgraph_captures(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensor names read by the node's subgraphs (If/Loop/Scan bodies), in first-use order.

    These are real inputs of the node even though ONNX does not list them: their producers must be
    kept and their names must survive decoding, since the opaque subgraph refers to them by name.
    """
    captured: dict[str, None] = {}
    for attr in node.attribute:
        graphs = list(attr.graphs)
        if attr.HasField("g"):
            graphs.append(attr.g)
        for graph in graphs:
            for name in _free_names(graph):
                captured.setdefault(name, None)
    return list(captured)


def _free_names(graph: onnx.GraphProto) -> list[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in [*node.input, *subgraph_captures(node)]:
            if name and name not in defined:
                free.setdefault(name, None)
        defined.update(o for o in node.output if o)
    return list(free)


@dataclass
class GraphFacts:
    """What the encoder asserts about the main graph's tensors."""

    uses: Counter[str] = field(default_factory=Counter)
    graph_outputs: set[str] = field(default_factory=set)
    float32: set[str] = field(default_factory=set)

    def sole_use(self, name: str) -> bool:
        return self.uses[name] == 1 and name not in self.graph_outputs


def collect_facts(model: onnx.ModelProto, typed: onnx.ModelProto | None) -> GraphFacts:
    """Facts for ``model``'s main graph; ``typed`` is the same model after shape inference, if it ran."""
    graph = model.graph
    facts = GraphFacts(graph_outputs={o.name for o in graph.output})
    for node in graph.node:
        for name in [*node.input, *subgraph_captures(node)]:
            if name:
                facts.uses[name] += 1
    for info in _typed_values(typed or model):
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            facts.float32.add(info.name)
    return facts


def _typed_values(model: onnx.ModelProto) -> Iterable[onnx.ValueInfoProto]:
    yield from model.graph.input
    yield from model.graph.value_info
    yield from model.graph.output


def count_dead_nodes(graph: onnx.GraphProto) -> int:
    """Nodes none of whose outputs reach a graph output: extraction drops them."""
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    live: set[int] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        index = stack.pop()
        if index in live:
            continue
        live.add(index)
        node = graph.node[index]
        stack.extend(producer[n] for n in [*node.input, *subgraph_captures(node)] if n in producer)
    return len(graph.node) - len(live)
