"""Control flow whose path constants decide, replaced by that path.

- An ``If`` whose condition is a constant becomes the nodes of its taken branch.
- A ``Loop`` that provably runs zero times (trip count 0, or a constant false condition) becomes its initial
  values; one that provably runs once (trip count 1, condition true or absent) becomes its body inlined once,
  each scan output given its leading axis of one.

A condition counts as constant when it is an initializer no feed can override or a ``Constant`` node's output,
which is what constant folding leaves of a condition computed from constants and static shapes. Inlined names
are made unique across every scope; the branch's outputs take the control-flow node's output names, so
readers outside are untouched. Lossless: the model computes the same for every input it accepts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.eqsat.control_flow.scopes import NameSource, all_names, rename
from onnxsat.proto_fields import bodies_of

_DEFAULT_DOMAINS = ("", "ai.onnx")
_MAX_SWEEPS = 8
"""A branch may hold control flow its own constants decide; each sweep settles one more level."""


@dataclass
class Settled:
    """What ``settle`` replaced, by op type."""

    counts: Counter[str] = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.counts)


def settle(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Settled]:
    """``model`` with the main graph's decided control flow replaced (a copy; ``model`` is left as it is)."""
    settled = Settled()
    if model.ir_version < 4 or not any(_decidable(node) for node in model.graph.node):
        return model, settled
    result = onnx.ModelProto()
    result.CopyFrom(model)
    names = NameSource(all_names(result.graph) | {v.name for v in result.graph.output})
    opset = next((int(o.version) for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 0)
    for _ in range(_MAX_SWEEPS):
        if not _sweep(result.graph, names, settled, opset):
            break
    return (result, settled) if settled else (model, settled)


def _decidable(node: onnx.NodeProto) -> bool:
    return node.domain in _DEFAULT_DOMAINS and node.op_type in ("If", "Loop")


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Tensors no feed can change: initializers that are not inputs, and Constant nodes' ``value``."""
    inputs = {value.name for value in graph.input}
    constants = {t.name: t for t in graph.initializer if t.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS and len(node.attribute) == 1:
            attribute = node.attribute[0]
            if attribute.name == "value":
                constants[node.output[0]] = attribute.t
            elif attribute.name in ("value_int", "value_ints", "value_float", "value_floats"):
                dtype = np.int64 if "int" in attribute.name else np.float32
                value = np.asarray(onnx.helper.get_attribute_value(attribute), dtype=dtype)
                constants[node.output[0]] = numpy_helper.from_array(value)
    return constants


def _scalar(constants: dict[str, onnx.TensorProto], name: str) -> object | None:
    """The single value of a one-element constant ``name``, or None when it is not one."""
    tensor = constants.get(name)
    if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    array = numpy_helper.to_array(tensor)
    return array.reshape(-1)[0].item() if array.size == 1 else None


def _sweep(graph: onnx.GraphProto, names: NameSource, settled: Settled, opset: int) -> bool:
    constants = _constants(graph)
    for position, node in enumerate(graph.node):
        if not _decidable(node):
            continue
        if node.op_type == "If":
            replacement = _if_replacement(node, constants, names, opset)
        else:
            replacement = _loop_replacement(node, constants, names, graph, opset)
        if replacement is None:
            continue
        nodes, initializers, value_info = replacement
        del graph.node[position]
        for offset, new in enumerate(nodes):
            graph.node.insert(position + offset, new)
        graph.initializer.extend(initializers)
        graph.value_info.extend(value_info)
        settled.counts[node.op_type] += 1
        return True
    return False


_Replacement = tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[onnx.ValueInfoProto]]


def _if_replacement(
    node: onnx.NodeProto, constants: dict[str, onnx.TensorProto], names: NameSource, opset: int
) -> _Replacement | None:
    condition = _scalar(constants, node.input[0]) if node.input else None
    if condition is None:
        return None
    wanted = "then_branch" if bool(condition) else "else_branch"
    branch = next((a.g for a in node.attribute if a.name == wanted), None)
    if branch is None or len(branch.output) != len(node.output):
        return None
    return _inline(branch, {}, list(zip(branch.output, node.output, strict=True)), [], names, opset)


def _loop_replacement(
    node: onnx.NodeProto, constants: dict[str, onnx.TensorProto], names: NameSource, graph: onnx.GraphProto, opset: int
) -> _Replacement | None:
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None or len(node.input) < 2:
        return None
    trip = _scalar(constants, node.input[0]) if node.input[0] else None
    condition = _scalar(constants, node.input[1]) if node.input[1] else True
    carried = list(node.input[2:])
    if len(body.output) < 1 + len(carried) or len(node.output) > len(body.output) - 1:
        return None
    outputs = list(node.output) + [""] * (len(body.output) - 1 - len(node.output))  # trailing ones may be omitted
    finals, scans = outputs[: len(carried)], outputs[len(carried) :]
    if trip == 0 or condition is False or condition == 0:
        if any(_read(graph, name) for name in scans if name):
            return None  # an empty scan output's inner shape is not known here
        nodes = [
            onnx.helper.make_node("Identity", [initial], [final], name=names.fresh(f"{final}_initial"))
            for initial, final in zip(carried, finals, strict=True)
            if final
        ]
        return nodes, [], []
    if trip != 1 or condition is None or not condition or len(body.input) != 2 + len(carried):
        return None
    iteration = numpy_helper.from_array(np.array(0, dtype=np.int64), names.fresh(f"{body.input[0].name}_0"))
    keep_going = numpy_helper.from_array(np.array(True), names.fresh(f"{body.input[1].name}_true"))
    bound = {body.input[0].name: iteration.name, body.input[1].name: keep_going.name}
    bound |= {value.name: outer for value, outer in zip(body.input[2:], carried, strict=True)}
    carried_outputs = list(zip(body.output[1 : 1 + len(carried)], finals, strict=True))
    scanned = list(zip(body.output[1 + len(carried) :], scans, strict=True))
    nodes, initializers, value_info = _inline(body, bound, carried_outputs, scanned, names, opset)
    return nodes, [iteration, keep_going, *initializers], value_info


def _read(graph: onnx.GraphProto, name: str) -> bool:
    """Whether a graph output, a node or a body at any depth reads ``name``."""
    return name in {value.name for value in graph.output} or _reads_inside(graph, name)


def _reads_inside(graph: onnx.GraphProto, name: str) -> bool:
    return any(name in node.input or any(_reads_inside(b, name) for b in bodies_of(node)) for node in graph.node)


def _inline(
    body: onnx.GraphProto,
    bound: dict[str, str],
    outputs: list[tuple[onnx.ValueInfoProto, str]],
    scanned: list[tuple[onnx.ValueInfoProto, str]],
    names: NameSource,
    opset: int,
) -> _Replacement:
    """The nodes, initializers and value infos of ``body`` moved into the enclosing graph.

    ``bound`` maps body inputs to outer names; ``outputs`` pairs body outputs with the names the outer graph
    reads them by; ``scanned`` pairs scan outputs with outer names that get a leading axis of one.
    """
    body = _copy(body)
    produced = {name for node in body.node for name in node.output if name}
    mapping = dict(bound)
    direct: set[int] = set()
    for index, (value, target) in enumerate(outputs):
        if target and value.name in produced and value.name not in mapping:
            mapping[value.name] = target  # the producer writes the outer name itself: no Identity
            direct.add(index)
    for name in sorted(produced | {t.name for t in body.initializer}):
        if name not in mapping:
            mapping[name] = names.fresh(name)
    rename(body, mapping)
    nodes = list(body.node)
    for index, (value, target) in enumerate(outputs):
        if target and index not in direct:
            source = mapping.get(value.name, value.name)
            nodes.append(onnx.helper.make_node("Identity", [source], [target], name=names.fresh(f"{target}_branch")))
    for value, target in scanned:
        if not target:
            continue
        source = mapping.get(value.name, value.name)
        if opset >= 13:
            axes = names.fresh(f"{target}_axes")
            nodes.append(onnx.helper.make_node("Constant", [], [axes], value=numpy_helper.from_array(np.array([0]))))
            nodes.append(onnx.helper.make_node("Unsqueeze", [source, axes], [target], name=names.fresh(target)))
        else:
            nodes.append(onnx.helper.make_node("Unsqueeze", [source], [target], name=names.fresh(target), axes=[0]))
    return nodes, list(body.initializer), list(body.value_info)


def _copy(graph: onnx.GraphProto) -> onnx.GraphProto:
    result = onnx.GraphProto()
    result.CopyFrom(graph)
    return result
