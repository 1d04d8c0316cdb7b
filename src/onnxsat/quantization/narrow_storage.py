"""Weights a model stores narrower than it computes them, stored so again where quantization leaves them in float.

Some models store float32 weights as float16 behind a Cast, or as int8 behind ``Cast`` and a scale (``Mul``),
as a hand-made weight-only quantization does. Quantization computes on their float32 form (ONNXSat's normal
form folds them), and what its budget leaves in float would keep that float32 form: a sentence encoder storing
38 int8 weights, its 11.7 M-value embedding table among them, came out of ``quantize`` 2.5x the size of its
file. Here those weights get their narrow form back, computed by the same nodes as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from onnxsat.eqsat.facts import widens_stored
from onnxsat.op_kinds import default_opset_version
from onnxsat.surgery.surgeons.precision import store_in_float16

_ARITHMETIC = frozenset({"Cast", "Mul", "Sub", "Add", "Div", "Reshape", "Transpose", "Unsqueeze", "Squeeze"})
"""Ops a chain from a narrow stored weight to its float32 value may hold (dequantizing, laying out)."""
_OPSET_BOUND = frozenset({"Unsqueeze", "Squeeze"})
"""Of those, the ops whose inputs changed with the opset (axes an input from 13): a chain holding one goes back
only into a model of its own opset (quantization may raise it)."""


@dataclass(frozen=True)
class Chain:
    """The nodes that compute a float32 weight from narrower stored tensors, those tensors, and the opset of
    ai.onnx the nodes are written for."""

    nodes: tuple[onnx.NodeProto, ...]
    initializers: tuple[onnx.TensorProto, ...]
    opset: int


@dataclass(frozen=True)
class NarrowWeights:
    """How the original stored its weights narrower: float16 ones by name (behind a Cast, or as initializers),
    and the chains computing float32 weights from narrower tensors (int8 behind Cast and a scale), by the name of
    the weight they compute."""

    float16: frozenset[str] = frozenset()
    chains: Mapping[str, Chain] = field(default_factory=dict)
    _digests: dict[str, bytes] = field(default_factory=dict, compare=False)
    """Per chain, the digest of the values it computes, found once: quantization's search builds many models."""

    def restore(self, model: onnx.ModelProto) -> int:
        """In place: each float32 initializer of ``model`` the original stored narrower stored so again (float16
        behind a Cast; a chain's tensors and nodes, where they compute its very values); bytes saved."""
        saved = store_in_float16(model, self.float16) if self.float16 else 0
        return saved + _restore_chains(model, self.chains, self._digests)


STORED_AS_COMPUTED = NarrowWeights()
"""A model that stores every weight as it computes it."""


def narrow_chains(model: onnx.ModelProto) -> dict[str, Chain]:
    """Per value that only stored tensors compute, through the ops of ``_ARITHMETIC`` and a Cast widening a large
    stored tensor to float32 (``widens_stored``: what the lossless optimization leaves narrow): the chain computing
    it."""
    graph = model.graph
    stored = {t.name: t for t in graph.initializer}
    opset = default_opset_version(model)
    found: dict[str, tuple[frozenset[int], frozenset[str], bool]] = {}  # value -> its nodes, tensors, narrowed
    for index, node in enumerate(graph.node):
        sources = [name for name in node.input if name]
        if node.op_type not in _ARITHMETIC or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        if not sources or not all(name in stored or name in found for name in sources):
            continue
        nodes, tensors, narrowed = {index}, set(), _widens(node, stored)
        for name in sources:
            if name in found:
                nodes |= found[name][0]
                tensors |= found[name][1]
                narrowed |= found[name][2]
            else:
                tensors.add(name)
        found[node.output[0]] = (frozenset(nodes), frozenset(tensors), narrowed)
    return {
        name: Chain(tuple(graph.node[i] for i in sorted(nodes)), tuple(stored[t] for t in sorted(tensors)), opset)
        for name, (nodes, tensors, narrowed) in found.items()
        if narrowed
    }


def _widens(node: onnx.NodeProto, stored: Mapping[str, onnx.TensorProto]) -> bool:
    """Whether ``node`` is a Cast to float32 of a large stored tensor of a narrower type."""
    if node.op_type != "Cast" or node.input[0] not in stored:
        return False
    source = stored[node.input[0]]
    to = next((a.i for a in node.attribute if a.name == "to"), 0)
    elements = int(np.prod(source.dims, dtype=np.int64))
    return to == onnx.TensorProto.FLOAT and widens_stored(source.data_type, to, elements)


def _restore_chains(model: onnx.ModelProto, chains: Mapping[str, Chain], digests: dict[str, bytes]) -> int:
    """In place: each float32 initializer named like a chain's value, whose values the chain computes bit for bit
    in fewer bytes, replaced by the chain; bytes saved. ``digests``: the chains' values' digests found so far."""
    graph = model.graph
    held = {t.name: t for t in graph.initializer}
    outputs = {o for node in graph.node for o in node.output}
    saved, nodes, added = 0, [], set()  # added: the outputs of the chains' nodes put back so far
    for tensor in list(graph.initializer):
        chain = chains.get(tensor.name)
        if chain is None or tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        if chain.opset != default_opset_version(model) and any(n.op_type in _OPSET_BOUND for n in chain.nodes):
            continue
        # a chain may share a scale, or its first steps, with one put back before it: those are there already
        missing = [t for t in chain.initializers if t.name not in held]
        steps = [n for n in chain.nodes if n.output[0] not in added]
        same = all(held[t.name] == t for t in chain.initializers if t.name not in {m.name for m in missing})
        clash = {o for n in steps for o in n.output} - {tensor.name}
        narrow = sum(t.ByteSize() for t in missing)
        if not same or clash & (outputs | set(held)) or narrow >= tensor.ByteSize():
            continue  # a name the result uses otherwise, or nothing saved
        if tensor.name not in digests:
            digests[tensor.name] = _digest(_computed(chain, tensor.name))
        if _digest(numpy_helper.to_array(tensor)) != digests[tensor.name]:
            continue
        graph.initializer.remove(tensor)
        del held[tensor.name]
        graph.initializer.extend(missing)
        held.update((t.name, t) for t in missing)
        nodes.extend(steps)
        added |= {o for n in steps for o in n.output}
        outputs |= added
        saved += tensor.ByteSize() - narrow
    if nodes:
        rest = list(graph.node)
        del graph.node[:]
        graph.node.extend([*nodes, *rest])  # computed from stored tensors only: before every node reading them
    return saved


def _digest(values: np.ndarray) -> bytes:
    """What identifies float32 values bit for bit."""
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f4").tobytes()).digest() + str(values.shape).encode()


def _computed(chain: Chain, name: str) -> np.ndarray:
    """The value ``chain`` computes for ``name``, by ONNX Runtime (as the folding that made the weight did)."""
    graph = onnx.helper.make_graph(
        list(chain.nodes), "chain", [], [onnx.helper.make_empty_tensor_value_info(name)], list(chain.initializers)
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", chain.opset)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run([name], {})[0])
