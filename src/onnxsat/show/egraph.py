"""The e-graph of a small model after saturation, as Graphviz DOT (the seed's Figure 1).

The model goes through exactly what ``optimize_model`` does before extraction: ``encode`` (with shape
inference), the target's applicable rule sets, ``saturate`` under the default limits. The e-graph is then
read through egglog's own serializer (``EGraph._serialize``, what ``EGraph.display(graphviz=True)`` draws;
egglog 13's public ``display`` only opens a viewer, so the layer below it is used, pinned by
``egglog<14``).

Drawn as egglog draws it (``raw``), every table is there: the analysis relations (shapes, flags, op
kinds) outnumber the terms ten to one and a three-node model fills a screen. The default view keeps what
Figure 1 shows, the terms and their equivalence classes, reachable from the graph's outputs:

- each e-class of tensors or nodes is a dotted frame, titled with the tensor's name when it has one
  (the ``Tensor.ref`` handle the encoder gives each named tensor); each e-node a solid box inside it;
- an edge goes from an e-node to the e-class of each argument; argument lists (``Args``) are drawn as one
  edge per element, numbered, not as chains of cons cells;
- literals, dimension lists and attribute tables are written into the box;
- CSE keys (``Tensor.pure_key``) are left out: they are bookkeeping, not computations.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxsat.errors import SettingsError

DEFAULT_MAX_NODES = 8
"""Model nodes drawn by default: a Conv+BN+Relu block and a few more; past ten the picture is a wall."""

_DRAWN = ("Tensor", "OnnxNode")
"""Sorts whose e-classes become frames; every other sort is written into the boxes that use it."""
_HIDDEN_OPS = ("Tensor.pure_key", "Tensor.ref")
"""Shown as a frame's title (ref) or not at all (CSE keys)."""
MAX_INLINE_DEPTH = 2


@dataclass
class EGraphPicture:
    """The DOT text and what it holds, for the command's one-line summary."""

    dot: str
    eclasses: int
    enodes: int
    iterations: int
    stop_reason: str


def check_size(model: onnx.ModelProto, max_nodes: int) -> None:
    """Refuse, before any work, a model whose e-graph would be too large to read."""
    count = len(model.graph.node)
    if max_nodes < 1:
        raise SettingsError(f"--max-nodes must be at least 1 (got {max_nodes})")
    if count > max_nodes:
        raise SettingsError(
            f"the model has {count} nodes; show-egraph draws models of at most {max_nodes} nodes, past which the "
            "e-graph cannot be read (cut out a small part of the model, or raise --max-nodes)"
        )


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class _View:
    """The serialized e-graph (egraph-serialize's JSON: e-nodes with children, each in an e-class)."""

    def __init__(self, serialized: dict[str, object], tensor_names: list[str], node_names: dict[str, str]) -> None:
        self.nodes: dict[str, dict[str, object]] = serialized["nodes"]  # type: ignore[assignment]
        self.sorts = {k: v["type"] for k, v in serialized["class_data"].items()}  # type: ignore[union-attr]
        self.members: dict[str, list[str]] = {}
        for node_id, node in self.nodes.items():
            self.members.setdefault(str(node["eclass"]), []).append(node_id)
        self.tensor_names = tensor_names
        self.node_names = node_names

    def op(self, node_id: str) -> str:
        return str(self.nodes[node_id]["op"])

    def children(self, node_id: str) -> list[str]:
        return list(self.nodes[node_id]["children"])  # type: ignore[call-overload]

    def eclass(self, node_id: str) -> str:
        return str(self.nodes[node_id]["eclass"])

    def sort(self, node_id: str) -> str:
        return str(self.sorts.get(self.eclass(node_id), ""))

    def drawn(self, node_id: str) -> bool:
        return self.sort(node_id) in _DRAWN

    def shown(self, eclass: str) -> list[str]:
        return [n for n in self.members.get(eclass, []) if self.op(n) not in _HIDDEN_OPS]

    def title(self, eclass: str) -> str:
        """The tensor's name when the class holds a ``Tensor.ref`` handle, else the class id."""
        for node_id in self.members.get(eclass, []):
            if self.op(node_id) == "Tensor.ref":
                index = int(self.op(self.children(node_id)[0]))
                if 0 <= index < len(self.tensor_names):
                    return f"tensor {self.tensor_names[index]}"
        return f"e-class {eclass}"

    def list_items(self, node_id: str) -> Iterator[str]:
        """The elements of an ``Args``/``Dims`` cons list (first member of each tail class)."""
        seen: set[str] = set()
        while self.op(node_id).endswith(".cons") and node_id not in seen:
            seen.add(node_id)
            head, tail = self.children(node_id)
            yield head
            node_id = self.members[self.eclass(tail)][0]

    def inline(self, node_id: str, depth: int = 0) -> str:
        """A short text for a value written into a box (a literal, a list, attributes)."""
        op = self.op(node_id)
        if node_id.startswith("primitive-"):
            return op
        if op.endswith(".cons") or op.endswith(".nil"):
            items = [self.inline(item, depth + 1) for item in self.list_items(node_id)]
            return "[" + ", ".join(items) + "]"
        if self.drawn(node_id):
            return "·"
        children = self.children(node_id)
        if not children:
            return op
        if depth >= MAX_INLINE_DEPTH:
            return f"{op}(…)"
        return f"{op}({', '.join(self.inline(child, depth + 1) for child in children)})"

    def label_and_edges(self, node_id: str) -> tuple[str, list[tuple[str, str]]]:
        """An e-node's box text and its edges (label, target e-class) to the classes drawn as frames."""
        op, children = self.op(node_id), self.children(node_id)
        edges: list[tuple[str, str]] = []
        if op == "Node":
            op_type, domain, attrs, inputs, captures, ident, outputs = children
            for position, item in enumerate(self.list_items(inputs)):
                edges.append((f"in{position}", self.eclass(item)))
            for position, item in enumerate(self.list_items(captures)):
                edges.append((f"capture{position}", self.eclass(item)))
            name = self.node_names.get(self.op(ident).strip('"'), "")
            lines = [f"Node {self.op(op_type).strip(chr(34))}"]
            if self.op(domain) != '""':
                lines[0] += f" ({self.op(domain).strip(chr(34))})"
            if name:
                lines.append(f"from {name}")
            lines.append(f"attrs {self.inline(attrs)}, {self.op(outputs)} output(s)")
            return "\n".join(lines), edges
        parts = []
        for position, child in enumerate(children):
            if self.sort(child) == "Args":
                items = list(self.list_items(child))
                edges.extend((f"{position}.{i}", self.eclass(item)) for i, item in enumerate(items))
                parts.append(f"[{len(items)} args]")
            elif self.drawn(child):
                edges.append((str(position), self.eclass(child)))
                parts.append("·")
            else:
                parts.append(self.inline(child))
        return (f"{op}({', '.join(parts)})" if children else op), edges


def egraph_view_dot(
    serialized: dict[str, object], tensor_names: list[str], node_names: dict[str, str], outputs: list[str]
) -> tuple[str, int, int]:
    """(DOT, e-classes drawn, e-nodes drawn) of the terms reachable from the ``outputs`` tensors."""
    view = _View(serialized, tensor_names, node_names)
    wanted = {str(tensor_names.index(name)) for name in outputs if name in tensor_names}
    roots = [
        view.eclass(n) for n in view.nodes if view.op(n) == "Tensor.ref" and view.op(view.children(n)[0]) in wanted
    ]
    order: list[str] = []
    boxes: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    queue, seen = list(roots), set(roots)
    while queue:
        eclass = queue.pop(0)
        order.append(eclass)
        for node_id in view.shown(eclass):
            boxes[node_id] = view.label_and_edges(node_id)
            for _, target in boxes[node_id][1]:
                if target not in seen:
                    seen.add(target)
                    queue.append(target)
    anchor = {c: f"c{i}" for i, c in enumerate(order)}
    lines = [
        "compound=true; rankdir=TB; newrank=true;",
        'node [shape=box, fontname="Helvetica", fontsize=10];',
        'edge [fontname="Helvetica", fontsize=8, color="#555555"];',
    ]
    box_ids: dict[str, str] = {}
    for index, eclass in enumerate(order):
        root = eclass in roots
        style = 'style="dashed,bold"; color="#1d3557"' if root else 'style=dashed; color="#777777"'
        title = view.title(eclass) + (" (graph output)" if root else "")
        lines.append(f"subgraph cluster_{index} {{")
        lines.append(f'  label={_quote(title)}; fontname="Helvetica"; fontsize=10; {style};')
        members = view.shown(eclass)
        if not members:  # a named tensor with no term of its own: an anchor keeps the frame drawable
            lines.append(f"  {anchor[eclass]} [shape=point, width=0.05];")
        for position, node_id in enumerate(members):
            box = anchor[eclass] if position == 0 else f"{anchor[eclass]}_{position}"
            box_ids[node_id] = box
            lines.append(f"  {box} [label={_quote(boxes[node_id][0])}];")
        lines.append("}")
    for node_id, (_, edges) in boxes.items():
        for label, target in edges:
            head = anchor[target]
            cluster = order.index(target)
            lines.append(f"{box_ids[node_id]} -> {head} [lhead=cluster_{cluster}, label={_quote(label)}];")
    return "digraph egraph {\n  " + "\n  ".join(lines) + "\n}\n", len(order), len(boxes)


def egraph_picture(
    model: onnx.ModelProto, target: str = "ort", raw: bool = False, base_dir: Path | None = None
) -> EGraphPicture:
    """Encode and saturate ``model`` as ``optimize_model`` does, then draw the e-graph (``base_dir``: the
    folder of the model's external data, read by the rules that fold weights)."""
    from onnxsat import model_io
    from onnxsat.eqsat.encode import encode
    from onnxsat.eqsat.optimizer import _shape_inferred
    from onnxsat.eqsat.rules import applicable, rulesets_for
    from onnxsat.eqsat.saturate import SaturationLimits, saturate

    model_io.check_model(model)
    encoded = encode(model, _shape_inferred(model), base_dir)
    rulesets = applicable(rulesets_for(target), model.graph, bool(encoded.facts.parallel_pairs))
    stats = saturate(encoded.egraph, rulesets, SaturationLimits())
    serialized = encoded.egraph._serialize()
    if raw:
        data = json.loads(serialized.to_json())
        eclasses, enodes = len(data["class_data"]), len(data["nodes"])
        return EGraphPicture(serialized.to_dot(), eclasses, enodes, stats.iterations, stats.stop_reason)
    node_names = {ident: node.name or node.op_type for ident, node in encoded.nodes.items()}
    outputs = [value.name for value in model.graph.output]
    dot, eclasses, enodes = egraph_view_dot(json.loads(serialized.to_json()), encoded.tensor_names, node_names, outputs)
    return EGraphPicture(dot, eclasses, enodes, stats.iterations, stats.stop_reason)
