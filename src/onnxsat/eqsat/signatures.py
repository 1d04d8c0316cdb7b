"""What a cost model is told about a candidate node: its signature, read off the frozen e-graph.

Candidates built by rules exist only as e-nodes, so their op, attributes, and the shapes, element types
and constness of their inputs and outputs come from the e-graph's facts (``HasShape``, ``HasType``,
``StaticValue``): shape inference's facts for original tensors, the rules' own for tensors they create.
"""

from __future__ import annotations

import onnx
from egglog import bindings
from onnx import helper

from onnxsat.eqsat.costs import NodeSignature, TensorInfo
from onnxsat.eqsat.encode import EncodedModel, domain_opset
from onnxsat.eqsat.frozen import ENode, FrozenEGraph, cons_cells
from onnxsat.eqsat.qdq import real_domain


class SignatureReader:
    """Builds :class:`NodeSignature` objects for ``Node`` e-nodes of one snapshot."""

    def __init__(self, snapshot: FrozenEGraph, encoded: EncodedModel) -> None:
        self.snapshot = snapshot
        self.encoded = encoded
        self.infos: dict[bindings.Value, TensorInfo | None] = {}

    def first(self, eclass: bindings.Value) -> ENode:
        return self.snapshot.classes[eclass][0]

    def attributes(self, eclass: bindings.Value) -> list[onnx.AttributeProto]:
        """The attribute list a class stands for; rule-computed sets are priced like the set they derive from."""
        enode = self.first(eclass)
        if enode.op == "AttrsTable":
            key = int(enode.literals[0])  # -1: the encoder's inert declaration term, never extracted
            return list(self.encoded.attributes[key]) if key >= 0 else []
        if enode.op == "AttrsWithActivation":
            return [*self.attributes(enode.children[0]), helper.make_attribute("activation", str(enode.literals[0]))]
        if enode.op == "AttrsComputed":
            return self.attributes(enode.children[0])
        return []

    def dims(self, eclass: bindings.Value) -> tuple[int | None, ...]:
        dims = (int(cell.literals[0]) for cell in cons_cells(eclass, self.first, "DimsCons"))
        return tuple(d if d >= 0 else None for d in dims)

    def tensor(self, eclass: bindings.Value | None) -> TensorInfo | None:
        if eclass is None:
            return TensorInfo(shape=None, elem_type=None)
        if eclass not in self.infos:
            enodes = self.snapshot.classes.get(eclass, [])
            if any(e.op == "TensorAbsent" for e in enodes):
                self.infos[eclass] = None
            else:
                shape_class = self.snapshot.shape_class.get(eclass)
                shape = None if shape_class is None else self.dims(shape_class)
                elem_type = self.snapshot.elem_type.get(eclass)
                if shape is None:
                    self.infos[eclass] = TensorInfo(shape=None, elem_type=elem_type)  # breaks any cycle
                    shape, elem_type = self.derived_shape(enodes) or (None, elem_type)
                self.infos[eclass] = TensorInfo(
                    shape=shape, elem_type=elem_type, constant=eclass in self.snapshot.static
                )
        return self.infos[eclass]

    def derived_shape(self, enodes: list[ENode]) -> tuple[tuple[int | None, ...], int | None] | None:
        """A folded weight without a shape fact takes the shape of its first argument that has one: the
        weight kernels (``weights.py``) scale or shift a weight in place; the ones that reshape (merges)
        assert their result's shape in the rule."""
        for enode in enodes:
            if enode.op != "TensorDerived":
                continue
            for argument in self.arguments(enode.children[0]):
                info = self.tensor(argument)
                if info is not None and info.shape is not None:
                    return info.shape, info.elem_type
        return None

    def arguments(self, eclass: bindings.Value) -> list[bindings.Value]:
        return [cell.children[0] for cell in cons_cells(eclass, self.first, "ArgsCons")]

    def signature(self, node_class: bindings.Value, enode: ENode) -> NodeSignature:
        op_type, held_or_domain, _, n_outputs = enode.literals
        domain = real_domain(str(held_or_domain))
        attrs_class, inputs_class, _ = enode.children
        outputs = [self.tensor(self.snapshot.out_class.get((node_class, i))) for i in range(int(n_outputs))]
        return NodeSignature(
            op_type=str(op_type),
            domain=str(domain),
            attributes=tuple(self.attributes(attrs_class)),
            inputs=tuple(self.tensor(c) for c in self.arguments(inputs_class)),
            outputs=tuple(o if o is not None else TensorInfo(shape=None, elem_type=None) for o in outputs),
            opset=domain_opset(self.encoded.model, str(domain)) or 1,
        )
