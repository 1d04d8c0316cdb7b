"""Facts about an ONNX graph that rules need and the e-graph cannot see by itself.

Computed once in Python at encode time: how many readers each tensor has, shapes and element types
from shape inference, integer attribute values, semantic flags of attribute sets (for example "this
BatchNormalization runs in inference mode"), properties of small constants ("all zeros"), and which
node outputs are safe to compute at optimization time. Keeping them here keeps rules short and
conditions testable.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnxsat.eqsat.attention_sites import AttentionSite, attention_sites
from onnxsat.eqsat.folding import evaluate_node
from onnxsat.eqsat.gelu_sites import GeluSite, gelu_sites
from onnxsat.eqsat.hard_sites import HardSite, hard_sites
from onnxsat.eqsat.layer_norm_sites import LayerNormSite, layer_norm_sites
from onnxsat.eqsat.qdq import outside_held, quantized_edges
from onnxsat.eqsat.registry import register
from onnxsat.eqsat.weights import constant_node_value
from onnxsat.eqsat.window_pads import absorbable_pads
from onnxsat.external_data import ExternalRef, element_size, is_external, read_bytes, reference, tensor_value
from onnxsat.proto_fields import all_nodes, subgraph_captures
from onnxsat.verification import numpy_exchangeable

FlagPredicate = Callable[[list[onnx.AttributeProto], int], bool]

FLAG_PREDICATES: dict[tuple[str, str], dict[str, FlagPredicate]] = {}
"""(domain, op_type) -> {flag name: predicate(attributes, opset of the domain)}; filled by
:func:`flag_predicate`. The encoder asserts ``AttrFlag(attrs, name)`` for each flag that holds."""
PURE_FLAG = "pure"
"""The one attribute flag not computed by a predicate (see :func:`attribute_flags`)."""
VALUE_FLAGS = frozenset({"zeros", "ones", "single", "spatial_pads", "past_any_end"})
"""Every flag :func:`_value_flags` can assert on a small constant (``ValueFlag(tensor, name)``)."""


def flag_predicate(op_type: str, flag: str, domain: str = "") -> Callable[[FlagPredicate], FlagPredicate]:
    """Register the decorated predicate as attribute flag ``flag`` of ``domain::op_type``, where it is defined."""

    def decorate(predicate: FlagPredicate) -> FlagPredicate:
        return register(FLAG_PREDICATES.setdefault((domain, op_type), {}), flag, predicate, f"{op_type} flag")

    return decorate


def attribute_flag_names() -> frozenset[str]:
    """Every attribute flag a rule may test: the registered ones and ``pure``."""
    return frozenset({PURE_FLAG}.union(*FLAG_PREDICATES.values()))


def _int_attr(attrs: list[onnx.AttributeProto], name: str, default: int) -> int:
    for attr in attrs:
        if attr.name == name:
            return int(attr.i)
    return default


@flag_predicate("BatchNormalization", "inference")
def _bn_inference(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """BatchNormalization normalizes with its stored statistics (not batch statistics)."""
    if opset < 7:
        return _int_attr(attrs, "is_test", 0) == 1 and _int_attr(attrs, "spatial", 1) == 1
    if opset < 9:
        return _int_attr(attrs, "spatial", 1) == 1
    return _int_attr(attrs, "training_mode", 0) == 0


def _ints_attr(attrs: list[onnx.AttributeProto], name: str) -> list[int] | None:
    for attr in attrs:
        if attr.name == name:
            return [int(v) for v in attr.ints]
    return None


@flag_predicate("Conv", "no_padding")
def _no_padding(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """The convolution pads nothing: a following op may be moved in front of it (BN into the next Conv)."""
    for attr in attrs:
        if attr.name == "auto_pad" and attr.s not in (b"NOTSET", b"VALID"):
            return False
    return all(p == 0 for p in _ints_attr(attrs, "pads") or [])


@flag_predicate("Conv", "unit_strides")
def _unit_strides_dilations(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    return all(v == 1 for v in (_ints_attr(attrs, "strides") or []) + (_ints_attr(attrs, "dilations") or []))


@flag_predicate("Conv", "explicit_padding")
def _explicit_padding(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """Padding given by ``pads`` (or none at all), not computed by ``auto_pad``: extra pads can be added."""
    return all(attr.s in (b"NOTSET",) for attr in attrs if attr.name == "auto_pad")


@flag_predicate("Transpose", "identity_perm")
def _identity_perm(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    perm = _ints_attr(attrs, "perm")
    return perm is not None and perm == list(range(len(perm)))


@flag_predicate("Transpose", "explicit_perm")
def _explicit_perm(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    return _ints_attr(attrs, "perm") is not None


@flag_predicate("Transpose", "swap_2d")
def _swap_2d(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """perm = [1, 0]; without ``perm`` a Transpose reverses the axes, which is the same for rank 2."""
    perm = _ints_attr(attrs, "perm")
    return perm is None or perm == [1, 0]


@flag_predicate("Pad", "constant_mode")
def _constant_pad(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    return all(attr.s == b"constant" for attr in attrs if attr.name == "mode") and opset >= 11


@flag_predicate("Pad", "zero_attribute_pads")
def _zero_attribute_pads(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """Before opset 11 a Pad holds its pads and fill value as attributes: constant mode, zero fill, and
    non-negative pads on the spatial axes only, as a Conv or pool can take into its own padding."""
    if opset >= 11 or not all(attr.s == b"constant" for attr in attrs if attr.name == "mode"):
        return False
    if any(attr.f != 0.0 for attr in attrs if attr.name == "value"):
        return False
    pads = _ints_attr(attrs, "pads") or []
    rank = len(pads) // 2
    if rank < 3 or len(pads) != 2 * rank or any(p < 0 for p in pads):
        return False
    return pads[0] == pads[1] == pads[rank] == pads[rank + 1] == 0


@flag_predicate("Gemm", "plain")
def _plain_gemm(attrs: list[onnx.AttributeProto], opset: int) -> bool:
    """alpha = beta = 1: the bias and the product are added as they are."""
    return all(attr.f == 1.0 for attr in attrs if attr.name in ("alpha", "beta"))


# Integer attributes asserted even when omitted, with their defaults, so rules can match on them.
INT_ATTRIBUTE_DEFAULTS: dict[tuple[str, str], dict[str, int]] = {
    ("", "Gemm"): {"transA": 0, "transB": 0},
    ("", "Conv"): {"group": 1},
    ("", "Concat"): {},
    ("", "Cast"): {},
    ("", "LogSoftmax"): {},
    ("", "Flatten"): {"axis": 1},
    ("", "Split"): {"axis": 0},
}


def int_attributes(domain: str, op_type: str, attrs: list[onnx.AttributeProto], opset: int) -> dict[str, int]:
    """Every integer attribute of the set, plus the defaults rules rely on for omitted ones."""
    values = dict(INT_ATTRIBUTE_DEFAULTS.get((domain, op_type), {}))
    if (domain, op_type) in (("", "Softmax"), ("", "LogSoftmax")):
        values["axis"] = -1 if opset >= 13 else 1
    for attr in attrs:
        if attr.type == onnx.AttributeProto.INT:
            values[attr.name] = int(attr.i)
    return values


def _has_subgraph(attrs: Iterable[onnx.AttributeProto]) -> bool:
    """An If/Loop/Scan-style attribute holding a graph: such nodes stay opaque to folding and merging."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in attrs)


def attribute_flags(domain: str, op_type: str, attrs: list[onnx.AttributeProto], opset: int) -> list[str]:
    """Names of the flags that hold for these attributes of ``domain::op_type``.

    ``pure``: a standard op without subgraphs that always computes the same output from the same inputs,
    so two such nodes with the same inputs may share one result (common subexpressions).
    """
    predicates = FLAG_PREDICATES.get((domain, op_type), {})
    flags = [name for name, holds in predicates.items() if holds(attrs, opset)]
    if domain in ("", "ai.onnx") and op_type not in NONDETERMINISTIC_OPS and not _has_subgraph(attrs):
        flags.append(PURE_FLAG)
    return sorted(flags)


FOLD_MAX_ELEMENTS = 1 << 24
"""The largest tensor constant folding may create (64 MiB of float32)."""
FOLD_MAX_GROWTH = 1 << 12
"""How many more elements a folded output may hold than its node's inputs together (16 KiB of float32), so
that folding an Expand, a Tile, a ConstantOfShape or a Concat of broadcast constants cannot grow the file
(the value then stays computed, and ONNX Runtime computes it once when it loads the model): RAFT's
correlation grids, four ``[256, 7, 7, 2]`` Expands of a ``[1, 7, 7, 2]`` delta, grew its file 9%."""
WEIGHT_FOLD_MAX_GROWTH = 1 << 20
"""The same for a value that becomes a weight (a Conv's kernel built by ConstantOfShape, as ONNX's bundled
model-zoo stand-ins store theirs: folded, it is what fusions and quantization need as a constant), or that
only other folds read (it is not stored)."""
WEIGHT_SLOTS = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (1, 2),
    "MatMul": (1,),
    "BatchNormalization": (1, 2, 3, 4),
    "InstanceNormalization": (1, 2),
    "LayerNormalization": (1, 2),
    "GroupNormalization": (1, 2),
    "PRelu": (1,),
    "Gather": (0,),
}
"""Inputs that hold a layer's weights."""
FOLD_MAX_COPY = 1 << 12
"""The most elements a fold may produce from a weight that a node computed at run time reads too: the weight
stays, so the fold stores a second copy of it (a tied embedding's ``Transpose`` for the output head doubled a
language model's file); ONNX Runtime folds such a node when it loads the model anyway. A weight whose readers
all fold goes away with them (weight normalization's ``g * v / ||v||``: ``v`` read by ``ReduceL2`` and
``Div``), so folding it copies nothing."""
FLAG_MAX_ELEMENTS = 4096
"""Constants up to this size get value flags (``zeros``, ``ones``...): small enough to look at."""

NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"}
)
"""Ops whose output may differ from run to run: never computed ahead of time, never merged. Dropout is
random in training mode; in inference it is removed as a no-op by its own rule instead."""


@dataclass
class GraphFacts:
    """What the encoder asserts about the main graph's tensors."""

    uses: Counter[str] = field(default_factory=Counter)
    graph_outputs: set[str] = field(default_factory=set)
    weights: set[str] = field(default_factory=set)
    """Tensors that are, or are computed into, a layer's weights (``WEIGHT_SLOTS``)."""
    kept: set[str] = field(default_factory=set)
    """Tensors something computed at run time reads (or the interface returns): a fold that copies one keeps
    both (``FOLD_MAX_COPY``)."""
    fold_sources: dict[str, int] = field(default_factory=dict)
    """Static tensor -> elements of the stored constants it is computed from (``FOLD_MAX_GROWTH``)."""
    widen_weights: bool = False
    """Whether a Cast may widen a stored weight ahead of time (``_widens_a_weight``)."""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Tensor name -> dims (-1 where shape inference left a dim open); only tensors of known rank."""
    types: dict[str, int] = field(default_factory=dict)
    value_flags: dict[str, list[str]] = field(default_factory=dict)
    foldable: set[str] = field(default_factory=set)
    parallel_pairs: list[tuple[str, str]] = field(default_factory=list)
    same_shape: list[tuple[str, str, int]] = field(default_factory=list)
    """(output, operand, rank) of binary elementwise nodes whose output keeps an operand's known shape."""
    absorbable_pads: list[str] = field(default_factory=list)
    """Outputs of Pads that the pool reading them can take into its own padding (``window_pads``)."""
    returns_input: list[tuple[str, str]] = field(default_factory=list)
    """(output, data input) of Reshapes and Expands shown to return their data input unchanged although shape
    inference leaves a dim open (``shape_keepers``): ``Reshape(x, [-1, C, 1, 1])`` of an ``[N, C, 1, 1]`` x."""
    attention_sites: list[AttentionSite] = field(default_factory=list)
    """Scaled dot-product attentions a fused op can stand for (``attention_sites``)."""
    computed_ints: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Node output -> its value, for the small 1-D int64 values computed from constants and known sizes
    (``_small_values``): the encoder writes each as a constant too, so rules that test a value see it."""
    layer_norm_sites: list[LayerNormSite] = field(default_factory=list)
    """Layer normalizations written out elementwise that LayerNormalization computes (``layer_norm_sites``)."""
    gelu_sites: list[GeluSite] = field(default_factory=list)
    """GELUs written out elementwise that one Gelu computes (``gelu_sites``)."""
    hard_sites: list[HardSite] = field(default_factory=list)
    """Hard sigmoids and swishes written out elementwise that HardSigmoid computes (``hard_sites``)."""
    equal_initializers: dict[str, str] = field(default_factory=dict)
    """Constant initializer name -> the first (by name) constant initializer with the same type, dims
    and bytes: duplicates the encoder writes as one term, so nodes that read them merge by hash-consing."""

    def is_float32(self, name: str) -> bool:
        return self.types.get(name) == onnx.TensorProto.FLOAT

    def sole_use(self, name: str) -> bool:
        return self.uses[name] == 1 and name not in self.graph_outputs

    def numel(self, name: str) -> int | None:
        dims = self.shapes.get(name)
        return None if dims is None or any(d < 0 for d in dims) else int(np.prod(dims, dtype=np.int64))


def collect_facts(
    model: onnx.ModelProto, typed: onnx.ModelProto | None, base_dir: Path | None = None, widen_weights: bool = False
) -> GraphFacts:
    """Facts for ``model``'s main graph; ``typed`` is the same model after shape inference, if it ran.
    ``widen_weights``: see ``GraphFacts.widen_weights``."""
    graph = model.graph
    facts = GraphFacts(graph_outputs={o.name for o in graph.output}, widen_weights=widen_weights)
    for node in graph.node:
        for name in [*node.input, *subgraph_captures(node)]:
            if name:
                facts.uses[name] += 1
    for info in _typed_values(typed or model):
        if not info.type.HasField("tensor_type"):
            continue
        tensor_type = info.type.tensor_type
        if tensor_type.elem_type:
            facts.types[info.name] = int(tensor_type.elem_type)
        if tensor_type.HasField("shape"):
            facts.shapes[info.name] = tuple(
                int(d.dim_value) if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim
            )
    overridable = {v.name for v in graph.input} if model.ir_version >= 4 else set()  # as encode.py decides
    for tensor in graph.initializer:
        if tensor.name not in overridable:
            facts.shapes[tensor.name] = tuple(int(d) for d in tensor.dims)
            facts.types[tensor.name] = int(tensor.data_type)
            if int(np.prod(tensor.dims, dtype=np.int64)) <= FLAG_MAX_ELEMENTS:
                facts.value_flags[tensor.name] = _value_flags(lambda t=tensor: tensor_value(t, base_dir))
    small_values = _small_values(model, facts, base_dir)
    facts.weights = _weight_bound(graph)
    facts.kept, facts.fold_sources = _kept_at_run_time(graph, facts, {t.name for t in graph.initializer} - overridable)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            facts.value_flags[node.output[0]] = _value_flags(lambda n=node: constant_node_value(n, base_dir))
        if _foldable(node, facts):
            facts.foldable.update(o for o in node.output if o)
        if node.op_type != "Constant":
            for name in node.output:
                value = small_values.get(name)
                if value is not None and value.ndim == 1 and value.dtype == np.int64:
                    facts.computed_ints[name] = tuple(int(v) for v in value)
                    facts.value_flags[name] = _value_flags(lambda v=value: v)
    facts.parallel_pairs = parallel_pairs(model, facts)
    facts.same_shape = same_shape_operands(graph, facts)
    facts.returns_input = shape_keepers(graph, facts.shapes, small_values)
    constants = [t for t in graph.initializer if t.name not in overridable and t.name not in facts.graph_outputs]
    read_small = _small_constant_reader(graph, constants, base_dir, small_values)
    facts.absorbable_pads = list(absorbable_pads(graph, read_small, facts.sole_use, _opset(model)))
    edges = quantized_edges(graph)
    facts.attention_sites = outside_held(attention_sites(graph, facts, read_small, {t.name for t in constants}), edges)
    facts.layer_norm_sites = outside_held(layer_norm_sites(graph, facts, read_small, _opset(model)), edges)
    facts.gelu_sites = outside_held(gelu_sites(graph, facts, read_small), edges)
    facts.hard_sites = outside_held(hard_sites(graph, facts, read_small), edges)
    facts.equal_initializers = equal_initializers(constants, base_dir)
    return facts


def _opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)


def _small_constant_reader(
    graph: onnx.GraphProto,
    constants: list[onnx.TensorProto],
    base_dir: Path | None,
    computed: dict[str, np.ndarray] | None = None,
) -> Callable[[str], np.ndarray | None]:
    """Reads a constant of at most ``FLAG_MAX_ELEMENTS`` elements (initializer or Constant node) by name, or a
    small value ``computed`` from constants (``_small_values``)."""
    tensors = {t.name: t for t in constants if int(np.prod(t.dims, dtype=np.int64)) <= FLAG_MAX_ELEMENTS}
    nodes = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")}

    def read(name: str) -> np.ndarray | None:
        if name in tensors:
            return tensor_value(tensors[name], base_dir)
        if name in nodes:
            value = constant_node_value(nodes[name], base_dir)
            return value if value.size <= FLAG_MAX_ELEMENTS else None
        return (computed or {}).get(name)

    return read


ELEMENTWISE_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})


def same_shape_operands(graph: onnx.GraphProto, facts: GraphFacts) -> list[tuple[str, str, int]]:
    """(output, operand, rank) for each operand of a binary elementwise node whose shape the output keeps: the
    output's known shape is the operand's, or the other operand broadcasts into it without growing it (each of
    its dims, aligned from the right, is 1 or the operand's known size). The second holds with a dynamic batch:
    a Conv's per-channel [1, C, 1, 1] shift keeps [N, C, H, W] whatever N is (Paddle2ONNX writes every Conv bias
    so, and its BatchNorm then stayed unfolded)."""
    pairs: dict[tuple[str, str, int], None] = {}
    for node in graph.node:
        if node.op_type not in ELEMENTWISE_BINARY or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        shape = facts.shapes.get(node.output[0])
        for operand, other in (node.input, tuple(reversed(node.input))):
            mine = facts.shapes.get(operand)
            if mine is None or (shape is not None and len(shape) != len(mine)):
                continue
            if (shape is not None and all(d >= 0 for d in shape) and mine == shape) or _kept(
                mine, facts.shapes.get(other)
            ):
                pairs[(node.output[0], operand, len(mine))] = None
    return list(pairs)


def _kept(shape: tuple[int, ...], other: tuple[int, ...] | None) -> bool:
    """Whether broadcasting ``other`` against ``shape`` leaves ``shape`` as it is."""
    if other is None or len(other) > len(shape):
        return False
    return all(o == 1 or (o > 0 and o == d) for o, d in zip(reversed(other), reversed(shape), strict=False))


EQUAL_CHECK_MAX_BYTES = 1 << 28
"""Initializers larger than this (256 MiB) are not compared for equality: reading them costs more than
the rare duplicate of that size could save."""


def equal_initializers(constants: list[onnx.TensorProto], base_dir: Path | None) -> dict[str, str]:
    """Map each constant initializer whose type, dims and bytes equal an earlier one (by name) to that one.

    Only initializers sharing type and dims, and then only those whose first and last bytes also agree,
    are read whole: a transformer's dozens of equally shaped, different weights cost a few kilobytes
    each instead of a full read and hash (3 s on BERT-base).
    """
    groups: dict[tuple[int, tuple[int, ...]], list[onnx.TensorProto]] = {}
    for tensor in constants:
        groups.setdefault((int(tensor.data_type), tuple(tensor.dims)), []).append(tensor)
    aliases: dict[str, str] = {}
    for (data_type, dims), members in groups.items():
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type))
        too_big = np.prod(dims, dtype=np.int64) * dtype.itemsize > EQUAL_CHECK_MAX_BYTES
        if len(members) < 2 or dtype.kind == "O" or too_big:
            continue
        by_ends: dict[bytes, list[onnx.TensorProto]] = {}
        for tensor in members:
            by_ends.setdefault(_ends(tensor, base_dir), []).append(tensor)
        candidates = [tensor for group in by_ends.values() if len(group) > 1 for tensor in group]
        first_of: dict[bytes, str] = {}
        for tensor in sorted(candidates, key=lambda t: t.name):
            value = tensor_value(tensor, base_dir)
            digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).digest()
            aliases[tensor.name] = first_of.setdefault(digest, tensor.name)
    return {name: first for name, first in aliases.items() if name != first}


_END_BYTES = 4096


def _ends(tensor: onnx.TensorProto, base_dir: Path | None) -> bytes:
    """The first and last few kilobytes of a tensor's bytes: equal tensors have equal ends."""
    if is_external(tensor) and base_dir is not None:
        ref = reference(tensor, base_dir)
        size = min(_END_BYTES, ref.length)
        head = read_bytes(ExternalRef(ref.path, ref.offset, size))
        return head + read_bytes(ExternalRef(ref.path, ref.offset + ref.length - size, size))
    if tensor.HasField("raw_data"):
        data = tensor.raw_data  # each read of the field copies it
        return data[:_END_BYTES] + data[-_END_BYTES:]
    return b""  # values in typed fields: small tensors, compared whole


MAX_PARALLEL_GROUP = 8
"""Readers of one tensor considered for merging; wider fans (rare) are left alone rather than paired n^2 ways."""


def parallel_pairs(model: onnx.ModelProto, facts: GraphFacts) -> list[tuple[str, str]]:
    """Outputs of MatMuls, Gemms or Convs that read the same first input with an initializer weight no other
    node reads, as ordered pairs in graph order: the only places the parallel-merge rules can apply. A weight
    read elsewhere stays in the file beside the merged copy: basic-pitch's tf2onnx export shares one filter
    bank among 16 Convs, and merging two of them grew the file by 31% for no measured speed."""
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    readers = Counter(name for node in all_nodes(model.graph) for name in node.input if name in weights)
    groups: dict[tuple[object, ...], list[str]] = {}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("MatMul", "Gemm", "Conv") or len(node.input) < 2:
            continue
        if readers[node.input[1]] > 1:
            continue
        shape = weights.get(node.input[1])
        if shape is None or not node.output or not node.output[0] or len(shape) < 2:
            continue
        if node.op_type == "MatMul":  # [K, N] weights of one K
            key: tuple[object, ...] = ("MatMul", node.input[0], shape[0]) if len(shape) == 2 else ()
        elif node.op_type == "Gemm":
            key = _gemm_key(node, shape, weights)
        else:  # ungrouped, equal attributes, equal filter shapes apart from the filter count, both biased or not
            attrs = tuple(sorted(a.SerializeToString() for a in node.attribute))
            grouped = any(a.name == "group" and a.i != 1 for a in node.attribute)
            key = () if grouped else ("Conv", node.input[0], shape[1:], attrs, len(node.input))
        if key:
            groups.setdefault(key, []).append(node.output[0])
    pairs = []
    for outputs in groups.values():
        if 1 < len(outputs) <= MAX_PARALLEL_GROUP:
            pairs += [(a, b) for i, a in enumerate(outputs) for b in outputs[i + 1 :]]
    return pairs


def _gemm_key(node: onnx.NodeProto, shape: tuple[int, ...], weights: dict[str, tuple[int, ...]]) -> tuple[object, ...]:
    """Gemms merge when they share A, every attribute and K, and their biases are initializers of one form
    along N ([N] or [1, N]) or both absent: concatenated along N, the weights and biases stay valid."""
    trans_b = _int_attr(list(node.attribute), "transB", 0)
    k, n = (shape[1], shape[0]) if trans_b else (shape[0], shape[1])
    bias = node.input[2] if len(node.input) > 2 else ""
    bias_shape = weights.get(bias) if bias else ()
    if bias_shape not in ((), (n,), (1, n)) or (bias and bias_shape == ()):
        return ()
    attrs = tuple(sorted(a.SerializeToString() for a in node.attribute))
    return ("Gemm", node.input[0], k, attrs, len(bias_shape) if bias else None)


SHAPE_VALUE_OPS = frozenset(
    {"Shape", "Expand", "Concat", "Gather", "Slice", "Unsqueeze", "Squeeze", "Cast", "Identity", "Reshape"}
    | {"Transpose", "Flatten", "ConstantOfShape", "Add", "Sub", "Mul", "Div", "Neg", "Max", "Min", "Range"}
)
"""Ops through which small values are followed: shapes and the sizes exporters compute from them (PyTorch
writes a Pad's pads as a dozen such nodes from the input's sizes). Other ops are followed when every input is
a known small value (an attention's scale computed as ``1 / sqrt(sqrt(size))`` from a Shape)."""
SMALL_VALUE_ELEMENTS = 16


def _is_small(value: np.ndarray) -> bool:
    return value.dtype.kind in "biuf" and value.ndim <= 2 and value.size <= SMALL_VALUE_ELEMENTS


def _followable(node: onnx.NodeProto) -> bool:
    """A node whose output may be computed from known inputs: standard, deterministic, one output, no body."""
    if node.op_type in SHAPE_VALUE_OPS:
        return True
    return node.op_type not in NONDETERMINISTIC_OPS and len(node.output) == 1 and not _has_subgraph(node.attribute)


def _small_values(model: onnx.ModelProto, facts: GraphFacts, base_dir: Path | None) -> dict[str, np.ndarray]:
    """Small values (at most ``SMALL_VALUE_ELEMENTS``) computed from constants, by tensor name; on the way,
    the output shapes of Expands whose target is one (shape inference leaves them open: an exporter's
    ``Expand(CastLike(0, x), Expand(Shape(W)[0:1], [1]))`` zero bias).

    Values are followed from initializers, Constants and the shapes of static tensors (see
    ``SHAPE_VALUE_OPS``), each computed by ONNX Runtime like a constant fold. The e-graph folds the same
    nodes, but only when the extracted graph is decoded: rules that test a value (a Pad's pads) and the
    matchers that read one (an attention's scale) see it here.
    """
    values: dict[str, np.ndarray] = {}
    inputs = {v.name for v in model.graph.input} if model.ir_version >= 4 else set()
    for tensor in model.graph.initializer:
        small = len(tensor.dims) <= 2 and int(np.prod(tensor.dims)) <= SMALL_VALUE_ELEMENTS
        if tensor.name not in inputs and small and tensor.data_type != onnx.TensorProto.STRING:
            value = np.asarray(tensor_value(tensor, base_dir))
            if _is_small(value):
                values[tensor.name] = value
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if node.op_type == "Constant":
            try:
                value = np.asarray(constant_node_value(node, base_dir))
            except Exception:  # a Constant without a numeric value: nothing to follow
                continue
            if _is_small(value):
                values[node.output[0]] = value
            continue
        if node.op_type == "Expand" and len(node.input) == 2 and values.get(node.input[1], np.zeros((0, 0))).ndim == 1:
            source = facts.shapes.get(node.input[0])
            known = facts.shapes.get(node.output[0])
            if source is not None and all(d >= 0 for d in source) and (known is None or min(known, default=0) < 0):
                target = tuple(int(d) for d in values[node.input[1]])
                with contextlib.suppress(ValueError):  # not broadcastable: ORT will say so at run time
                    facts.shapes[node.output[0]] = tuple(int(d) for d in np.broadcast_shapes(source, target))
        if not _followable(node):
            continue
        if node.op_type == "Shape":
            dims = facts.shapes.get(node.input[0])
            if dims is None or any(d < 0 for d in dims):
                continue
            operands: list[np.ndarray | None] = [np.zeros(dims, dtype=np.int8)]
        elif node.input and all(name in values for name in node.input if name):
            operands = [values[name] if name else None for name in node.input]
        else:
            continue
        try:
            (value,) = evaluate_node(node.op_type, "", list(node.attribute), operands, 1, model.opset_import)
        except Exception:  # ORT refuses the node: its value simply stays unknown
            continue
        if _is_small(np.asarray(value)):
            values[node.output[0]] = np.asarray(value)
    return values


def shape_keepers(
    graph: onnx.GraphProto, shapes: dict[str, tuple[int, ...]], small_ints: dict[str, np.ndarray]
) -> list[tuple[str, str]]:
    """(output, data input) of Reshapes and Expands whose constant target keeps the input's shape, shown from
    the input's known dims alone. Shape inference cannot see it when a dim is open: tf2onnx wraps
    BatchNormalizations in ``Reshape(x, [-1, C, 1, 1])`` on an ``[N, C, 1, 1]`` x, and names the two
    batch dims apart, so the Reshape hid each BatchNormalization from the Conv before it."""
    kept = []
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or len(node.input) != 2 or len(node.output) != 1:
            continue
        source = shapes.get(node.input[0])
        target = small_ints.get(node.input[1])
        if source is None or target is None or target.ndim != 1:
            continue
        target_dims = [int(d) for d in target]
        if node.op_type == "Reshape":
            allow_zero = any(a.name == "allowzero" and a.i for a in node.attribute)
            keeps = _reshape_keeps(source, target_dims, allow_zero)
        elif node.op_type == "Expand":
            keeps = _expand_keeps(source, target_dims)
        else:
            continue
        if keeps:
            kept.append((node.output[0], node.input[0]))
    return kept


def _reshape_keeps(source: tuple[int, ...], target: list[int], allow_zero: bool) -> bool:
    """Every target dim copies the source dim in its place: equal to a known dim, a 0 that copies it, or
    the one -1, which then takes the one size left. With a -1, the other dims must be known and positive,
    or the size it infers could differ."""
    if len(target) != len(source) or target.count(-1) > 1:
        return False
    inferring = -1 in target
    for want, have in zip(target, source, strict=True):
        if want == -1:
            continue
        if want == 0 and not allow_zero:
            if inferring and have <= 0:
                return False
            continue
        if have <= 0 or want != have:
            return False
    return True


def _expand_keeps(source: tuple[int, ...], target: list[int]) -> bool:
    """Broadcasting to this target changes nothing: no more dims than the source, each 1 or the known
    source dim it faces."""
    if len(target) > len(source):
        return False
    facing = source[len(source) - len(target) :]
    return all(want == 1 or (have > 0 and want == have) for want, have in zip(target, facing, strict=True))


PAST_ANY_END = 1 << 62
"""An index no dimension reaches: exporters write INT64_MAX as a Slice's end for "to the end" of any size."""


def _value_flags(read: Callable[[], np.ndarray]) -> list[str]:
    """Properties of a small constant that rules test: zeros, ones, one element, spatial Pad pads."""
    try:
        value = np.asarray(read())
    except Exception:  # a constant that cannot be read gets no flags: rules simply do not apply
        return []
    if value.size > FLAG_MAX_ELEMENTS or value.dtype.kind not in "biuf":
        return []
    flags = []
    if value.size and np.all(value == 0):
        flags.append("zeros")
    if value.size and np.all(value == 1):
        flags.append("ones")
    if value.size == 1:
        flags.append("single")
    if value.size and value.dtype.kind in "iu" and np.all(value >= PAST_ANY_END):
        flags.append("past_any_end")
    if value.dtype.kind in "iu" and value.ndim == 1 and value.size >= 6 and value.size % 2 == 0:
        rank = value.size // 2
        if np.all(value >= 0) and value[0] == value[1] == value[rank] == value[rank + 1] == 0:
            flags.append("spatial_pads")
    return flags


def _weight_bound(graph: onnx.GraphProto) -> set[str]:
    """The tensors read as weights (``WEIGHT_SLOTS``) and, back from them, every input of a node that computes
    one: what folding turns into a layer's constant weight."""
    bound = {
        node.input[slot]
        for node in graph.node
        if node.domain in ("", "ai.onnx")
        for slot in WEIGHT_SLOTS.get(node.op_type, ())
        if slot < len(node.input) and node.input[slot]
    }
    for node in reversed(graph.node):
        if any(o in bound for o in node.output):
            bound.update(i for i in node.input if i)
    return bound


def _kept_at_run_time(
    graph: onnx.GraphProto, facts: GraphFacts, constants: set[str]
) -> tuple[set[str], dict[str, int]]:
    """(the tensors a node that will not fold reads, by input or from a body, and the graph's outputs; for each
    value folding computes, the elements of the stored constants it is computed from).

    Which nodes fold depends on which tensors are kept (a fold that would copy a kept weight, or store far more
    than the constants it comes from, is refused, and then that node's inputs are kept too): from "every node
    with static inputs folds", refused folds are taken out until nothing changes."""
    refused: set[int] = set()
    while True:
        origins: dict[str, frozenset[str]] = {name: frozenset([name]) for name in constants}
        folding: set[int] = set()
        for index, node in enumerate(graph.node):
            if _is_constant(node):
                origins.update((o, frozenset([o])) for o in node.output if o)
                folding.add(index)
            elif (
                index not in refused
                and all(i in origins for i in node.input if i)
                and _foldable_keeping(node, facts, None, {})
            ):
                came_from = frozenset().union(*(origins[i] for i in node.input if i))
                origins.update((o, came_from) for o in node.output if o)
                folding.add(index)
        kept = set(facts.graph_outputs)
        for index, node in enumerate(graph.node):
            if index not in folding:
                kept.update(i for i in [*node.input, *subgraph_captures(node)] if i)
        sources = {name: sum(facts.numel(c) or 0 for c in came_from) for name, came_from in origins.items()}
        newly = {
            index
            for index in folding
            if not _is_constant(graph.node[index]) and not _foldable_keeping(graph.node[index], facts, kept, sources)
        }
        if not newly:
            return kept, sources
        refused |= newly


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _foldable(node: onnx.NodeProto, facts: GraphFacts) -> bool:
    """The node may be computed at optimization time once its inputs are known to be static."""
    return _foldable_keeping(node, facts, facts.kept, facts.fold_sources)


def _foldable_keeping(
    node: onnx.NodeProto, facts: GraphFacts, kept: set[str] | None, sources: Mapping[str, int]
) -> bool:
    """:func:`_foldable` with ``kept`` the tensors that stay in the model (None: copies and growth of what is
    stored not considered) and ``sources`` the elements of the stored constants each folded value comes from."""
    if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC_OPS or node.op_type == "Constant":
        return False
    if node.op_type == "DequantizeLinear":  # an int8 weight stays int8: folded, it is 4x larger and runs in float
        return False
    if any(name in facts.types and not numpy_exchangeable(facts.types[name]) for name in [*node.input, *node.output]):
        # ORT's Python API, which computes folds, hands none of them to numpy (bfloat16 and int4 failed; float8
        # e4m3fn came back as its byte codes, 448 as 126); and a weight stored narrow and widened by a Cast stays
        # narrow (folded, an int4 weight grew the file 3.6x for no speed: ORT widens it once when it loads)
        return False
    if not any(node.input) or subgraph_captures(node) or _has_subgraph(node.attribute):
        return False  # If/Loop/Scan bodies are left alone
    if not facts.widen_weights and _widens_a_weight(node, facts):
        return False
    sizes = [facts.numel(o) for o in node.output if o]
    if not sizes or any(size is None for size in sizes):
        return False
    inputs = sum(facts.numel(i) or 0 for i in node.input if i)
    produced = sum(size for size in sizes if size is not None)
    copied = kept is not None and any(i in kept and (facts.numel(i) or 0) > FOLD_MAX_COPY for i in node.input if i)
    if copied and produced > FOLD_MAX_COPY:
        return False
    if produced > FOLD_MAX_ELEMENTS or produced > inputs + WEIGHT_FOLD_MAX_GROWTH:
        return False
    # the tight bound is for what stays in the file, against the constants it is computed from (a chain of
    # same-sized steps after one broadcast grows at its first step only): a value only folds read goes away
    # with them (an Expand a ReduceMax folds down to one number), and a weight is worth its bytes
    stored = [o for o in node.output if o and kept is not None and o in kept and o not in facts.weights]
    origin = sum(sources.get(i, facts.numel(i) or 0) for i in node.input if i)
    return not stored or produced <= min(inputs, origin) + FOLD_MAX_GROWTH


WIDENED_MIN_ELEMENTS = FOLD_MAX_COPY
"""From this size on, a stored weight that a Cast widens stays narrow (``_widens_a_weight``)."""


def _widens_a_weight(node: onnx.NodeProto, facts: GraphFacts) -> bool:
    """Whether ``node`` is a Cast to a wider type of a stored tensor of ``WIDENED_MIN_ELEMENTS`` or more: weights
    stored in int8 or float16 and widened to float32 at run time. Folded, the file grows with them (a sentence
    encoder storing 38 int8 weights behind Cast and Mul grew from 22.9 MB to 90.3 MB) for no speed: ONNX Runtime
    folds such a Cast once when it loads the model. A lossy pass that computes in float32 and stores its own
    result (quantization, pruning) widens them (``widen_weights``)."""
    if node.op_type != "Cast" or not node.input or not node.output:
        return False
    source, result = facts.types.get(node.input[0]), facts.types.get(node.output[0])
    if source is None or result is None:
        return False
    return widens_stored(source, result, facts.numel(node.input[0]) or 0)


def widens_stored(source: int, result: int, elements: int) -> bool:
    """Whether a Cast from element type ``source`` to ``result`` widens a stored tensor of ``elements`` large enough
    (``WIDENED_MIN_ELEMENTS``) for its narrow storage to matter: int8 or float16 weights computed in float32."""
    return elements >= WIDENED_MIN_ELEMENTS and element_size(result) > element_size(source)


def _typed_values(model: onnx.ModelProto) -> Iterable[onnx.ValueInfoProto]:
    yield from model.graph.input
    yield from model.graph.value_info
    yield from model.graph.output


def count_dead_nodes(graph: onnx.GraphProto) -> int:
    """Nodes none of whose outputs reach a graph output: extraction drops them."""
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    live: set[int] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        index = stack.pop()
        if index in live:
            continue
        live.add(index)
        node = graph.node[index]
        stack.extend(producer[n] for n in [*node.input, *subgraph_captures(node)] if n in producer)
    return len(graph.node) - len(live)
