"""Debugging aids on the graph's interface: expose intermediate tensors, drop stale shape records."""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from onnxsat.surgery.graph_edit import copy_model
from onnxsat.surgery.surgeon import Surgeon, SurgeryError, SurgeryOutcome, register
from onnxsat.surgery.surgeons._editing import inferred_value_infos


@register
@dataclass
class AddIntermediateTensorsToOutputs(Surgeon):
    """Expose intermediate tensors as extra graph outputs, to inspect them; existing outputs are kept.

    ``intermediate_tensor_to_add`` names the node outputs to expose (None: every node output). Each new
    output is declared with its inferred type (Olive declares every one float, which breaks integer
    tensors). Naming a tensor no node produces is an error.
    """

    intermediate_tensor_to_add: list[str] | None = None

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        made = [name for node in graph.node for name in node.output if name]
        wanted = made if self.intermediate_tensor_to_add is None else self.intermediate_tensor_to_add
        unknown = [name for name in wanted if name not in set(made)]
        if unknown:
            raise SurgeryError(f"AddIntermediateTensorsToOutputs: no node produces tensor {unknown[0]!r}")
        present = {output.name for output in graph.output}
        new = [name for name in dict.fromkeys(wanted) if name not in present]
        if not new:
            return SurgeryOutcome(result, False, "every requested tensor is already a graph output: nothing to add")
        infos = inferred_value_infos(result)
        for name in new:
            graph.output.append(infos[name] if name in infos else onnx.ValueInfoProto(name=name))
        return SurgeryOutcome(result, True, f"added {len(new)} intermediate tensor(s) to the outputs")


@register
@dataclass
class RemoveAllTensorValueShapes(Surgeon):
    """Clear the shape of every ``value_info`` entry (types stay), for runtimes or tools that choke on
    stale or conflicting intermediate shapes. Graph inputs and outputs keep theirs. Exact."""

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        shaped = [info for info in result.graph.value_info if info.type.tensor_type.HasField("shape")]
        for info in shaped:
            info.type.tensor_type.ClearField("shape")
        if not shaped:
            return SurgeryOutcome(result, False, "no value_info entry has a shape: nothing to clear")
        return SurgeryOutcome(result, True, f"cleared the shape of {len(shaped)} value_info entr(y/ies)")
