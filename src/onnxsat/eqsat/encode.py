"""ONNX model -> e-graph, one shallow command per tensor.

Each tensor a node produces, and each graph input, gets a handle ``Tensor.ref(k)``; a node is added
as ``union(ref(out_k), Out(Node(..., inputs = [ref(in_1), ...]), i))``, with constant initializers
written inline as ``Tensor.initializer(name)`` (the analysis rules mark them static). No command
nests deeper than one node, so graphs of any depth encode without recursion (the reference design
built one nested Python expression and hit the recursion limit a few hundred layers deep).

Commands go straight to egglog's command layer (``egglog.bindings``): building the same terms through
egglog-python's typed front end costs ~1 ms per node, which alone would break the 10 s budget for a
6,000-node graph. The front end still declares the language (``declare_language``) and runs the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx
from egglog import EGraph, bindings, union

from onnxsat.eqsat.attributes import inverse_permutations
from onnxsat.eqsat.facts import GraphFacts, attribute_flags, collect_facts, int_attributes
from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Node,
    Tensor,
    args_of,
    attr_flag,
    attr_int,
    foldable,
    foldable_batchnorm,
    gelu_site,
    hard_site,
    has_shape,
    has_type,
    inverse_perms,
    is_float32,
    layer_norm_site,
    node_id_at,
    op_kind,
    opset_at_least,
    out,
    pad_into_pool,
    parallel_pair,
    permuted_constant,
    returns_input,
    same_shape,
    sole_use,
    static_dims,
    static_value,
    value_flag,
)
from onnxsat.eqsat.qdq import HELD_DOMAIN, held_nodes
from onnxsat.eqsat.rules.attention import site_facts
from onnxsat.eqsat.rules.layout_sinking import OP_KINDS, permuted_constants
from onnxsat.proto_fields import subgraph_captures

_SPAN = bindings.PanicSpan()
_NIL = bindings.Call(_SPAN, "ArgsNil", [])
_ABSENT = bindings.Call(_SPAN, "TensorAbsent", [])


def _string(value: str) -> bindings.Lit:
    return bindings.Lit(_SPAN, bindings.String(value))


def _int(value: int) -> bindings.Lit:
    return bindings.Lit(_SPAN, bindings.Int(value))


def _call(name: str, *args: bindings.Lit | bindings.Call) -> bindings.Call:
    return bindings.Call(_SPAN, name, list(args))


def _fact(expr: bindings.Call) -> bindings.ActionCommand:
    return bindings.ActionCommand(bindings.Expr_(_SPAN, expr))


def _dims(dims: tuple[int, ...]) -> bindings.Call:
    result = _call("DimsNil")
    for dim in reversed(dims):
        result = _call("DimsCons", _int(dim), result)
    return result


def _union(lhs: bindings.Call, rhs: bindings.Call) -> bindings.ActionCommand:
    return bindings.ActionCommand(bindings.Union(_SPAN, lhs, rhs))


def domain_opset(model: onnx.ModelProto, domain: str) -> int:
    """The opset version ``model`` imports for ``domain`` (0 if it imports none)."""
    for entry in model.opset_import:
        if entry.domain == domain or (domain == "" and entry.domain == "ai.onnx"):
            return int(entry.version)
    return 0


@dataclass
class EncodedModel:
    """An e-graph holding one model, and the tables that let the decoder rebuild ONNX from it."""

    model: onnx.ModelProto
    egraph: EGraph
    facts: GraphFacts
    tensor_names: list[str] = field(default_factory=list)
    tensor_ids: dict[str, int] = field(default_factory=dict)
    attributes: list[list[onnx.AttributeProto]] = field(default_factory=list)
    nodes: dict[str, onnx.NodeProto] = field(default_factory=dict)
    node_position: dict[str, int] = field(default_factory=dict)
    n_commands: int = 0
    base_dir: Path | None = None
    """The folder external-data locations are relative to (None: the model holds all its data)."""

    def tensor_id(self, name: str) -> int:
        if name not in self.tensor_ids:
            self.tensor_ids[name] = len(self.tensor_names)
            self.tensor_names.append(name)
        return self.tensor_ids[name]


def declare_language(egraph: EGraph) -> None:
    """Have egglog-python declare every constructor and relation the bulk commands use.

    egglog-python declares a function to the Rust e-graph the first time a typed expression uses it,
    so one inert term that mentions them all is registered first. It lives under ``Tensor.ref(-1)``,
    which no graph output reaches, so extraction never sees it; the relations are declared on ``Tensor.ref(-2)``.
    """
    absent = Tensor.absent()
    no_dims = Dims.cons(-1, Dims.nil())
    inert_node = Node(
        "", "", Attrs.none(), args_of(Tensor.input(""), Tensor.initializer(""), absent), Args.nil(), "", 0
    )
    inert_attrs = Attrs.computed("", Attrs.table(-1), Attrs.none(), Args.nil())
    inert_inputs = args_of(Tensor.folded(inert_node, 0), Tensor.shape_of(no_dims, inert_attrs), Tensor.ints(no_dims))
    inert = out(Node("", "", Attrs.table(-1), inert_inputs, Args.nil(), "", 0), 0)
    handle = Tensor.ref(-1)
    egraph.register(union(handle).with_(inert))
    handle = Tensor.ref(-2)  # the facts sit on an empty handle, so no rule can match the inert term
    egraph.register(
        static_value(absent),
        sole_use(handle),
        is_float32(handle),
        attr_flag(Attrs.table(-1), ""),
        attr_int(Attrs.table(-1), "", -1),
        has_shape(handle, no_dims),
        has_type(handle, -1),
        static_dims(Dims.nil()),
        value_flag(handle, ""),
        foldable(handle),
        same_shape(handle, handle, -1),
        foldable_batchnorm(handle, handle, Attrs.table(-1), Args.nil()),
        inverse_perms(Attrs.table(-1), Attrs.table(-1)),
        permuted_constant(handle, handle, Attrs.table(-1), no_dims, -1),
        opset_at_least(-1),
        parallel_pair(handle, handle),
        pad_into_pool(handle),
        returns_input(handle, handle),
        layer_norm_site(handle, Args.nil(), Attrs.none(), ""),
        gelu_site(handle, handle, 0, ""),
        hard_site(handle, handle, 0, ""),
        op_kind("", ""),
        union(Tensor.ref(-3)).with_(Tensor.pure_key("", Attrs.none(), Args.nil(), 0, 0)),
    )


class _Encoder:
    def __init__(
        self,
        model: onnx.ModelProto,
        typed: onnx.ModelProto | None,
        base_dir: Path | None,
        egraph: EGraph | None,
        widen_weights: bool = False,
    ) -> None:
        if egraph is None:
            egraph = EGraph()
            declare_language(egraph)
        facts = collect_facts(model, typed, base_dir, widen_weights)
        self.result = EncodedModel(model=model, egraph=egraph, facts=facts, base_dir=base_dir)
        self.held = held_nodes(model.graph)
        self.commands: list[bindings.ActionCommand] = []
        self.attr_keys: dict[tuple[str, str, tuple[bytes, ...]], int] = {}
        graph = model.graph
        inputs = {v.name for v in graph.input}
        names = [t.name for t in graph.initializer] + [t.values.name for t in graph.sparse_initializer]
        # Initializers that are not graph inputs cannot be overridden at run time: true constants. Before
        # IR 4 every initializer had to be listed as an input too, and runtimes treat them as constants.
        overridable = inputs if model.ir_version >= 4 else set()
        self.constants = {name for name in names if name not in overridable}
        for name in sorted(self.constants):
            self.tensor_facts(name, self.ref(name))
        for kind, ops in OP_KINDS.items():
            self.commands.extend(_fact(_call("OpKind", _string(op), _string(kind))) for op in ops)
        for version in range(1, domain_opset(model, "") + 1):
            self.commands.append(_fact(_call("OpsetAtLeast", _int(version))))

    def tensor_facts(self, name: str, term: bindings.Call) -> None:
        """Shape, element type, value flags and foldability of the tensor ``name`` (written as ``term``)."""
        facts = self.result.facts
        if name in facts.shapes:
            self.commands.append(_fact(_call("HasShape", term, _dims(facts.shapes[name]))))
        if name in facts.types:
            self.commands.append(_fact(_call("HasType", term, _int(facts.types[name]))))
        for flag in facts.value_flags.get(name, ()):
            self.commands.append(_fact(_call("ValueFlag", term, _string(flag))))
        if name in facts.foldable:
            self.commands.append(_fact(_call("Foldable", term)))

    def ref(self, name: str) -> bindings.Call:
        """The term for a tensor read by a node: constants inline, everything else by handle."""
        if name in self.constants:
            return _call("TensorInitializer", _string(self.result.facts.equal_initializers.get(name, name)))
        return _call("TensorRef", _int(self.result.tensor_id(name)))

    def args(self, names: list[str]) -> bindings.Call:
        result = _NIL
        for name in reversed(names):
            result = _call("ArgsCons", self.ref(name) if name else _ABSENT, result)
        return result

    def attrs(self, node: onnx.NodeProto, opset: int) -> bindings.Call:
        key = (node.domain, node.op_type, tuple(a.SerializeToString() for a in node.attribute))
        if key not in self.attr_keys:
            index = self.attr_keys[key] = len(self.result.attributes)
            self.result.attributes.append(list(node.attribute))
            table = _call("AttrsTable", _int(index))
            for flag in attribute_flags(node.domain, node.op_type, list(node.attribute), opset):
                self.commands.append(_fact(_call("AttrFlag", table, _string(flag))))
            for name, value in int_attributes(node.domain, node.op_type, list(node.attribute), opset).items():
                self.commands.append(_fact(_call("AttrInt", table, _string(name), _int(value))))
        return _call("AttrsTable", _int(self.attr_keys[key]))

    def encode(self) -> EncodedModel:
        graph = self.result.model.graph
        for value in graph.input:
            self.commands.append(_union(self.ref(value.name), _call("TensorInput", _string(value.name))))
            if value.name not in self.constants:
                self.tensor_facts(value.name, self.ref(value.name))
        for position, node in enumerate(graph.node):
            self.add_node(position, node)
        for first, second in self.result.facts.parallel_pairs:
            self.commands.append(_fact(_call("ParallelPair", self.ref(first), self.ref(second))))
        for output in self.result.facts.absorbable_pads:
            self.commands.append(_fact(_call("PadIntoPool", self.ref(output))))
        for output, source in self.result.facts.returns_input:
            self.commands.append(_fact(_call("ReturnsInput", self.ref(output), self.ref(source))))
        for output, operand, rank in self.result.facts.same_shape:
            self.commands.append(_fact(_call("SameShape", self.ref(output), self.ref(operand), _int(rank))))
        for outer, inner in inverse_permutations(self.attr_keys, self.result.attributes):
            self.commands.append(
                _fact(_call("InversePerms", _call("AttrsTable", _int(outer)), _call("AttrsTable", _int(inner))))
            )
        static = self.constants | self.result.facts.foldable
        static |= {
            n.output[0] for n in graph.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output
        }
        for x, c, table, dims, rank in permuted_constants(
            graph,
            self.result.facts.shapes,
            static,
            self.attr_keys,
            self.result.attributes,
            domain_opset(self.result.model, ""),
        ):
            self.commands.append(
                _fact(
                    _call(
                        "PermutedConstant",
                        self.ref(x),
                        self.ref(c),
                        _call("AttrsTable", _int(table)),
                        _dims(dims),
                        _int(rank),
                    )
                )
            )
        self.commands += site_facts(self.result, self.args, self.ref)
        self.composite_facts()
        for output in graph.output:
            if output.name in self.constants:  # an initializer returned as is needs a handle too
                handle = _call("TensorRef", _int(self.result.tensor_id(output.name)))
                self.commands.append(_union(handle, self.ref(output.name)))
            self.result.tensor_id(output.name)
        self.result.egraph._egraph.run_program(*self.commands)  # private handle: see the module docstring
        self.result.n_commands = len(self.commands)
        return self.result

    def composite_facts(self) -> None:
        """``LayerNormSite``, ``GeluSite`` and ``HardSite`` facts for the written-out ops facts found; each fused
        layer norm's attributes (its ``epsilon``) go into the attribute table."""
        for gelu in self.result.facts.gelu_sites:
            fused_id = _string(node_id_at(gelu.position))
            fact = _call("GeluSite", self.ref(gelu.output), self.ref(gelu.x), _int(int(gelu.tanh)), fused_id)
            self.commands.append(_fact(fact))
        for hard in self.result.facts.hard_sites:
            fused_id = _string(node_id_at(hard.position))
            fact = _call("HardSite", self.ref(hard.output), self.ref(hard.x), _int(int(hard.swish)), fused_id)
            self.commands.append(_fact(fact))
        for site in self.result.facts.layer_norm_sites:
            key = len(self.result.attributes)
            self.result.attributes.append([onnx.helper.make_attribute("epsilon", site.epsilon)])
            inputs = self.args([site.x, site.scale, site.bias] if site.bias else [site.x, site.scale])
            fact = _call(
                "LayerNormSite",
                self.ref(site.output),
                inputs,
                _call("AttrsTable", _int(key)),
                _string(node_id_at(site.position)),
            )
            self.commands.append(_fact(fact))

    def add_node(self, position: int, node: onnx.NodeProto) -> None:
        own_id = node_id_at(position)
        self.result.nodes[own_id] = node
        self.result.node_position[own_id] = position
        outputs = list(node.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        term = _call(
            "Node",
            _string(node.op_type),
            _string(HELD_DOMAIN if position in self.held else node.domain),
            self.attrs(node, domain_opset(self.result.model, node.domain)),
            self.args(list(node.input)),
            self.args(subgraph_captures(node)),
            _string(own_id),
            _int(len(outputs)),
        )
        facts = self.result.facts
        for index, name in enumerate(outputs):
            if name:
                handle = self.ref(name)
                self.commands.append(_union(handle, _call("Out", term, _int(index))))
                if facts.sole_use(name):
                    self.commands.append(_fact(_call("SoleUse", handle)))
                if facts.is_float32(name):
                    self.commands.append(_fact(_call("IsFloat32", handle)))
                self.tensor_facts(name, handle)
                if name in facts.computed_ints:  # its value, as a constant term rules can read
                    self.commands.append(_union(handle, _call("TensorInts", _dims(facts.computed_ints[name]))))


def encode(
    model: onnx.ModelProto,
    typed: onnx.ModelProto | None = None,
    base_dir: Path | None = None,
    egraph: EGraph | None = None,
    widen_weights: bool = False,
) -> EncodedModel:
    """Encode ``model`` (not modified) into a fresh e-graph; ``typed`` is it after shape inference.

    ``base_dir`` is where the model's external data lives; the decoder reads folded weights from there.
    ``egraph``: an empty e-graph with the language already declared (``WarmEGraph.scratch``) to use instead.
    ``widen_weights``: weights stored narrow (int8, float16) behind a widening Cast may be folded to its type.
    """
    return _Encoder(model, typed, base_dir, egraph, widen_weights).encode()
