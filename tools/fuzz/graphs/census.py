"""What a generated model contains, read from its structure: its op types, rule patterns and near-misses."""

from __future__ import annotations

from collections import Counter

import onnx
from onnx import TensorProto, helper

from onnxsat.op_kinds import default_opset_version
from onnxsat.proto_fields import subgraph_captures
from tools.fuzz.graphs.builder import DOUBLE
from tools.fuzz.graphs.control import FUNCTION_DOMAIN


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
    opset = default_opset_version(model, missing=0)
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
