"""A model with one node quantized, made without running ONNX Runtime's quantizer on the whole model.

Why: the budget search measures each suspect node's damage with that node alone quantized. Through the
quantizer that is a whole-model job (it saves, shape-infers, rewrites and reloads every weight): 5.8-6.4 s
per node on GPT-2 small's dynamic mode against 0.3 s this way; 9-12 s for the 30 nodes of a ResNet-18's
static mode against 1.1-1.3 s. The quantizer runs on a one-node model holding just the node and its
weights, under their own names, and its nodes replace the node in a copy of the model.

What that computes: without calibration (dynamic, 4-bit weight-only) a node's quantized form depends only
on the node and its weight, so the result is the whole-model path's (up to the float rounding of a Gemm,
which ORT's dynamic quantizer splits into MatMul and Add). Static mode reads the ranges calibrated on the
whole model (by tensor name, from the cache), so the node's inputs and weights are rounded as there. Its
output is rounded too, as the node's quantized consumers read it in the searched model; ORT's quantizer
asked for that one node alone leaves the consumers reading the unrounded output instead (a ResNet-18's
logits differ by up to 0.013 between the two, against 0.1-0.2 from float). The estimate of ``damage.damage_order``
reads outputs after their rounding too.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import TensorProto, helper

from onnxsat.surgery.graph_edit import copy_model, drop_unused_initializers, remove_where, used_names

QuantizeOne = Callable[[onnx.ModelProto], onnx.ModelProto]
"""The mode's quantizer applied to a one-node model, every node in it quantized."""


def quantize_alone(model: onnx.ModelProto, name: str, quantize: QuantizeOne) -> onnx.ModelProto | None:
    """``model`` with node ``name`` replaced by the quantizer's form of it; None when a splice cannot stand
    in for it (a name the quantizer made is taken, it raised an opset, it remade a weight another node
    reads, the node has a body), so the caller takes the whole-model path."""
    index = next((i for i, node in enumerate(model.graph.node) if node.name == name), None)
    if index is None:
        return None
    node = model.graph.node[index]
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    quantized = quantize(_one_node_model(model, node))
    if not _fits(model, node, quantized):
        return None
    result = copy_model(model)
    nodes = list(result.graph.node)
    nodes[index : index + 1] = list(quantized.graph.node)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    made = {o for n in quantized.graph.node for o in n.output}  # static mode makes a bias from int32 by name
    remove_where(result.graph.initializer, lambda t: t.name in made)
    present = {t.name for t in result.graph.initializer}
    result.graph.initializer.extend(t for t in quantized.graph.initializer if t.name not in present)
    known = {(o.domain or "") for o in result.opset_import}
    result.opset_import.extend(o for o in quantized.opset_import if (o.domain or "") not in known)
    drop_unused_initializers(result.graph)
    return result


def _one_node_model(model: onnx.ModelProto, node: onnx.NodeProto) -> onnx.ModelProto:
    """``node`` alone under its own names: its weights copied, its other inputs graph inputs typed as the
    model knows them (float, of unknown shape, where it does not: the quantized ops read float)."""
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    known = {v.name: v for v in [*graph.input, *graph.value_info, *graph.output]}

    def typed(name: str) -> onnx.ValueInfoProto:
        value = onnx.ValueInfoProto()
        if name in known and known[name].type.HasField("tensor_type"):
            value.CopyFrom(known[name])
        else:
            value.CopyFrom(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        return value

    inputs = [typed(n) for n in dict.fromkeys(node.input) if n and n not in weights]
    initializers = [weights[n] for n in dict.fromkeys(node.input) if n in weights]
    outputs = [typed(n) for n in node.output if n]
    one = helper.make_graph([node], "alone", inputs, outputs, initializer=initializers)
    result = helper.make_model(one, opset_imports=list(model.opset_import))
    result.ir_version = model.ir_version
    return result


def _fits(model: onnx.ModelProto, node: onnx.NodeProto, quantized: onnx.ModelProto) -> bool:
    """Whether ``quantized``'s nodes can stand in ``node``'s place: the same outputs, no new name already
    used in ``model``, and no opset of a domain the model imports raised."""
    graph = quantized.graph
    if [o.name for o in graph.output] != [n for n in node.output if n]:
        return False
    own = {node.name, *node.input, *node.output}
    taken = used_names(model.graph) - own
    made = {o for n in graph.node for o in n.output}
    new = {n.name for n in graph.node if n.name} | made | {t.name for t in graph.initializer if t.name not in own}
    if new & taken:
        return False
    remade = made & {t.name for t in model.graph.initializer}
    others = (other for other in model.graph.node if other.name != node.name)
    if any(name in remade for other in others for name in other.input):
        return False  # a weight it shares with another node would become that node's rounded copy
    versions = {(o.domain or ""): o.version for o in model.opset_import}
    return all(versions.get(o.domain or "", o.version) >= o.version for o in quantized.opset_import)
