"""Weights inside control-flow bodies, made reachable: lifted from If/Loop/Scan bodies to the main graph.

Exports put whole networks in the branches of an ``If`` (a voice-activity model switching on its sample
rate holds every layer twice, once per branch) with their weights as ``Constant`` nodes or initializers
of the body. Sparsify prunes main-graph initializers, and a budget search feeds them as graph inputs, so
a weight a Conv, Gemm or MatMul inside a body multiplies is moved to the main graph's initializers under
a name unique in the whole model; the body reads it from the outer scope, as ONNX lets bodies do. The
values and so the outputs are unchanged. Nested bodies are handled; everything else in a body stays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import onnx

from onnxsat.op_kinds import IEEE_FLOAT_TYPES
from onnxsat.proto_fields import bodies_of
from onnxsat.sparsity.targets import CONV_OPS, GEMM_OPS, MATMUL_OPS

WEIGHT_OPS = CONV_OPS | GEMM_OPS | MATMUL_OPS | {"ConvTranspose"}


def bodies(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The subgraphs of ``graph``'s nodes (If branches, Loop and Scan bodies), not nested ones."""
    for node in graph.node:
        yield from bodies_of(node)


def local_names(graph: onnx.GraphProto) -> set[str]:
    """Every name ``graph`` itself defines: inputs, initializers, node outputs (not its bodies')."""
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    return names | {out for node in graph.node for out in node.output if out}


def definitions(graph: onnx.GraphProto, counts: Counter[str] | None = None) -> Counter[str]:
    """How many times each name is defined in ``graph`` and all its bodies (inputs, initializers, outputs
    of nodes): a name defined once is safe to move to the outer scope as it is."""
    counts = Counter() if counts is None else counts
    counts.update({v.name for v in graph.input} | {t.name for t in graph.initializer})
    counts.update(out for node in graph.node for out in node.output if out)
    for body in bodies(graph):
        definitions(body, counts)
    return counts


def lift_body_weights(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose body weights (see the module docstring) are main-graph initializers, and
    their names there; ``model`` itself when there is nothing to lift."""
    if not any(True for _ in bodies(model.graph)):
        return model, []
    lifted = onnx.ModelProto()
    lifted.CopyFrom(model)
    counts = definitions(lifted.graph)
    moved: list[onnx.TensorProto] = []
    for body in bodies(lifted.graph):
        _lift(body, moved, counts)
    if not moved:
        return model, []
    lifted.graph.initializer.extend(moved)
    return lifted, [t.name for t in moved]


def _lift(graph: onnx.GraphProto, moved: list[onnx.TensorProto], counts: Counter[str]) -> None:
    """Lift ``graph``'s weights (a body), then its own bodies'."""
    outputs = {v.name for v in graph.output}
    weights = {node.input[1] for node in graph.node if node.op_type in WEIGHT_OPS and len(node.input) > 1}
    weights -= outputs
    initializers = {t.name: t for t in graph.initializer}
    kept_nodes, kept_initializers = [], []
    for node in graph.node:
        tensor = _constant_tensor(node)
        if tensor is not None and node.output[0] in weights and _is_weight(tensor):
            moved.append(_renamed(tensor, node.output[0], graph, counts))
        else:
            kept_nodes.append(node)
    for name, tensor in initializers.items():
        if name in weights and _is_weight(tensor):
            moved.append(_renamed(tensor, name, graph, counts))
        else:
            kept_initializers.append(tensor)
    if len(kept_nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(kept_nodes)
    if len(kept_initializers) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept_initializers)
    for body in bodies(graph):
        _lift(body, moved, counts)


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    value = next((a for a in node.attribute if a.name == "value"), None)
    return value.t if value is not None and value.type == onnx.AttributeProto.TENSOR else None


def _is_weight(tensor: onnx.TensorProto) -> bool:
    return tensor.data_type in IEEE_FLOAT_TYPES and len(tensor.dims) >= 2 and not tensor.HasField("data_location")


def _renamed(tensor: onnx.TensorProto, name: str, graph: onnx.GraphProto, counts: Counter[str]) -> onnx.TensorProto:
    """``tensor`` named ``name`` as an outer initializer; when the model defines ``name`` elsewhere too
    (the same name in another branch), a fresh name, and the reads of ``graph`` and its bodies renamed."""
    lifted = onnx.TensorProto()
    lifted.CopyFrom(tensor)
    new = name
    if counts[name] > 1:
        index = 1
        while counts[f"{name}__lifted{index}"]:
            index += 1
        new = f"{name}__lifted{index}"
        _rename_reads(graph, name, new)
    counts[new] += 1
    lifted.name = new
    return lifted


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and its bodies (unless a body defines ``old`` itself) -> ``new``."""
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name == old:
                node.input[index] = new
    for body in bodies(graph):
        if old not in local_names(body):
            _rename_reads(body, old, new)
