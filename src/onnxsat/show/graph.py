"""A model's main graph as Graphviz DOT: one box per node, one edge per tensor, weights inside the boxes.

The picture answers "what does this model compute, and what did optimizing it change", so it shows
what a reader needs for that and nothing more:

- a node is a box with its op type (``domain::`` outside the default domain), its name and, folded into
  the box, the initializers it reads with their shapes: a weight is part of the op, not a step of the
  computation, and drawn as its own node it would double the picture;
- an edge is a tensor from its producer (a node or a graph input) to each consumer, labelled with its
  name and, where the model records it, its shape;
- with a second model (``--compare``) both graphs sit side by side; in the second, nodes that stand for
  several original ops are filled in colour, and nodes of the first that no longer exist by name in the
  second are greyed, with a legend.

A node "fused several original ops" when it is an ONNX Runtime fused op (``com.microsoft`` FusedConv,
FusedGemm and the like), or when ``onnxsat optimize``'s report lists a fusion that produced it: a label
``Conv+BatchNormalization -> Conv`` matches a node of the result typed ``Conv`` that keeps the name of an
original ``Conv`` whose output an original ``BatchNormalization`` read, which the result no longer has
(the decoder names a fused node after the op it grew from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx

from onnxsat.op_kinds import qualified_op

FUSED_COLOUR = "#f4a261"
FUSED_BORDER = "#b5541c"
REMOVED_COLOUR = "#e5e5e5"
REMOVED_FONT = "#8a8a8a"
IO_COLOUR = "#dbe9f6"
MAX_LABEL = 28
"""Longest tensor or node name drawn in full; longer ones keep their start and end."""
MAX_WEIGHTS_LISTED = 4
"""Initializers listed in a box; more are summarised, so a Concat of 50 constants stays a small box."""


@dataclass(frozen=True)
class Highlights:
    """What the comparison marks: nodes of the result that fused several ops (index -> why), and
    indices of original nodes whose names the result no longer has."""

    fused: dict[int, str] = field(default_factory=dict)
    removed: frozenset[int] = frozenset()


def _short(text: str, limit: int = MAX_LABEL) -> str:
    """A name cut in the middle: the start and the end are what tell layers apart (``...block3_conv``)."""
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}…{text[-keep:]}"


def _quote(text: str) -> str:
    """A DOT string literal (labels may contain any character an ONNX name can)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dims(value: onnx.ValueInfoProto | onnx.TensorProto) -> str:
    """``1×3×32×32`` (symbolic dims by name, unknown ones as ``?``); empty when the shape is unknown."""
    if isinstance(value, onnx.TensorProto):
        return "×".join(str(d) for d in value.dims) or "scalar"
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return ""
    parts = [
        d.dim_param if d.HasField("dim_param") else str(d.dim_value) if d.HasField("dim_value") else "?"
        for d in tensor_type.shape.dim
    ]
    return "×".join(parts) or "scalar"


def op_label(node: onnx.NodeProto) -> str:
    """The op type as the report counts it: ``domain::Op`` outside the default domain."""
    return qualified_op(node.domain, node.op_type)


def _node_label(node: onnx.NodeProto, weights: Mapping[str, onnx.TensorProto]) -> str:
    lines = [op_label(node)]
    activation = next((a.s.decode() for a in node.attribute if a.name == "activation" and a.s), None)
    if activation:
        lines[0] += f" + {activation}"
    if node.name:
        lines.append(_short(node.name))
    folded = [name for name in node.input if name in weights]
    for name in folded[:MAX_WEIGHTS_LISTED]:
        lines.append(f"{_short(name, 20)}: {_dims(weights[name])}")
    if len(folded) > MAX_WEIGHTS_LISTED:
        lines.append(f"+{len(folded) - MAX_WEIGHTS_LISTED} more weights")
    return "\n".join(lines)


def graph_lines(model: onnx.ModelProto, prefix: str, highlights: Highlights | None = None) -> list[str]:
    """DOT statements for the model's main graph, every id starting with ``prefix`` (two graphs in one
    picture must not share ids)."""
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    shapes = {v.name: _dims(v) for v in [*graph.input, *graph.value_info, *graph.output]}
    marks = highlights or Highlights()
    lines: list[str] = []
    producer: dict[str, str] = {}
    for index, value in enumerate(v for v in graph.input if v.name not in weights):
        node_id = f"{prefix}in{index}"
        producer[value.name] = node_id
        label = f"{_short(value.name)}\n{shapes.get(value.name, '')}".strip()
        lines.append(f"{node_id} [shape=ellipse, fillcolor={_quote(IO_COLOUR)}, label={_quote(label)}];")
    for index, node in enumerate(graph.node):
        node_id = f"{prefix}n{index}"
        style = ""
        if index in marks.fused:
            style = f', fillcolor="{FUSED_COLOUR}", color="{FUSED_BORDER}", penwidth=2'
            style += f", tooltip={_quote(marks.fused[index])}"
        elif index in marks.removed:
            style = f', fillcolor="{REMOVED_COLOUR}", fontcolor="{REMOVED_FONT}", color="{REMOVED_FONT}"'
        lines.append(f"{node_id} [label={_quote(_node_label(node, weights))}{style}];")
        for name in node.output:
            if name:
                producer[name] = node_id
    for index, node in enumerate(graph.node):
        for name in dict.fromkeys(node.input):  # a tensor read twice by one node is one edge
            if name in producer:
                label = f"{_short(name)}\n{shapes[name]}" if shapes.get(name) else _short(name)
                lines.append(f"{producer[name]} -> {prefix}n{index} [label={_quote(label)}];")
    for index, value in enumerate(graph.output):
        node_id = f"{prefix}out{index}"
        label = f"{_short(value.name)}\n{shapes.get(value.name, '')}".strip()
        lines.append(f"{node_id} [shape=ellipse, fillcolor={_quote(IO_COLOUR)}, label={_quote(label)}];")
        if value.name in producer:
            lines.append(f"{producer[value.name]} -> {node_id};")
    return lines


_HEADER = [
    "rankdir=TB;",
    'node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica", fontsize=11];',
    'edge [fontname="Helvetica", fontsize=8, color="#555555", fontcolor="#333333"];',
]


def model_dot(model: onnx.ModelProto, title: str) -> str:
    """One model's graph as a complete DOT document."""
    body = [*_HEADER, f"label={_quote(title)}; labelloc=t; fontname=Helvetica;", *graph_lines(model, "g")]
    return "digraph model {\n  " + "\n  ".join(body) + "\n}\n"


def _fusion_parts(label: str) -> tuple[list[str], str] | None:
    """``Conv+BatchNormalization+Relu -> com.microsoft::FusedConv`` -> (the ops, the result's op label)."""
    ops, arrow, target = label.partition(" -> ")
    if not arrow:
        return None
    return ops.split("+"), target


def find_highlights(
    original: onnx.ModelProto, result: onnx.ModelProto, fusions: Mapping[str, int] | None = None
) -> Highlights:
    """Which nodes of ``result`` fused several original ops, and which original nodes it lost (see the
    module docstring for the matching)."""
    result_names = {n.name for n in result.graph.node if n.name}
    removed = frozenset(i for i, n in enumerate(original.graph.node) if n.name and n.name not in result_names)
    original_by_name = {n.name: n for n in original.graph.node if n.name}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in original.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    fused: dict[int, str] = {}
    for index, node in enumerate(result.graph.node):
        if node.domain == "com.microsoft" and node.op_type.startswith("Fused"):
            fused[index] = f"{op_label(node)}: ONNX Runtime fused op"
    for label, count in (fusions or {}).items():
        parts = _fusion_parts(label)
        if parts is None:
            continue
        ops, target = parts
        matched = 0
        for index, node in enumerate(result.graph.node):
            if matched >= count or op_label(node) != target:
                continue
            source = original_by_name.get(node.name)
            if source is None or source.op_type != ops[0]:
                continue
            absorbed = {
                r.op_type for name in source.output for r in readers.get(name, []) if r.name not in result_names
            }
            if len(ops) == 1 or ops[1] in absorbed:
                fused[index] = f"fusion {label}"
                matched += 1
    return Highlights(fused, removed)


def compare_dot(
    original: onnx.ModelProto,
    result: onnx.ModelProto,
    titles: Sequence[str],
    fusions: Mapping[str, int] | None = None,
) -> tuple[str, Highlights]:
    """Both graphs side by side in one DOT document, with the legend, and what was highlighted."""
    highlights = find_highlights(original, result, fusions)
    before = Highlights(removed=highlights.removed)
    after = Highlights(fused=highlights.fused)
    body = [*_HEADER, "newrank=true;"]
    for key, model, title, marks in (("a", original, titles[0], before), ("b", result, titles[1], after)):
        body.append(f"subgraph cluster_{key} {{")
        body.append(f'  label={_quote(title)}; fontname=Helvetica; fontsize=14; color="#bbbbbb";')
        body.extend("  " + line for line in graph_lines(model, key, marks))
        body.append("}")
    body.append("subgraph cluster_legend {")
    body.append('  label="legend"; fontname=Helvetica; fontsize=12; color="#bbbbbb";')
    body.append(
        f'  legend_fused [label="fused: one node for several\\noriginal ops ({len(highlights.fused)})", '
        f'fillcolor="{FUSED_COLOUR}", color="{FUSED_BORDER}", penwidth=2];'
    )
    body.append(
        f'  legend_removed [label="original node absent from\\nthe result ({len(highlights.removed)})", '
        f'fillcolor="{REMOVED_COLOUR}", fontcolor="{REMOVED_FONT}", color="{REMOVED_FONT}"];'
    )
    body.append("  legend_fused -> legend_removed [style=invis];")
    body.append("}")
    return "digraph compare {\n  " + "\n  ".join(body) + "\n}\n", highlights
