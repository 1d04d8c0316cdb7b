"""ONNX Runtime's fused ops split back into standard ones, so a model ``onnxsat optimize --target ort``
already rewrote can still be pruned.

FusedConv and FusedGemm (com.microsoft) hold a Conv or Gemm and its activation in one node; the node
attribute library and the association trees speak standard ONNX, where the Conv is a root and the
activation passes channels through. Splitting is exact (the fused kernel computes the same two steps),
so the pruned model comes out in standard ops; running ``onnxsat optimize`` on it fuses them again.

Only what ONNXSat and ORT's own optimizer emit at CPU levels is split: activations Relu, Sigmoid, Tanh,
LeakyRelu (``activation_params`` [alpha] or ``activation_alpha``), HardSigmoid ([alpha, beta]) and
Clip ([min, max]); a FusedConv with its optional fourth input (a fused Add) is left as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsat.surgery.graph_edit import unique_name, used_names

FUSED_OPS = {"FusedConv": "Conv", "FusedGemm": "Gemm"}
_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Clip")


def split_fused(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with every splittable FusedConv/FusedGemm written as its op plus activation,
    and how many were split (``model`` itself when none)."""
    if not any(_splittable(node) for node in model.graph.node):
        return model, 0
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph, taken = copy.graph, used_names(copy.graph)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if not _splittable(node):
            nodes.append(node)
            continue
        nodes.extend(_split(node, graph, taken))
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(node.domain == "com.microsoft" for node in graph.node):
        kept = [o for o in copy.opset_import if o.domain != "com.microsoft"]
        del copy.opset_import[:]
        copy.opset_import.extend(kept)
    return copy, len(nodes) - len(model.graph.node)


def fused_count(model: onnx.ModelProto) -> int:
    """How many FusedConv/FusedGemm nodes ``model`` has (split or not)."""
    return sum(1 for node in model.graph.node if node.domain == "com.microsoft" and node.op_type in FUSED_OPS)


def _splittable(node: onnx.NodeProto) -> bool:
    if node.domain != "com.microsoft" or node.op_type not in FUSED_OPS:
        return False
    if node.op_type == "FusedConv" and len(node.input) > 3 and node.input[3]:
        return False
    return _activation(node)[0] in _ACTIVATIONS


def _activation(node: onnx.NodeProto) -> tuple[str, list[float]]:
    """The fused activation's name and parameters (FusedConv's ``activation_params``, or FusedGemm's
    ``activation_alpha``/``activation_beta``)."""
    values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    name = values.get("activation", b"")
    name = name.decode() if isinstance(name, bytes) else str(name)
    params = [float(v) for v in values.get("activation_params", [])]
    if not params and "activation_alpha" in values:
        params = [float(values["activation_alpha"])]
        if "activation_beta" in values:
            params.append(float(values["activation_beta"]))
    return name, params


def _split(node: onnx.NodeProto, graph: onnx.GraphProto, taken: set[str]) -> list[onnx.NodeProto]:
    name, params = _activation(node)
    kept = [a for a in node.attribute if not a.name.startswith("activation")]
    middle = unique_name(graph, f"{node.output[0]}_pre_{name.lower()}", taken)
    base = helper.make_node(FUSED_OPS[node.op_type], list(node.input[:3]), [middle], name=node.name)
    base.attribute.extend(kept)
    inputs, attributes = [middle], {}
    if name == "Clip":
        for bound, value in zip(("min", "max"), params, strict=False):
            constant = unique_name(graph, f"{node.name or node.output[0]}_clip_{bound}", taken)
            graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.float32), constant))
            inputs.append(constant)
    elif name == "LeakyRelu" and params:
        attributes["alpha"] = params[0]
    elif name == "HardSigmoid" and params:
        attributes = dict(zip(("alpha", "beta"), params, strict=False))
    activation_name = unique_name(graph, f"{node.name or node.output[0]}_{name.lower()}", taken)
    activation = helper.make_node(name, inputs, list(node.output), name=activation_name, **attributes)
    return [base, activation]
