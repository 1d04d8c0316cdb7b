"""Surgeons on a model's interface: rename, reorder, remove, zero out and expose its inputs and outputs.

Each keeps the graph valid: a rename reaches every reader of the tensor, a removed input leaves no
node reading a name nobody defines, an exposed tensor gets the type ONNX Runtime needs for an output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from onnxsat.surgery.graph_edit import (
    consumers,
    copy_model,
    initializers,
    producers,
    rename_tensor,
    unique_name,
    used_names,
)
from onnxsat.surgery.surgeon import Surgeon, SurgeryError, SurgeryOutcome, register
from onnxsat.surgery.surgeons.shapes import static_dims, tensor_types


def _check_pairs(surgeon: str, old_names: Sequence[str], new_names: Sequence[str], present: list[str]) -> None:
    """Refuse a rename that cannot be done as asked, naming the first bad name."""
    if len(old_names) != len(new_names):
        raise SurgeryError(
            f"{surgeon}: old_names has {len(old_names)} names but new_names has {len(new_names)}; "
            "they pair up one to one"
        )
    for names, key in ((old_names, "old_names"), (new_names, "new_names")):
        repeated = next((name for name in names if list(names).count(name) > 1), None)
        if repeated is not None:
            raise SurgeryError(f"{surgeon}: {repeated!r} appears twice in {key}")
    kind = "input" if surgeon == "RenameInputs" else "output"
    missing = next((name for name in old_names if name not in present), None)
    if missing is not None:
        raise SurgeryError(f"{surgeon}: the model has no {kind} {missing!r} (its {kind}s: {', '.join(present)})")


def _check_free(surgeon: str, graph: onnx.GraphProto, old: str, new: str) -> None:
    if new != old and new in used_names(graph):
        raise SurgeryError(f"{surgeon}: cannot rename {old!r} to {new!r}: the model already has a tensor {new!r}")


def _identity(graph: onnx.GraphProto, source: str, target: str) -> None:
    """Append ``target = Identity(source)``: gives a tensor a second name without renaming it."""
    graph.node.append(helper.make_node("Identity", [source], [target], name=unique_name(graph, f"{target}_identity")))


@register
@dataclass
class RenameInputs(Surgeon):
    """Rename graph inputs; every node (and subgraph) reading one reads the new name.

    An input that is also a graph output keeps its output name through an Identity: only the inputs
    change. A new name the model already uses is refused (renaming would merge two tensors).
    """

    old_names: list[str]
    new_names: list[str]

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        _check_pairs(self.name(), self.old_names, self.new_names, [value.name for value in graph.input])
        outputs = {value.name for value in graph.output}
        renamed = 0
        for old, new in zip(self.old_names, self.new_names, strict=True):
            if old == new:
                continue
            _check_free(self.name(), graph, old, new)
            rename_tensor(graph, old, new)
            if old in outputs:
                next(value for value in graph.output if value.name == new).name = old
                _identity(graph, new, old)
            renamed += 1
        return SurgeryOutcome(result, renamed > 0, f"renamed {renamed} inputs")


@register
@dataclass
class RenameOutputs(Surgeon):
    """Rename graph outputs; the producing node and every reader of the tensor use the new name.

    An output that is also a graph input gets its new name from an Identity, so the input keeps its name.
    """

    old_names: list[str]
    new_names: list[str]

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        _check_pairs(self.name(), self.old_names, self.new_names, [value.name for value in graph.output])
        inputs = {value.name for value in graph.input}
        renamed = 0
        for old, new in zip(self.old_names, self.new_names, strict=True):
            if old == new:
                continue
            _check_free(self.name(), graph, old, new)
            if old in inputs:
                next(value for value in graph.output if value.name == old).name = new
                _identity(graph, old, new)
            else:
                rename_tensor(graph, old, new)
            renamed += 1
        return SurgeryOutcome(result, renamed > 0, f"renamed {renamed} outputs")


@register
@dataclass
class ReorderInputs(Surgeon):
    """Reorder ``graph.input``: position ``i`` of the result holds the input at ``permutation[i]``.

    Runtimes that bind inputs by position (some embedded ones) need a fixed order; names are untouched.
    """

    permutation: list[int]

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        inputs = list(result.graph.input)
        if sorted(self.permutation) != list(range(len(inputs))):
            raise SurgeryError(
                f"ReorderInputs: permutation {self.permutation} is not a rearrangement of the model's "
                f"{len(inputs)} input positions 0..{len(inputs) - 1}"
            )
        if self.permutation == list(range(len(inputs))):
            return SurgeryOutcome(result, False, "the permutation is the identity: inputs keep their order")
        reordered = [inputs[index] for index in self.permutation]
        del result.graph.input[:]
        result.graph.input.extend(reordered)
        return SurgeryOutcome(result, True, "inputs reordered: " + ", ".join(value.name for value in reordered))


def _required_slot(node: onnx.NodeProto, index: int, opset: dict[str, int]) -> bool:
    """Whether input ``index`` of ``node`` must be given (its schema does not declare it optional).

    An op ONNX has no schema for (an ORT contrib op) is trusted to accept an absent input: the name
    to remove was chosen by someone who knows that op.
    """
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opset.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return False
    if index >= len(schema.inputs):
        return True
    return schema.inputs[index].option != onnx.defs.OpSchema.FormalParameterOption.Optional


def _read_in_subgraph(graph: onnx.GraphProto, name: str) -> bool:
    """Whether a subgraph of ``graph`` (at any depth) reads ``name`` from the outer scope."""
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                if any(name in inner.input for inner in subgraph.node) or _read_in_subgraph(subgraph, name):
                    return True
    return False


@register
@dataclass
class RemoveInputs(Surgeon):
    """Remove graph inputs the model can do without.

    An input that is also an initializer stops being overridable and becomes a constant. Any other
    input may only be read where the op declares the input optional: there it becomes the empty name
    (ONNX's "not given"), and trailing empty inputs are dropped. An input a node needs is refused
    rather than leaving a node with an input missing (Olive drops the slot, which shifts the inputs
    after it and leaves e.g. a one-input Add); ZeroOutInput first replaces such a reader with zeros.
    """

    names: list[str]

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        present = [value.name for value in graph.input]
        missing = next((name for name in self.names if name not in present), None)
        if missing is not None:
            raise SurgeryError(f"RemoveInputs: the model has no input {missing!r} (its inputs: {', '.join(present)})")
        opset = {entry.domain or "": entry.version for entry in result.opset_import}
        opset.setdefault("", opset.get("ai.onnx", 1))
        constants = set(initializers(graph))
        outputs = {value.name for value in graph.output}
        for name in [name for name in dict.fromkeys(self.names) if name not in constants]:
            if name in outputs or _read_in_subgraph(graph, name):
                raise SurgeryError(f"RemoveInputs: input {name!r} is a graph output or read inside a subgraph")
            for node in consumers(graph).get(name, []):
                index = next(
                    (i for i, read in enumerate(node.input) if read == name and _required_slot(node, i, opset)), None
                )
                if index is not None:
                    raise SurgeryError(
                        f"RemoveInputs: input {name!r} feeds required input {index} of {node.op_type} node "
                        f"{node.name!r}; ZeroOutInput can replace it with zeros first"
                    )
            for node in consumers(graph).get(name, []):
                node.input[:] = ["" if read == name else read for read in node.input]
                while node.input and not node.input[-1]:
                    del node.input[-1]
        kept = [value for value in graph.input if value.name not in self.names]
        del graph.input[:]
        graph.input.extend(kept)
        if not self.names:
            return SurgeryOutcome(result, False, "no input names given: nothing to remove")
        return SurgeryOutcome(result, True, f"removed inputs {', '.join(self.names)}")


@register
@dataclass
class ZeroOutInput(Surgeon):
    """Feed input ``input_idx`` of the node named ``node_name`` from a Constant of zeros instead.

    The zeros take the input's element type and shape, with 1 for dimensions that are not fixed (they
    broadcast). The tensor that fed the slot stays in the graph; a graph input left unread can then go
    with RemoveInputs (the document's example drops it at once; keeping it leaves the interface to the
    caller).
    """

    node_name: str
    input_idx: int

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        position = next((i for i, node in enumerate(graph.node) if node.name == self.node_name), None)
        if position is None:
            raise SurgeryError(f"ZeroOutInput: the model has no node named {self.node_name!r}")
        node = graph.node[position]
        if not 0 <= self.input_idx < len(node.input) or not node.input[self.input_idx]:
            raise SurgeryError(
                f"ZeroOutInput: node {self.node_name!r} has no input {self.input_idx} (it has {len(node.input)})"
            )
        target = node.input[self.input_idx]
        tensor_type = tensor_types(model).get(target)
        dims = static_dims(tensor_type)
        if tensor_type is None or dims is None:
            raise SurgeryError(
                f"ZeroOutInput: the type or shape of {target!r} (input {self.input_idx} of {self.node_name!r}) "
                "is unknown; declare it or run InferShapes first"
            )
        shape = [1 if dim is None else dim for dim in dims]
        zeros = helper.make_tensor("zeros", tensor_type.elem_type, shape, np.zeros(int(np.prod(shape))))
        taken = used_names(graph)
        output = unique_name(graph, f"{self.node_name}_zero_output_0", taken)
        constant = helper.make_node("Constant", [], [output], unique_name(graph, f"{self.node_name}_zero", taken))
        constant.attribute.append(helper.make_attribute("value", zeros))
        node.input[self.input_idx] = output
        graph.node.insert(position, constant)
        return SurgeryOutcome(result, True, f"input {self.input_idx} of {self.node_name!r} ({target!r}) is now zeros")


def _value_info(types: dict[str, onnx.TypeProto.Tensor], name: str) -> onnx.ValueInfoProto:
    """A graph output entry for ``name``, typed when its type is known (the checker wants one)."""
    value = onnx.ValueInfoProto(name=name)
    if name in types:
        value.type.tensor_type.CopyFrom(types[name])
    return value


@register
@dataclass
class ExposeOutputs(Surgeon):
    """Make every output of the nodes named ``names`` a graph output (to inspect or calibrate them).

    Olive exposes only a node's first output; "the outputs of specific nodes" are all of them here.
    """

    names: list[str]

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        nodes = [node for node in graph.node if node.name in self.names]
        missing = next((name for name in self.names if name not in {node.name for node in nodes}), None)
        if missing is not None:
            raise SurgeryError(f"ExposeOutputs: the model has no node named {missing!r}")
        present = {value.name for value in graph.output}
        exposed = [name for node in nodes for name in node.output if name and name not in present]
        exposed = list(dict.fromkeys(exposed))
        if not exposed:
            return SurgeryOutcome(result, False, "every output of those nodes is already a graph output")
        types = tensor_types(model)
        graph.output.extend(_value_info(types, name) for name in exposed)
        return SurgeryOutcome(result, True, f"exposed {', '.join(exposed)}")


@register
@dataclass
class ExposeQuantizedOutput(Surgeon):
    """Return output ``output_name`` still quantized: the DequantizeLinear that computes it is removed,
    its quantized input takes the output's place, and its scale and zero point become two more outputs
    (``<output_name>_scale``, ``<output_name>_zero_point``) so the caller can dequantize.

    Olive reads the scale and zero point from the QuantizeLinear upstream and exposes their first
    element; this reads the DequantizeLinear's own (any shape, even computed ones), which define the
    output. A missing zero point (0 by default) is exposed as zeros of the quantized type.
    """

    output_name: str

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        position = next((i for i, value in enumerate(graph.output) if value.name == self.output_name), None)
        if position is None:
            raise SurgeryError(f"ExposeQuantizedOutput: the model has no output {self.output_name!r}")
        dequantize = producers(graph).get(self.output_name)
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            source = "a graph input or initializer" if dequantize is None else f"a {dequantize.op_type} node"
            raise SurgeryError(
                f"ExposeQuantizedOutput: output {self.output_name!r} comes from {source}, not a DequantizeLinear"
            )
        types = tensor_types(model)
        quantized, scale = dequantize.input[0], dequantize.input[1]
        zero_point = dequantize.input[2] if len(dequantize.input) > 2 else ""
        taken = used_names(graph)
        if not zero_point:
            if quantized not in types:
                raise SurgeryError(f"ExposeQuantizedOutput: the element type of {quantized!r} is unknown")
            zero_point = unique_name(graph, f"{self.output_name}_default_zero_point", taken)
            shape = list(static_dims(types.get(scale)) or [])
            zeros = helper.make_tensor(zero_point, types[quantized].elem_type, shape, np.zeros(int(np.prod(shape))))
            graph.initializer.append(zeros)
            types[zero_point] = helper.make_tensor_type_proto(zeros.data_type, shape).tensor_type
        graph.output[position].CopyFrom(_value_info(types, quantized))
        if self.output_name not in consumers(graph):
            graph.node.remove(dequantize)
        exposed = []
        for source, suffix in ((scale, "scale"), (zero_point, "zero_point")):
            name = unique_name(graph, f"{self.output_name}_{suffix}", taken)
            _identity(graph, source, name)
            graph.output.append(_value_info({name: types[source]} if source in types else {}, name))
            exposed.append(name)
        return SurgeryOutcome(
            result,
            True,
            f"output {self.output_name!r} is now quantized tensor {quantized!r} with outputs {', '.join(exposed)}",
        )


@register
@dataclass
class RemoveInitializerFromInputs(Surgeon):
    """Stop listing initializers among the graph inputs (IR version 4 made that listing optional).

    A listed initializer is an input the caller may override, which keeps runtimes from folding it as a
    constant. Olive removes only the trailing run of such inputs; every one is removed here.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        constants = set(initializers(graph))
        kept = [value for value in graph.input if value.name not in constants]
        removed = len(graph.input) - len(kept)
        if not removed:
            return SurgeryOutcome(result, False, "no initializer is listed as an input: nothing to remove")
        if result.ir_version < 4:
            raise SurgeryError(
                f"RemoveInitializerFromInputs: IR version {result.ir_version} requires every initializer to be "
                "a graph input; the model must be IR version 4 or later"
            )
        del graph.input[:]
        graph.input.extend(kept)
        return SurgeryOutcome(result, True, f"removed {removed} initializers from the graph inputs")
