"""Chosen e-nodes -> ONNX model.

Walks the extracted choice from the graph outputs without recursion and emits each e-class once,
so residual and densely connected graphs decode in time linear in their size. Tensors keep their
original names (a class knows every original tensor it stands for), nodes keep their names and
order where they are unchanged, and folded weights are materialized with numpy (``weights.py``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from egglog import bindings

import onnxsat.eqsat.rules  # noqa: F401  (registers the kernels that rule modules define next to their rules)
from onnxsat.eqsat.activations import activation_attributes
from onnxsat.eqsat.attributes import ATTRIBUTE_KERNELS
from onnxsat.eqsat.encode import EncodedModel
from onnxsat.eqsat.folding import evaluate_node
from onnxsat.eqsat.frozen import ENode, FrozenEGraph, cons_cells
from onnxsat.eqsat.qdq import real_domain
from onnxsat.eqsat.weights import FOLDING_KERNELS, KERNELS, constant_node_value, sparse_tensor_value
from onnxsat.errors import InvalidModelError
from onnxsat.external_data import tensor_value
from onnxsat.node_order import topological_order
from onnxsat.proto_fields import copy_fields, subgraph_captures

MICROSOFT_DOMAIN = "com.microsoft"


class DecodeError(RuntimeError):
    """The extracted choice cannot be turned into a graph (a bug in a rule, never the user's fault)."""


@dataclass
class DecodedModel:
    model: onnx.ModelProto
    fusions: Counter[str] = field(default_factory=Counter)


@dataclass
class _Emitted:
    node: onnx.NodeProto
    position: tuple[int, int]


UNCACHED_WEIGHT_BYTES = 2**20
"""Values at least this large are not kept once used: a weight read from its file (read again if another
rule needs it), a new weight once it is an initializer. Kept, ViT-base's Q, K and V weights and their
merged forms held 250 MB more at the peak of decoding than the result itself."""


class _Decoder:
    def __init__(self, encoded: EncodedModel, snapshot: FrozenEGraph, choice: dict[bindings.Value, ENode]) -> None:
        self.encoded = encoded
        self.snapshot = snapshot
        self.choice = choice
        graph = encoded.model.graph
        self.initializers = {t.name: t for t in graph.initializer}
        self.sparse_initializers = {t.values.name: t for t in graph.sparse_initializer}
        self.graph_outputs = [o.name for o in graph.output]
        self.reserved = {v.name for v in graph.input} | set(self.initializers)
        self.reserved |= set(self.sparse_initializers)
        self.used_tensor_names: set[str] = set(self.reserved)
        self.original_names = frozenset(encoded.tensor_names)
        self.used_node_names: set[str] = set()
        self.tensor_name: dict[bindings.Value, str] = {}
        self.node_outputs: dict[bindings.Value, list[str]] = {}
        self.values: dict[bindings.Value, np.ndarray | None] = {}
        self.emitted: list[_Emitted] = []
        self.used_initializers: set[str] = set()
        self.new_initializers: list[onnx.TensorProto] = []
        self.fusions: Counter[str] = Counter()
        self.constants_made: Counter[str] = Counter()
        self.folded_outputs: dict[bindings.Value, list[np.ndarray]] = {}
        self.domains: set[str] = set()

    # ---- naming -------------------------------------------------------------------------------
    def fresh_tensor_name(self, base: str) -> str:
        """A name no emitted tensor has and no original tensor may still claim."""
        return _claim_unique(base, self.used_tensor_names, self.original_names)

    def fresh_node_name(self, base: str) -> str:
        return _claim_unique(base, self.used_node_names) if base else ""

    def original_name(self, eclass: bindings.Value, fallback: str) -> str:
        """The name a node output in ``eclass`` should carry: a graph output's, else the first original."""
        names = [self.encoded.tensor_names[i] for i in sorted(self.snapshot.class_tensor_ids.get(eclass, []))]
        preferred = [n for n in self.graph_outputs if n in names] + names
        for name in preferred:
            if name not in self.reserved and name not in self.used_tensor_names:
                self.used_tensor_names.add(name)
                return name
        return self.fresh_tensor_name(fallback)

    def display_name(self, eclass: bindings.Value) -> str | None:
        """A readable name for a class, to name tensors derived from it."""
        enode = self.chosen(eclass)
        if enode.op in ("TensorInput", "TensorInitializer"):
            return str(enode.literals[0])
        ids = self.snapshot.class_tensor_ids.get(eclass)
        return self.encoded.tensor_names[min(ids)] if ids else None

    # ---- traversal ----------------------------------------------------------------------------
    def chosen(self, eclass: bindings.Value) -> ENode:
        if eclass not in self.choice:
            names = [self.encoded.tensor_names[i] for i in self.snapshot.class_tensor_ids.get(eclass, [])]
            raise InvalidModelError(f"tensor {names[0] if names else '?'!r} is used but never defined")
        return self.choice[eclass]

    @staticmethod
    def emission_children(enode: ENode) -> tuple[bindings.Value, ...]:
        """Classes that must be emitted before this e-node (weights folded at decode time are not)."""
        if enode.op == "Node":
            return enode.children[1:3]  # inputs, captures; attributes are resolved, not emitted
        if enode.op in ("Out", "ArgsCons"):
            return enode.children
        return ()

    def postorder(self, roots: list[bindings.Value]) -> list[bindings.Value]:
        order: list[bindings.Value] = []
        state: dict[bindings.Value, int] = {}  # 1 = on the stack, 2 = done
        for root in roots:
            if root in state:
                continue
            stack = [(root, iter(self.emission_children(self.chosen(root))))]
            state[root] = 1
            while stack:
                eclass, children = stack[-1]
                child = next(children, None)
                if child is None:
                    stack.pop()
                    state[eclass] = 2
                    order.append(eclass)
                elif child not in state:
                    state[child] = 1
                    stack.append((child, iter(self.emission_children(self.chosen(child)))))
                elif state[child] == 1:
                    raise DecodeError("the extracted graph has a cycle")
        return order

    # ---- values and attributes ----------------------------------------------------------------
    def value(self, eclass: bindings.Value) -> np.ndarray | None:
        """The numpy value of a static tensor class (initializer, Constant, absent or derived)."""
        if eclass in self.values:
            return self.values[eclass]
        enode = self.chosen(eclass)
        if enode.op == "TensorAbsent":
            result = None
        elif enode.op == "TensorInitializer" and enode.literals[0] in self.initializers:
            result = tensor_value(self.initializers[enode.literals[0]], self.encoded.base_dir)
        elif enode.op == "TensorInitializer":
            result = sparse_tensor_value(self.sparse_initializers[str(enode.literals[0])], self.encoded.base_dir)
        elif enode.op == "TensorDerived":
            base_attrs, _ = self.attributes(enode.children[1])
            args = [self.value(c) for c in self.args_classes(enode.children[0])]
            # A damaged or odd model (negative variance, weights beyond float32) folds to NaN or inf exactly
            # as the original computes it; verification judges the result, numpy need not warn on stderr.
            with np.errstate(all="ignore"):
                result = KERNELS[enode.literals[0]](args, {a.name: a for a in base_attrs})
        elif enode.op == "TensorFolded":
            result = self.folded_value(enode)
        elif enode.op == "TensorShapeOf":
            dims = self.dims(enode.children[0])
            shape_attrs, _ = self.attributes(enode.children[1])
            by_name = {a.name: int(a.i) for a in shape_attrs}
            result = np.array(dims, dtype=np.int64)[by_name.get("start", 0) : by_name.get("end", len(dims))]
        elif enode.op == "TensorInts":
            result = np.array(self.dims(enode.children[0]), dtype=np.int64)
        elif enode.op == "Out" and self.chosen(enode.children[0]).literals[0] == "Constant":
            node_id = self.chosen(enode.children[0]).literals[2]
            result = constant_node_value(self.encoded.nodes[node_id], self.encoded.base_dir)
        else:
            raise DecodeError(f"a rule needs the value of a tensor made by {enode.op}, which is not static")
        if enode.op != "TensorInitializer" or result is None or result.nbytes < UNCACHED_WEIGHT_BYTES:
            self.values[eclass] = result
        return result

    def folded_value(self, enode: ENode) -> np.ndarray:
        """Run the node a ``TensorFolded`` stands for on its static inputs (once per node)."""
        node_class, index = enode.children[0], int(enode.literals[0])
        if node_class not in self.folded_outputs:
            node = self.chosen(node_class)
            op_type, domain, _, n_outputs = node.literals
            attributes, _ = self.attributes(node.children[0])
            inputs = [self.value(c) for c in self.args_classes(node.children[1])]
            opsets = self.encoded.model.opset_import
            with np.errstate(all="ignore"):
                self.folded_outputs[node_class] = evaluate_node(
                    str(op_type), str(domain), attributes, inputs, int(n_outputs), opsets
                )
        return self.folded_outputs[node_class][index]

    def dims(self, eclass: bindings.Value) -> list[int]:
        return [int(cell.literals[0]) for cell in cons_cells(eclass, self.chosen, "DimsCons")]

    def args_classes(self, eclass: bindings.Value) -> list[bindings.Value]:
        return [cell.children[0] for cell in cons_cells(eclass, self.chosen, "ArgsCons")]

    def names_of(self, args_class: bindings.Value) -> list[str]:
        """Decoded tensor names of an argument list, walking its cons cells once."""
        return [self.tensor_name[c] for c in self.args_classes(args_class)]

    def attributes(self, eclass: bindings.Value) -> tuple[list[onnx.AttributeProto], str | None]:
        """The attribute list an Attrs class stands for, and the fused activation if it has one."""
        enode = self.chosen(eclass)
        if enode.op == "AttrsTable":
            return list(self.encoded.attributes[int(enode.literals[0])]), None
        if enode.op == "AttrsNone":
            return [], None
        if enode.op == "AttrsComputed":
            first, _ = self.attributes(enode.children[0])
            second, _ = self.attributes(enode.children[1])
            values = [self.value(c) for c in self.args_classes(enode.children[2])]
            return ATTRIBUTE_KERNELS[str(enode.literals[0])](first, second, values), None
        if enode.op == "AttrsWithActivation":
            base, act_attrs_class, act_args = enode.children
            attrs, _ = self.attributes(base)
            act_op = str(enode.literals[0])
            act_attrs, _ = self.attributes(act_attrs_class)
            extra = activation_attributes(act_op, act_attrs, [self.value(c) for c in self.args_classes(act_args)])
            return attrs + extra, act_op
        raise DecodeError(f"unknown attribute term {enode.op}")

    # ---- emission -----------------------------------------------------------------------------
    def emit_class(self, eclass: bindings.Value) -> None:
        enode = self.chosen(eclass)
        op = enode.op
        if op in ("ArgsNil", "ArgsCons"):
            return  # lists are read by the node that owns them (names_of), in one pass
        if op == "TensorInput":
            self.tensor_name[eclass] = str(enode.literals[0])
        elif op == "TensorInitializer":
            self.tensor_name[eclass] = str(enode.literals[0])
            self.used_initializers.add(str(enode.literals[0]))
        elif op == "TensorAbsent":
            self.tensor_name[eclass] = ""
        elif op == "TensorDerived":
            self.tensor_name[eclass] = self.emit_derived(eclass, enode)
        elif op in ("TensorFolded", "TensorShapeOf", "TensorInts"):
            name = self.original_name(eclass, "onnxsat_constant")
            self.new_initializers.append(onnx.numpy_helper.from_array(np.asarray(self.value(eclass)), name))
            self.forget_large(eclass)
            self.tensor_name[eclass] = name
            self.constants_made[op] += 1
        elif op == "Out":
            self.tensor_name[eclass] = self.node_outputs[enode.children[0]][int(enode.literals[0])]
        elif op == "Node":
            self.emit_node(eclass, enode)
        else:
            raise DecodeError(f"cannot decode e-node {op}")

    def emit_derived(self, eclass: bindings.Value, enode: ENode) -> str:
        names = [n for c in self.args_classes(enode.children[0]) if (n := self.display_name(c))]
        name = self.fresh_tensor_name(f"{names[0] if names else 'onnxsat'}_{enode.literals[0]}")
        self.new_initializers.append(onnx.numpy_helper.from_array(np.asarray(self.value(eclass)), name))
        self.forget_large(eclass)
        return name

    def forget_large(self, eclass: bindings.Value) -> None:
        """Drop a large emitted value from the cache: the new initializer holds it now (a rule that needs it
        again computes it again)."""
        value = self.values.get(eclass)
        if value is not None and value.nbytes >= UNCACHED_WEIGHT_BYTES:
            del self.values[eclass]

    def emit_node(self, eclass: bindings.Value, enode: ENode) -> None:
        op_type, domain, node_id, n_outputs = enode.literals
        attrs_class, inputs_class, captures_class = enode.children
        original = self.encoded.nodes[str(node_id)]
        domain = real_domain(str(domain), original.domain)
        attributes, activation = self.attributes(attrs_class)
        unchanged = (op_type, domain) == (original.op_type, original.domain)
        node = onnx.NodeProto()
        if unchanged:  # keep every field the node had (overload, device configurations, doc, metadata)
            node.CopyFrom(original)
            for repeated in ("input", "output", "attribute"):
                node.ClearField(repeated)
        node.op_type, node.domain = str(op_type), str(domain)
        node.name = self.fresh_node_name(original.name)
        node.input.extend(self.names_of(inputs_class))
        outputs = []
        for index in range(int(n_outputs)):
            out_class = self.snapshot.out_class.get((eclass, index))
            outputs.append(
                "" if out_class is None else self.original_name(out_class, f"{node.name or op_type}_output_{index}")
            )
        node.output.extend(outputs)
        node.attribute.extend(attributes)
        self.node_outputs[eclass] = outputs
        position = self.encoded.node_position[str(node_id)]
        self.alias_captures(original, self.names_of(captures_class), position)
        self.emitted.append(_Emitted(node, (position, len(self.emitted))))
        self.domains.add(node.domain)
        label = self.fusion_label(original, node, inputs_class, activation)
        if label:
            self.fusions[label] += 1

    def alias_captures(self, original: onnx.NodeProto, actual: list[str], position: int) -> None:
        """Subgraphs read outer tensors by name: keep each captured name alive under its original name."""
        for required, name in zip(subgraph_captures(original), actual, strict=True):
            if required != name and (required in self.initializers or required in self.sparse_initializers):
                self.used_initializers.add(required)  # a weight deduplicated into an equal one: keep it too
            elif required != name and required not in self.used_tensor_names:
                self.used_tensor_names.add(required)
                alias = onnx.helper.make_node("Identity", [name], [required])
                self.emitted.append(_Emitted(alias, (position, -1)))

    def fusion_label(
        self, original: onnx.NodeProto, node: onnx.NodeProto, inputs_class: bindings.Value, activation: str | None
    ) -> str | None:
        folded = any(
            self.chosen(c).op == "TensorDerived" and self.chosen(c).literals[0] in FOLDING_KERNELS
            for c in self.args_classes(inputs_class)
        )
        if not folded and activation is None and node.op_type == original.op_type:
            return None
        parts = [original.op_type] + (["BatchNormalization"] if folded else []) + ([activation] if activation else [])
        target = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        return f"{'+'.join(parts)} -> {target}"

    # ---- assembly -----------------------------------------------------------------------------
    def ordered_nodes(self) -> list[onnx.NodeProto]:
        """Topological order that follows the original node order wherever it can (a body's captures
        at any depth count as reads: their producers, an alias too, come first)."""
        nodes = [item.node for item in self.emitted]
        return [nodes[i] for i in topological_order(nodes, [item.position for item in self.emitted])]

    def decode(self) -> DecodedModel:
        source = self.encoded.model
        roots = []
        for name in self.graph_outputs:
            tensor_id = self.encoded.tensor_ids[name]
            if tensor_id not in self.snapshot.tensor_class:
                raise InvalidModelError(f"graph output {name!r} is never produced")
            roots.append(self.snapshot.tensor_class[tensor_id])
        for eclass in self.postorder(roots):
            self.emit_class(eclass)
        for name, root in zip(self.graph_outputs, roots, strict=True):
            if self.tensor_name[root] != name:
                alias = onnx.helper.make_node("Identity", [self.tensor_name[root]], [name])
                self.emitted.append(_Emitted(alias, (len(source.graph.node), len(self.emitted))))
        nodes = self.ordered_nodes()
        model = onnx.ModelProto()
        copy_fields(source, model, skip={"graph"})
        graph = model.graph
        rebuilt = {"node", "initializer", "sparse_initializer", "value_info", "quantization_annotation"}
        copy_fields(source.graph, graph, skip=rebuilt)
        graph.node.extend(nodes)
        interface = {v.name for v in source.graph.input}
        if model.ir_version < 4:  # every initializer is listed as an input there: unread ones are dead, not interface
            read = {name for node in nodes for name in (*node.input, *subgraph_captures(node))}
            twins = set(self.encoded.facts.equal_initializers)  # read as their equal first: not dead, kept as listed
            dead = {t.name for t in source.graph.initializer} - self.used_initializers - read - twins
            kept_inputs = [v for v in graph.input if v.name not in dead]
            del graph.input[:]
            graph.input.extend(kept_inputs)
            interface -= dead
        keep = self.used_initializers | interface
        graph.initializer.extend(t for t in source.graph.initializer if t.name in keep)
        graph.initializer.extend(self.new_initializers)
        if model.ir_version < 4:  # before IR 4 every initializer must also be listed as a graph input
            graph.input.extend(
                onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.new_initializers
            )
        graph.sparse_initializer.extend(t for t in source.graph.sparse_initializer if t.values.name in keep)
        produced = {o for n in nodes for o in n.output}
        graph.value_info.extend(v for v in source.graph.value_info if v.name in produced)
        graph.quantization_annotation.extend(
            a for a in source.graph.quantization_annotation if a.tensor_name in produced | keep
        )
        if MICROSOFT_DOMAIN in self.domains and all(o.domain != MICROSOFT_DOMAIN for o in model.opset_import):
            model.opset_import.append(onnx.helper.make_opsetid(MICROSOFT_DOMAIN, 1))
        return DecodedModel(model=model, fusions=self.fusions)


def _claim_unique(base: str, used: set[str], avoid: frozenset[str] = frozenset()) -> str:
    """``base``, or ``base_1``, ``base_2``... whichever is free first; recorded as used."""
    name, counter = base, 0
    while name in used or name in avoid:
        counter += 1
        name = f"{base}_{counter}"
    used.add(name)
    return name


def decode(encoded: EncodedModel, snapshot: FrozenEGraph, choice: dict[bindings.Value, ENode]) -> DecodedModel:
    """Rebuild an ONNX model from the extracted ``choice`` of ``encoded``'s e-graph."""
    return _Decoder(encoded, snapshot, choice).decode()
