"""MACs, parameters and memory of an ONNX model, per node (layer) and in total: ONNXSat's one counter.

How each figure is counted
--------------------------
Shapes are static, at the input shapes the user fixed (see :mod:`onnxsat.profile.shapes`). Only the
main graph's nodes are layers; a node holding subgraphs counts its bodies' MACs by the rules below: an
If its larger branch (one runs per call: a merged decoder's whole model is in its branches), a Loop its
body times its trip count when that is a constant, a Scan its body times the length of its first scanned
input. A Loop whose trip count is computed at run time counts one iteration and is listed in
``ModelProfile.per_iteration``; body nodes whose shapes inference cannot tell count 0 and are counted in
``ModelProfile.unsized``.

**MACs** follow onnx-tool 1.0 (``onnx_tool.Graph.profile``, a widely used ONNX profiler), so
figures compare with published ones. onnx-tool counts "instructions": every elementwise op too,
with transcendental functions weighted by the cost of their vectorised approximation. Per node:

- Conv: ``output elements x prod(weight dims[1:])``, plus one add per output element when a bias is
  given: ``N*Cout*H*W * Cin/group*kH*kW`` (+ ``N*Cout*H*W``).
- ConvTranspose: ``input elements x prod(weight dims[1:])`` (its weight is ``[Cin, Cout/group, kH, kW]``:
  every input value is multiplied by its kernel slice, ``N*Cin*Hin*Win * Cout/group*kH*kW``), plus one add
  per output element when a bias is given. onnx-tool applies Conv's formula to the output instead, which
  reads the weight as ``[Cout, ...]``: a DCGAN generator's 4.7 M MACs came out 13.4 M. This is the one
  MAC count that differs from onnx-tool's.
- Gemm: ``output elements x K`` (K from B, honouring transB) + output elements when C is given.
  MatMul: ``output elements x B's second-to-last dim``.
- Per output element: Relu, Add, Sub, Mul, Mod, Min, Max, Neg, Abs, Ceil, Sign, CumSum, Hardmax,
  comparisons and logic (Equal, Less, Greater, ..., And, Or, Not, Xor, IsNaN, IsInf, Round, Floor,
  NonZero) 1;
  Clip, PRelu, LeakyRelu, QuantizeLinear, DequantizeLinear, ImageScaler 2; HardSigmoid 4;
  HardSwish 5; Div, Reciprocal 4; InstanceNormalization 7; Sqrt 24; Exp, Sigmoid, Pow 32;
  LpNormalization 33; Gelu 34; Elu 35; Softmax 36; Sin, Cos 39; Log 43; Atan 64; Tanh 76;
  Softplus 76; LogSoftmax 80; BatchNormalization 31; LRN ``37 + size``; Sum ``inputs - 1``.
  Broadcasting counts the output, whatever the inputs' sizes.
- MaxPool, AveragePool: ``output elements x kernel elements``. GlobalAveragePool: input elements
  + 4 x output elements. ReduceMean/Sum/Prod/Min/Max: input elements; ReduceL2: 25 x input elements.
  LayerNormalization: ``7 x elements + 29 x elements / (size of the normalized axis)``; RMSNormalization the
  same less one per element (no mean); GroupNormalization ``7 x elements + 29 x batch x groups``.
- Attention (opset 23): ``batch x heads x Sq x Skv x (D + Dv)`` for its two products, plus Softmax's 36 per
  score (Skv as the K input shows it: past keys are not added).
  Resize/Upsample: 0 (nearest), 4 (linear) or 8 (cubic) per output element. Einsum: the product
  of every distinct index's size over both operands.
- LSTM, GRU, RNN: the gate products, ``steps x batch x (elements of W + elements of R)`` (W and R hold
  every direction's and gate's weights); the gates' elementwise math is not counted.
- 0 for data movement and the ops onnx-tool prices at nothing: Reshape, Transpose, Concat, Slice,
  Gather, Pad, Expand, Cast, Identity, Dropout, Where, Erf, TopK, ArgMax, ... (:data:`FREE_OPS`).
- ONNX Runtime's ``com.microsoft`` ops that ONNXSat and ORT's optimizers write (onnx-tool cannot
  profile them at all: it has no shape rule for them): FusedConv as Conv, FusedGemm as Gemm,
  FusedMatMul as MatMul (K from A, honouring transA), the fused activation not counted (as the
  op's own MACs), so a Conv+Relu fusion shows the Relu's MACs as a reduction although
  the kernel still applies it in registers; Gelu, FastGelu 34 and BiasGelu 35 per output element;
  SkipLayerNormalization as LayerNormalization plus one add per element for each of skip and bias.
- Quantized forms count as the float op they replace (onnx-tool has no rule for them), so a quantized
  model's MACs compare with its original's: QLinearConv and ConvInteger as Conv; QLinearMatMul,
  MatMulInteger and com.microsoft DynamicQuantizeMatMul, MatMulIntegerToFloat and MatMulNBits (K from its
  attribute) as MatMul; QGemm as Gemm; QLinearAdd, QLinearMul, QLinearLeakyRelu, QLinearSigmoid,
  QLinearSoftmax, QLinearAveragePool and QLinearGlobalAveragePool as their float ops; QLinearConcat and
  GatherBlockQuantized (a 4-bit embedding lookup) 0.
  QuantizeLinear and DequantizeLinear cost 2 per element, as above, and DynamicQuantizeLinear as QuantizeLinear
  (its range is found on the way).
- Anything else counts 0 and is listed in ``ModelProfile.uncounted_ops`` so a report can say so.

**Parameters**: the elements of every initializer of the main graph and its bodies, dense and sparse (a sparse
initializer counts its dense size, MatMulNBits's packed 4-bit weight its K x N), whether or not a node
reads it. A layer's parameters are the initializers it is the first node to read. The model is profiled
in normal form (``onnxsat.normal_form``): a Constant node's tensor is an initializer, so weights exporters
put in Constant nodes are parameters.
The ``ai.onnx.ml`` operators (tree ensembles, linear models, SVMs, scalers: what scikit-learn, LightGBM
and XGBoost exports hold) keep their weights in attributes: each number and string there is a
parameter of its node, stored as the attribute holds it (4 bytes a float, 8 an integer).

**Memory** (onnx-tool's definition): per layer, the bytes of the initializers it is
the first to read (weights; a sparse one as stored, values plus indices) plus the bytes of every
tensor it outputs (activations); a Constant node's output counts nothing, as its value is a weight.
The model's memory is the sum over layers: the bytes every weight and every intermediate would take
if none were freed or reused, not a runtime's peak.

Differences from onnx-tool (checked in ``tests/profile/test_onnx_tool.py``)
---------------------------------------------------------------------------
- Parameters: onnx-tool counts only initializers some node reads; ONNXSat counts all of them (the
  issue's definition). They agree on every model without unread initializers.
- Scalars: a 0-d tensor has one element here and none in onnx-tool (its ``volume(())`` is 0), so a
  scalar initializer (Clip's bounds, say) adds 1 parameter and its bytes here, and a scalar output
  its bytes and, for an elementwise op, its MACs.
- Dropout's mask before opset 10 has its input's type (float32, as the spec says) here; onnx-tool
  sizes it as bool, 1 byte an element, whatever the opset.
- 3-D pooling: onnx-tool multiplies only the first kernel dim (a slip in its 2-D code path); ONNXSat
  multiplies every kernel dim. Bias: onnx-tool adds the bias MACs whenever a Conv/Gemm has three
  input slots, even an empty one; ONNXSat only for a named bias.
- Constant nodes: onnx-tool counts their tensors as nothing; ONNXSat as the parameters they are.
- LSTM, GRU, RNN: onnx-tool's rules differ; onnx-tool's own pseudo-ops (MHA, GQA, Rope, ...) have no
  rule here: counted 0 and listed as uncounted.
- onnx-tool refuses models with dynamic inputs and com.microsoft ops; ONNXSat profiles both.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, numpy_helper

from onnxsat.inputs import InputsLike
from onnxsat.normal_form import normal_form
from onnxsat.op_kinds import DEFAULT_DOMAINS, qualified_op
from onnxsat.profile.shapes import INFERENCE, MICROSOFT, Shapes, TensorFacts, resolve_shapes
from onnxsat.proto_fields import all_graphs, bodies_of

_PER_ELEMENT: dict[str, int] = {
    **dict.fromkeys(
        ("Relu", "Add", "Sub", "Mul", "Mod", "Min", "Max", "Neg", "Abs", "Ceil", "Sign", "CumSum", "Hardmax"), 1
    ),
    **dict.fromkeys(("Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "Round", "Floor", "NonZero"), 1),
    **dict.fromkeys(("And", "Or", "Not", "Xor", "IsNaN", "IsInf"), 1),
    **dict.fromkeys(("Clip", "PRelu", "LeakyRelu", "QuantizeLinear", "DequantizeLinear", "ImageScaler"), 2),
    "DynamicQuantizeLinear": 2,
    **{"HardSigmoid": 4, "HardSwish": 5, "Div": 4, "Reciprocal": 4, "InstanceNormalization": 7, "Sqrt": 24},
    **{"Exp": 32, "Sigmoid": 32, "Pow": 32, "LpNormalization": 33, "Gelu": 34, "Elu": 35, "Softmax": 36},
    **{"Sin": 39, "Cos": 39, "Log": 43, "Atan": 64, "Tanh": 76, "Softplus": 76, "LogSoftmax": 80},
    "BatchNormalization": 31,
}
"""onnx-tool's cost per output element (its ``op_mac`` times its ``ratio``) of elementwise-like ops."""

_MICROSOFT_PER_ELEMENT = {
    **{"Gelu": 34, "FastGelu": 34, "BiasGelu": 35},
    **{"QLinearAdd": 1, "QLinearMul": 1, "QLinearLeakyRelu": 2, "QLinearSigmoid": 32, "QLinearSoftmax": 36},
    "QLinearConcat": 0,
    "GatherBlockQuantized": 0,
}

_STANDARD = frozenset(DEFAULT_DOMAINS)
_INTEGER_FORMS: dict[str, tuple[frozenset[str], int, int, int | None]] = {
    "QLinearConv": (_STANDARD, 0, 3, 8),
    "ConvInteger": (_STANDARD, 0, 1, None),
    "QLinearMatMul": (_STANDARD, 0, 3, None),
    "MatMulInteger": (_STANDARD, 0, 1, None),
    "QGemm": (frozenset({MICROSOFT}), 0, 3, 6),
    "DynamicQuantizeMatMul": (frozenset({MICROSOFT}), 0, 1, 4),
    "MatMulIntegerToFloat": (frozenset({MICROSOFT}), 0, 1, 6),
    "MatMulNBits": (frozenset({MICROSOFT}), 0, 1, 5),
}
"""Quantized forms of Conv, MatMul and Gemm that ONNX Runtime's quantizer writes: (domains, data input,
weight input, bias input or None). They count as the float op they replace, so a quantized model's MACs
compare with its float original's; MatMulNBits's packed weight gives no K, its ``K`` attribute does."""

FREE_OPS = frozenset(
    {
        *("Identity", "Constant", "ConstantOfShape", "Shape", "Size", "Cast", "CastLike", "Reshape", "Flatten"),
        *("Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND"),
        *("Pad", "Expand", "Tile", "Dropout", "Where", "Erf", "Trilu", "Range", "OneHot", "DepthToSpace"),
        *("SpaceToDepth", "ScatterND", "ScatterElements", "TopK", "ArgMax", "ArgMin", "Compress"),
    }
)
"""Standard ops that cost 0 MACs by definition (data movement) or by onnx-tool's pricing."""

_REDUCTIONS = {"ReduceMean": 1, "ReduceSum": 1, "ReduceProd": 1, "ReduceMin": 1, "ReduceMax": 1, "ReduceL2": 25}
_FOUR_BIT = {TensorProto.INT4, TensorProto.UINT4, getattr(TensorProto, "FLOAT4E2M1", TensorProto.INT4)}


@dataclass(frozen=True)
class LayerProfile:
    """One node's figures."""

    name: str
    op_type: str
    domain: str
    macs: int
    params: int
    weight_bytes: int
    output_bytes: int
    output_shapes: tuple[tuple[int, ...], ...]

    @property
    def memory_bytes(self) -> int:
        """Weights first read here plus the outputs written here (onnx-tool's per-layer memory)."""
        return self.weight_bytes + self.output_bytes

    @property
    def kind(self) -> str:
        """``Conv``, or ``com.microsoft.FusedConv`` for an op outside the standard domain."""
        return qualified_op(self.domain, self.op_type, ".")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "op_type": self.kind,
            "macs": self.macs,
            "params": self.params,
            "memory_bytes": self.memory_bytes,
            "weight_bytes": self.weight_bytes,
            "output_bytes": self.output_bytes,
            "output_shapes": [list(s) for s in self.output_shapes],
        }


@dataclass(frozen=True)
class ModelProfile:
    """Every layer's figures, the model's parameter count, and how the shapes were obtained."""

    layers: tuple[LayerProfile, ...]
    params: int
    input_shapes: dict[str, list[int]]
    shape_method: str
    uncounted_ops: tuple[str, ...]
    per_iteration: tuple[str, ...] = ()
    """Loops counted for one iteration: their trip count is computed at run time."""
    unsized: int = 0
    """Body nodes counted 0 because shape inference cannot tell their shapes."""

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def memory_bytes(self) -> int:
        return sum(layer.memory_bytes for layer in self.layers)

    @property
    def op_counts(self) -> dict[str, int]:
        """Nodes per op type, most frequent first (ties by name)."""
        counts = Counter(layer.kind for layer in self.layers)
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def to_dict(self) -> dict[str, object]:
        """The JSON form: ``{"total": {...}, "layers": [...], ...}``."""
        return {
            "total": {"macs": self.macs, "params": self.params, "memory_bytes": self.memory_bytes},
            "layers": [layer.to_dict() for layer in self.layers],
            "op_counts": self.op_counts,
            "nodes": len(self.layers),
            "input_shapes": self.input_shapes,
            "shape_method": self.shape_method,
            "uncounted_ops": list(self.uncounted_ops),
            "per_iteration": list(self.per_iteration),
            "unsized_body_nodes": self.unsized,
        }


def parameter_count(model: onnx.ModelProto) -> int:
    """Elements of every initializer of the main graph and its bodies (a sparse one at its dense size, a
    4-bit MatMulNBits weight at its K x N), and the numbers ``ai.onnx.ml`` nodes hold in attributes."""
    packed = _packed_elements(model)
    dense = sum(packed.get(t.name, math.prod(t.dims)) for t in _initializers(model))
    in_attributes = sum(attribute_weights(node)[0] for node in model.graph.node)
    return dense + sum(math.prod(s.dims) for s in model.graph.sparse_initializer) + in_attributes


ML_DOMAIN = "ai.onnx.ml"


def attribute_weights(node: onnx.NodeProto) -> tuple[int, int]:
    """(elements, bytes) of what an ``ai.onnx.ml`` node holds in its attributes; (0, 0) for other nodes."""
    if node.domain != ML_DOMAIN:
        return 0, 0
    elements = stored = 0
    for attribute in node.attribute:
        elements += len(attribute.floats) + len(attribute.ints) + len(attribute.strings)
        stored += 4 * len(attribute.floats) + 8 * len(attribute.ints) + sum(len(t) for t in attribute.strings)
        if attribute.HasField("t"):
            elements += math.prod(attribute.t.dims)
            stored += _nbytes(TensorFacts(tuple(attribute.t.dims), attribute.t.data_type))
    return elements, stored


def profile_model(
    model: onnx.ModelProto,
    inputs: InputsLike = None,
    *,
    allow_onnxruntime: bool = True,
    base_dir: Path | None = None,
) -> ModelProfile:
    """Profile every node of ``model``'s main graph (see the module doc for what is counted), in normal
    form: weights held in Constant nodes count as the parameters they are.

    ``inputs`` fixes inputs with dynamic dims (required for them): sizes, or given arrays. ``allow_onnxruntime``
    and ``base_dir`` are passed to :func:`onnxsat.profile.shapes.resolve_shapes`.
    """
    model, _ = normal_form(model)
    shapes = resolve_shapes(model, inputs, allow_onnxruntime=allow_onnxruntime, base_dir=base_dir)
    weights = _weights(model)
    seen: set[str] = set()
    layers = []
    counter = _Counter(shapes, _constant_counts(model))
    for index, node in enumerate(model.graph.node):
        params, weight_bytes = attribute_weights(node)
        for name in _reads(node):
            if name in weights and name not in seen:
                seen.add(name)
                params += weights[name][0]
                weight_bytes += weights[name][1]
        for body in bodies_of(node):  # each body's own weights are stored apart, even under the same names
            for tensor in (t for graph in all_graphs(body) for t in graph.initializer):
                params += math.prod(tensor.dims)
                weight_bytes += _nbytes(TensorFacts(tuple(tensor.dims), tensor.data_type))
        outputs = [shapes.tensors[name] for name in node.output if name in shapes.tensors]
        output_bytes = 0 if node.op_type == "Constant" else sum(_nbytes(f) for f in outputs)
        layers.append(
            LayerProfile(
                name=node.name or f"{node.op_type}_{index}",
                op_type=node.op_type,
                domain=node.domain,
                macs=counter.macs(node),
                params=params,
                weight_bytes=weight_bytes,
                output_bytes=output_bytes,
                output_shapes=tuple(f.shape for f in outputs),
            )
        )
    return ModelProfile(
        tuple(layers),
        parameter_count(model),
        shapes.inputs,
        shapes.method,
        tuple(sorted(counter.uncounted)),
        tuple(counter.per_iteration),
        counter.unsized,
    )


_ANY_SHAPES = Shapes(defaultdict(lambda: TensorFacts((1,), TensorProto.FLOAT)), {}, INFERENCE)


def _has_costly_rule(node: onnx.NodeProto) -> bool:
    """Whether a MAC rule covers ``node`` and counts something (not a data move), whatever its sizes."""
    try:
        return bool(node_macs(node, _ANY_SHAPES))  # every tensor of one element
    except (IndexError, KeyError):  # a rule reading a dim a one-element tensor does not have
        return True


class _Counter:
    """MACs of nodes and of the bodies they hold, and what could not be counted on the way."""

    def __init__(self, shapes: Shapes, constants: dict[str, int]) -> None:
        self.shapes = shapes
        self.constants = constants
        self.uncounted: set[str] = set()
        self.per_iteration: list[str] = []
        self.unsized = 0

    def macs(self, node: onnx.NodeProto, in_body: bool = False) -> int:
        if node.domain in DEFAULT_DOMAINS and node.op_type in ("If", "Loop", "Scan"):
            return self._control_flow(node)
        try:
            macs = node_macs(node, self.shapes)
        except KeyError:  # a sequence, map or optional value, or (in a body) a shape inference left open
            macs = None
            if in_body and _has_costly_rule(node):  # sizes not known to shape inference
                self.unsized += 1
                return 0
        if macs is None:
            self.uncounted.add(qualified_op(node.domain, node.op_type, "."))
        return macs or 0

    def _body(self, graph: onnx.GraphProto) -> int:
        return sum(self.macs(inner, in_body=True) for inner in graph.node)

    def _control_flow(self, node: onnx.NodeProto) -> int:
        bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        if node.op_type == "If":
            return max(self._body(bodies["then_branch"]), self._body(bodies["else_branch"]))
        body = self._body(bodies["body"])
        if node.op_type == "Loop":
            trips = self.constants.get(node.input[0]) if node.input and node.input[0] else None
        else:
            scanned = _int(node, "num_scan_inputs", 1)
            axes = _attribute(node, "scan_input_axes", [0])
            axis = axes[0] if isinstance(axes, list) and axes else 0
            first = self.shapes.tensors.get(node.input[len(node.input) - scanned])
            trips = first.shape[axis] if first is not None and first.shape else None
        if trips is None:
            self.per_iteration.append(node.name or node.op_type)
            return body
        return body * trips


def _initializers(model: onnx.ModelProto) -> list[TensorProto]:
    """Every initializer of the main graph and of its bodies (optimize may move weights into a body)."""
    return [tensor for graph in all_graphs(model.graph) for tensor in graph.initializer]


def _constant_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Integer scalars stored as initializers, by name: the trip counts a Loop may read."""
    return {
        tensor.name: int(numpy_helper.to_array(tensor).reshape(()))
        for tensor in _initializers(model)
        if tensor.data_type in (TensorProto.INT64, TensorProto.INT32) and math.prod(tensor.dims) == 1
    }


def _packed_elements(model: onnx.ModelProto) -> dict[str, int]:
    """Weights stored packed, by name: the elements they hold (MatMulNBits: K x N in bytes of 2 or more)."""
    return {
        node.input[1]: _int(node, "K", 0) * _int(node, "N", 0)
        for node in model.graph.node
        if node.op_type == "MatMulNBits" and node.domain == MICROSOFT and len(node.input) > 1
    }


def _weights(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """Main-graph initializer name -> (elements, bytes as stored)."""
    packed = _packed_elements(model)
    weights = {
        t.name: (packed.get(t.name, math.prod(t.dims)), _nbytes(TensorFacts(tuple(t.dims), t.data_type)))
        for t in model.graph.initializer
    }
    for sparse in model.graph.sparse_initializer:
        values, indices = sparse.values, sparse.indices
        stored = _nbytes(TensorFacts(tuple(values.dims), values.data_type))
        stored += _nbytes(TensorFacts(tuple(indices.dims), indices.data_type))
        weights[values.name] = (math.prod(sparse.dims), stored)
    return weights


def _reads(node: onnx.NodeProto) -> list[str]:
    """Names a node reads: its inputs, then whatever its subgraphs read from outside them."""
    names = [name for name in node.input if name]
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
        for graph in graphs:
            for inner in graph.node:
                names.extend(_reads(inner))
    return names


def _nbytes(facts: TensorFacts) -> int:
    """Bytes of a tensor's data: elements x element size (4-bit types packed two a byte, strings 0)."""
    elements = math.prod(facts.shape)
    if facts.elem_type in _FOUR_BIT:
        return (elements + 1) // 2
    if facts.elem_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 0
    return elements * onnx.helper.tensor_dtype_to_np_dtype(facts.elem_type).itemsize


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    value = _attribute(node, name, default)
    return value if isinstance(value, int) else default


def _text(node: onnx.NodeProto, name: str, default: str) -> str:
    value = _attribute(node, name, None)
    return value.decode() if isinstance(value, bytes) else default


def node_macs(node: onnx.NodeProto, shapes: Shapes) -> int | None:
    """MACs of one node by the rules in the module doc; None when there is no rule for its op."""

    def shape(index: int) -> tuple[int, ...]:
        return shapes.tensors[node.input[index]].shape

    def given(index: int) -> bool:
        return len(node.input) > index and bool(node.input[index])

    out = math.prod(shapes.tensors[node.output[0]].shape) if node.output and node.output[0] else 0
    op = node.op_type
    if op in _INTEGER_FORMS and node.domain in _INTEGER_FORMS[op][0]:  # quantized forms count as their float op
        _, data, weight, bias = _INTEGER_FORMS[op]
        k = shape(weight)[1:] if op in ("QLinearConv", "ConvInteger") else shape(weight)[-2:-1]
        if op == "QGemm" and _int(node, "transB", 0):
            k = shape(weight)[-1:]
        if op == "MatMulNBits":
            k = (_int(node, "K", shape(data)[-1]),)
        return out * math.prod(k) + (out if bias is not None and given(bias) else 0)
    if node.domain == MICROSOFT:
        if op in ("FusedConv", "FusedGemm"):
            op = op.removeprefix("Fused")
        elif op == "FusedMatMul":
            a = shape(0)
            return out * (a[-2] if _int(node, "transA", 0) else a[-1])
        elif op in _MICROSOFT_PER_ELEMENT:
            return out * _MICROSOFT_PER_ELEMENT[op]
        elif op == "QLinearGlobalAveragePool":
            return math.prod(shape(0)) + 4 * out
        elif op == "QLinearAveragePool":
            op = "AveragePool"
        elif op == "SkipLayerNormalization":
            return _layer_norm(shape(0), -1) + out * (1 + given(3))
        else:
            return None
    elif node.domain not in DEFAULT_DOMAINS:
        return None
    if op in FREE_OPS:
        return 0
    if op in _PER_ELEMENT:
        return out * _PER_ELEMENT[op]
    if op == "Conv":
        return out * math.prod(shape(1)[1:]) + (out if given(2) else 0)
    if op == "ConvTranspose":
        return math.prod(shape(0)) * math.prod(shape(1)[1:]) + (out if given(2) else 0)
    if op == "Gemm":
        weight = shape(1)
        return out * (weight[-1] if _int(node, "transB", 0) else weight[-2]) + (out if given(2) else 0)
    if op == "MatMul":
        weight = shape(1)
        return out * weight[-2] if len(weight) > 1 else out
    if op == "Sum":
        return out * (len(node.input) - 1)
    if op == "LRN":
        return out * (37 + _int(node, "size", 0))
    if op in ("MaxPool", "AveragePool"):
        kernel = _attribute(node, "kernel_shape", [])
        return out * math.prod(kernel if isinstance(kernel, list) else [])
    if op == "GlobalAveragePool":
        return math.prod(shape(0)) + 4 * out
    if op in _REDUCTIONS:
        return math.prod(shape(0)) * _REDUCTIONS[op]
    if op == "LayerNormalization":
        return _layer_norm(shape(0), _int(node, "axis", -1))
    if op == "RMSNormalization":  # no mean: LayerNormalization's per-element and per-row work, less a subtraction
        return _layer_norm(shape(0), _int(node, "axis", -1)) - math.prod(shape(0))
    if op == "GroupNormalization":
        return 7 * math.prod(shape(0)) + 29 * shape(0)[0] * _int(node, "num_groups", 1)
    if op == "Attention":
        return _attention(node, shape(0), shape(1), shape(2))
    if op in ("Resize", "Upsample"):
        return out * {"linear": 4, "cubic": 8}.get(_text(node, "mode", "nearest"), 0)
    if op in ("LSTM", "GRU", "RNN"):
        steps = math.prod(shape(0)[:2])  # [seq, batch, input] or, with layout 1, [batch, seq, input]
        return steps * (math.prod(shape(1)) + math.prod(shape(2)))
    if op == "Einsum":
        return _einsum(_text(node, "equation", ""), [shape(i) for i in range(len(node.input)) if given(i)])
    return None


def _attention(node: onnx.NodeProto, q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> int:
    """Opset 23's Attention: the two products ``Q K^T`` and ``P V`` (``batch x heads x Sq x Skv x (D + Dv)``) and
    its softmax (36 per score). Q, K, V are ``[B, heads, S, D]`` or ``[B, S, heads * D]`` (heads from the
    ``q_num_heads`` attribute); a past key/value input lengthens Skv, which the K given here does not show."""
    if len(q) == 4:
        batch, heads, queries, depth = q
        keys, value_depth = k[2], v[3]
    else:
        batch, queries = q[0], q[1]
        heads = _int(node, "q_num_heads", 1)
        kv_heads = _int(node, "kv_num_heads", heads)
        depth, keys, value_depth = q[2] // max(heads, 1), k[1], v[2] // max(kv_heads, 1)
    scores = batch * heads * queries * keys
    return scores * (depth + value_depth) + 36 * scores


def _layer_norm(shape: tuple[int, ...], axis: int) -> int:
    elements = math.prod(shape)
    return 7 * elements + 29 * (elements // shape[axis] if shape[axis] else 0)


def _einsum(equation: str, operands: list[tuple[int, ...]]) -> int:
    """Product of every distinct index's size over the operands (onnx-tool's rule for two operands)."""
    sizes: dict[str, int] = {}
    for term, dims in zip(equation.replace(" ", "").split("->")[0].split(","), operands, strict=False):
        for index, size in zip(_einsum_indices(term, len(dims)), dims, strict=False):
            sizes[index] = max(sizes.get(index, 1), size)  # a broadcast dim of 1 takes the other's size
    return math.prod(sizes.values())


def _einsum_indices(term: str, rank: int) -> list[str]:
    """One index name per dim of an operand: its letters, with ``...`` spelled out as the dims it covers,
    named from the right as broadcasting aligns them (``...ij`` on rank 4: ``...2``, ``...1``, i, j)."""
    if "..." not in term:
        return list(term)
    head, tail = term.split("...")
    covered = max(rank - len(head) - len(tail), 0)
    return [*head, *(f"...{covered - i}" for i in range(covered)), *tail]
