"""The ways to quantize, each a call into ONNX Runtime's quantizer: static QDQ, dynamic, 4-bit weight-only.

ONNXSat does not quantize by hand: ``onnxruntime.quantization`` knows which ops its kernels run in
integers and how to write them. A mode here turns (model, nodes to leave in float, calibration) into a
quantized model; which nodes to leave, and which mode, is decided by measurement elsewhere.

- ``static``: QDQ format, weights int8 per channel, activations uint8 with ranges calibrated on data
  (ORT then runs QLinearConv / QLinearMatMul): what pays for convolution nets.
- ``dynamic``: MatMul/Gemm weights int8, activations quantized per run (MatMulInteger): no calibration,
  what pays for transformer MatMuls; convolutions are left alone (ConvInteger is slow on CPU).
- ``weight-only``: MatMul and Gemm weights in 4 bits (MatMulNBits, blocks of 32): a smaller file and less memory
  traffic for large MatMuls.

Both integer modes can write 7-bit weights instead of 8 (``seven_bit``): where this machine's int8 kernels clip
full-range products (x86 without VNNI, ``runtime.int8_sums``), the search measures both.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from onnxsat.model_io import over_protobuf_limit
from onnxsat.node_order import sort_graph
from onnxsat.proto_fields import all_nodes, subgraph_captures
from onnxsat.quantization.alone import quantize_alone
from onnxsat.quantization.opsets import INT4_OPSET, at_least_opset
from onnxsat.quantization.widening import widen_narrow_convolutions
from onnxsat.quantized_already import narrow_weight_readers, quantized_nodes
from onnxsat.registry import Registry
from onnxsat.surgery.graph_edit import remove_where
from onnxsat.surgery.surgeons.matmul import GemmToMatMulAdd, plain_gemm

if TYPE_CHECKING:
    from onnxruntime.quantization import CalibrationDataReader

CALIBRATIONS = ("minmax", "entropy", "percentile")
"""ORT's calibrators by the names ``--calibration`` takes (onnxruntime.quantization is imported only
when a model is quantized: it adds a quarter second to every command's start)."""


@dataclass
class Calibration:
    """Where calibration ranges come from: a data reader the first time, then a cache file of ranges,
    so the many candidates a search tries are calibrated once."""

    reader: Callable[[], CalibrationDataReader]
    method: str
    cache: Path

    def arguments(self) -> dict[str, object]:
        from onnxruntime.quantization import CalibrationMethod

        methods = {
            "minmax": CalibrationMethod.MinMax,
            "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile,
        }
        cached = self.cache.is_file()
        return {
            "calibration_data_reader": None if cached else self.reader(),
            "calibrate_method": methods[self.method],
            "calibration_cache_path": self.cache,
        }


Quantizer = Callable[[onnx.ModelProto, Sequence[str], Calibration | None, Sequence[str] | None, bool], onnx.ModelProto]
"""(model, names of nodes left in float, calibration, the only nodes to quantize or None for all, 7-bit weights)
-> the quantized model."""


@dataclass(frozen=True)
class QuantMode:
    name: str
    summary: str
    ops: frozenset[str]
    """Op types of the nodes the search may leave in float (their damage is measured); the weighted ones
    among them are also timed alone."""
    calibrated: bool
    quantize: Quantizer
    constant_weights_only: bool = False
    """Whether it quantizes only nodes whose weight is a constant (ORT's dynamic MatMul, MatMulNBits): the
    activation-by-activation MatMuls of attention are never quantized, so a search has nothing to leave out."""
    bodies: bool = False
    """Whether it quantizes inside If/Loop/Scan bodies too (a merged KV-cache decoder holds every MatMul in
    its two branches). A named body node is searched and left in float by name like a main-graph node; an
    unnamed one is quantized with the rest. Static mode cannot: ORT's calibration sees no body's tensors."""
    body_node: Callable[[onnx.NodeProto], bool] | None = None
    """Which of a body's nodes of its ops it quantizes, where not all (weight-only splits a body's Gemm into
    MatMul + Add only when it is a plain product: no transposes, alpha and beta 1)."""
    left_float: Callable[[onnx.ModelProto], set[str]] | None = None
    """Names of main-graph nodes of its ops it leaves in float whatever the search says (static mode: the Sigmoids
    and Muls that are no SiLU's): not searched, not reported as quantized."""
    int8_kernels: bool = False
    """Whether ORT runs it in uint8 x int8 kernels, whose products clip at full-range weights on some CPUs
    (``runtime.int8_sums``): then its weights may take 7 bits (``seven_bit``)."""
    seven_bit: bool = False
    """Weights in 7 bits instead of 8 (ORT's ``reduce_range``)."""

    def in_bodies(self, node: onnx.NodeProto) -> bool:
        """Whether this body node is quantized in this mode."""
        return self.bodies and node.op_type in self.ops and (self.body_node is None or self.body_node(node))

    def apply(
        self,
        model: onnx.ModelProto,
        exclude: Sequence[str],
        calibration: Calibration | None,
        only: Sequence[str] | None = None,
    ) -> onnx.ModelProto:
        """``quantize``, safe for control flow. ONNX Runtime's quantizer sees only the tensors nodes list as
        inputs: it may fuse away a tensor an If/Loop/Scan body reads by name, give it the range of its only
        visible consumer (a Relu's, dropping the negatives a body reads), and sort nodes as if bodies read
        nothing. While it runs, each such tensor has one more reader, an Identity to a graph output; both
        are taken out after, and the nodes sorted again."""
        captured = _captured_tensors(model)
        readers = {f"{name}{BODY_READ_SUFFIX}": name for name in captured}
        if captured:
            model = _copy(model)
            model.graph.node.extend(onnx.helper.make_node("Identity", [t], [out]) for out, t in readers.items())
            model.graph.output.extend(_typed(model, readers))
        result = self.quantize(model, exclude, calibration, only, self.seven_bit)
        if captured:
            remove_where(result.graph.node, lambda node: any(o in readers for o in node.output))
            remove_where(result.graph.output, lambda value: value.name in readers)
        sort_graph(result.graph)
        return result

    def alone(self, model: onnx.ModelProto, name: str, calibration: Calibration | None) -> onnx.ModelProto:
        """``model`` with node ``name`` alone quantized: the quantizer runs on that node alone and its result
        is spliced in (see ``alone``); a calibrated mode needs its ranges already cached (the whole model is
        quantized first). Else, or when the splice does not fit, the whole model goes through ``apply``."""
        if not self.calibrated or (calibration is not None and calibration.cache.is_file()):
            spliced = quantize_alone(model, name, lambda one: self.quantize(one, [], calibration, None, self.seven_bit))
            if spliced is not None:
                return spliced
        return self.apply(model, [], calibration, [name])


BODY_READ_SUFFIX = "__read_by_a_body"


def _captured_tensors(model: onnx.ModelProto) -> list[str]:
    """Main-graph tensors made by a node that some body reads by name."""
    produced = {name for node in model.graph.node for name in node.output if name}
    read = dict.fromkeys(name for node in model.graph.node for name in subgraph_captures(node))
    return [name for name in read if name in produced]


def _typed(model: onnx.ModelProto, readers: Mapping[str, str]) -> list[onnx.ValueInfoProto]:
    """Graph outputs named as ``readers``' keys, typed as the tensors they read (the model's own value
    infos, else shape inference's)."""
    known = {v.name: v for v in [*model.graph.value_info, *model.graph.output]}
    if any(name not in known for name in readers.values()):
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        known.update({v.name: v for v in inferred.graph.value_info})
    values = []
    for out, name in readers.items():
        value = onnx.ValueInfoProto()
        if name in known:
            value.CopyFrom(known[name])
        else:  # the quantizer needs an element type; what it quantizes around is float
            value.CopyFrom(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
        value.name = out
        values.append(value)
    return values


MODES: Registry[QuantMode] = Registry("quantization mode", "mode")


def _through_file(write: Callable[[Path], None]) -> onnx.ModelProto:
    """Run one of ORT's quantizers (they write files) and read back what it wrote."""
    with tempfile.TemporaryDirectory(prefix="onnxsat-quant-") as folder:
        target = Path(folder) / "quantized.onnx"
        with _quietly():
            write(target)
        return onnx.load(str(target))


@contextmanager
def _quietly() -> Iterator[None]:
    """ORT's quantizers log advice on every call, and numpy warns "invalid value encountered in divide"
    when a calibrated range is infinite (a decoder's -inf attention mask): the candidate's damage is
    measured and reported anyway. Both are kept off stderr while a quantizer runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        root.setLevel(level)


def _nbits_quantizer() -> type:
    """ORT's MatMulNBitsQuantizer. Importing its module calls ``logging.basicConfig(level=INFO)``, which
    would print every INFO line of every library to stderr from then on: the root logger is put back."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    root.setLevel(level)
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    return MatMulNBitsQuantizer


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """ORT's quantizers edit the model they are given (saving it with external data rewrites its tensors
    into references to a temporary file): each gets its own copy."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


ORT_CONTRIB_OPS = frozenset({"Attention", "EmbedLayerNormalization"})
"""Op types ORT's quantizer takes for com.microsoft's ops; every other op type it quantizes, for ONNX's."""


def namesakes(model: onnx.ModelProto, op_types: Sequence[str]) -> list[str]:
    """Nodes ORT's quantizer would take for another op of the same name: it matches op types alone, so ONNX's
    own Attention (opset 23) would become a com.microsoft QAttention ORT refuses to load, and a custom
    domain's "Conv" a QLinearConv. They are always left in float."""
    wanted = set(op_types)
    return [
        node.name
        for node in all_nodes(model.graph)
        if node.op_type in wanted and _domain(node) != ("com.microsoft" if node.op_type in ORT_CONTRIB_OPS else "")
    ]


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


SILU_OPS = ("Sigmoid", "Mul")
"""SiLU's ops, x * Sigmoid(x): static mode quantizes them where they are one (YOLOv5 to YOLO11, EfficientNet's
convolutions), so ORT runs QLinearSigmoid and QLinearMul between the int8 convolutions instead of a dequantize,
two float passes over the activations and a quantize around each (``silu_nodes``); every other Sigmoid and Mul
stays float."""
LAYOUT_OPS = frozenset({"Relu", "Clip", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"})
"""Ops that only move, pick or clamp values: quantized with their neighbours, never worth a search step."""
STATIC_OPS = (
    *("Conv", "ConvTranspose", "MatMul", "Gemm"),
    *("MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Concat", "Resize"),
    *SILU_OPS,
    *sorted(LAYOUT_OPS),
)
"""What static mode quantizes: the weighted ops, and around them the ops ORT runs in int8 (or that only move
or pick values), so quantized tensors flow between them without a float round trip. Other elementwise math
(Mul, Div, Sigmoid in HardSwish, squeeze-excitation and attention gates) stays float: measured on a DBNet
text detector, quantizing it cost as much accuracy as every convolution together; of Sigmoid and Mul only
SiLU's pairs are quantized. Residual Adds and FPN Concats carry wide
ranges: the search may leave them in float like any convolution."""


UNTYPED_TENSORS_FLOAT = {"DefaultTensorType": onnx.TensorProto.FLOAT}
"""ORT's quantizer needs each tensor's element type and stops at one ONNX's shape inference cannot type (the
output of a com.microsoft Attention in a model ORT's transformers optimizer wrote): what it quantizes is
float (a float16 model goes through its float form), so an untyped tensor is float."""


def silu_nodes(graph: onnx.GraphProto) -> set[str]:
    """Names of the Sigmoid and Mul nodes of ``graph`` that compute SiLU, Mul(x, Sigmoid(x)) with the Sigmoid
    read by that Mul alone."""
    producer = {name: node for node in graph.node for name in node.output}
    readers = Counter(name for node in graph.node for name in node.input)
    found: set[str] = set()
    for mul in graph.node:
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.input) != 2:
            continue
        for gate, x in (mul.input, reversed(mul.input)):
            sigmoid = producer.get(gate)
            if sigmoid is not None and sigmoid.op_type == "Sigmoid" and sigmoid.input[0] == x and readers[gate] == 1:
                found |= {mul.name, sigmoid.name} - {""}  # an unnamed node cannot be excluded by name either
    return found


def not_silu(model: onnx.ModelProto) -> set[str]:
    """The main graph's Sigmoid and Mul nodes static mode leaves in float: those not SiLU's (``SILU_OPS``). Named
    ones only: ORT excludes by name, and an empty one would exclude every unnamed node (quantize names them all
    first)."""
    silu = silu_nodes(model.graph)
    return {n.name for n in model.graph.node if n.op_type in SILU_OPS and n.name and n.name not in silu}


def static(
    model: onnx.ModelProto,
    exclude: Sequence[str],
    calibration: Calibration | None,
    only: Sequence[str] | None = None,
    seven_bit: bool = False,
) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    assert calibration is not None
    quantized = _through_file(
        lambda target: quantize_static(
            _copy(model),
            target,
            use_external_data_format=over_protobuf_limit(model),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=seven_bit,
            op_types_to_quantize=list(STATIC_OPS),
            # ORT 1.31's bias-driven weight-scale adjustment fails on per-channel Gemm weights ("truth value
            # of an array is ambiguous", on Magika after MatMul+Add became Gemm); without it the bias is
            # still quantized to int32 with scale input_scale * weight_scale, as in ORT before 1.20
            extra_options={"QDQDisableWeightAdjustForInt32Bias": True, **UNTYPED_TENSORS_FLOAT},
            nodes_to_exclude=[
                *exclude,
                *namesakes(model, STATIC_OPS),
                *sorted(quantized_nodes(model.graph) | narrow_weight_readers(model.graph) | not_silu(model)),
            ],
            nodes_to_quantize=list(only or []),
            **calibration.arguments(),  # type: ignore[arg-type]
        )
    )
    widen_narrow_convolutions(quantized)
    return quantized


DYNAMIC_OPS = ("MatMul", "Gemm", "Attention", "LSTM")
"""What dynamic mode quantizes: int8 weights, activations quantized per run (``LSTM`` becomes ORT's
``DynamicQuantizeLSTM``: 3.3x on a two-layer LSTM of 256 units over 50 steps at batch 1, here)."""


def dynamic(
    model: onnx.ModelProto,
    exclude: Sequence[str],
    calibration: Calibration | None,
    only: Sequence[str] | None = None,
    seven_bit: bool = False,
) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    del calibration
    return _through_file(
        lambda target: quantize_dynamic(
            GemmToMatMulAdd().apply(model).model,  # a copy, split as ORT would, but keeping a weight other nodes read
            target,
            use_external_data_format=over_protobuf_limit(model),
            op_types_to_quantize=list(DYNAMIC_OPS),
            weight_type=QuantType.QInt8,
            reduce_range=seven_bit,
            extra_options={**UNTYPED_TENSORS_FLOAT, "EnableSubgraph": True},
            nodes_to_exclude=_as_split_gemms(model, [*exclude, *namesakes(model, DYNAMIC_OPS)]),
            nodes_to_quantize=_as_split_gemms(model, only or []),
        )
    )


def _as_split_gemms(model: onnx.ModelProto, names: Sequence[str]) -> list[str]:
    """``names``, and for each Gemm among them the name its MatMul has once split (``<name>_MatMul``, by
    ``GemmToMatMulAdd`` or by ORT's dynamic quantizer, which splits a body's Gemms itself), so that a Gemm
    named as itself is excluded or alone quantized as asked."""
    gemms = {node.name for node in all_nodes(model.graph) if node.op_type == "Gemm"}
    return [alias for name in names for alias in ([name, f"{name}_MatMul"] if name in gemms else [name])]


WEIGHT_ONLY_BLOCK = 32
WEIGHT_ONLY_OPS = ("MatMul", "Gemm", "Gather")
"""What weight-only mode quantizes. ORT's MatMulNBits quantizer takes MatMuls (as ``MatMulNBits``) and
embedding lookups (``Gather`` of a constant table, as ``GatherBlockQuantized``: a recommender's or a text
encoder's table is most of its file); a Gemm (a PyTorch Linear on 2D input, or a MatMul + Add ONNXSat's
normal form fused) is split into MatMul + Add first."""


def weight_only(
    model: onnx.ModelProto,
    exclude: Sequence[str],
    calibration: Calibration | None,
    only: Sequence[str] | None = None,
    seven_bit: bool = False,
) -> onnx.ModelProto:
    del calibration, seven_bit  # 4-bit blocks: no uint8 x int8 kernel
    exclude = _as_split_gemms(model, [*exclude, *namesakes(model, WEIGHT_ONLY_OPS)])
    if only:  # ORT's list of nodes to include adds to its op types, it does not narrow them
        only = _as_split_gemms(model, only)
        weighted = (n.name for n in all_nodes(model.graph) if n.op_type in WEIGHT_ONLY_OPS and n.name not in only)
        exclude = [*exclude, *_as_split_gemms(model, list(weighted))]
    split = GemmToMatMulAdd().apply(model)  # a copy: ORT's quantizer edits what it is given
    work, ops = split.model, ("MatMul",)
    float_tables = embedding_tables(work, (onnx.TensorProto.FLOAT,))
    tables = [n.name for n in work.graph.node if n.name not in exclude and looks_up(n, float_tables)]
    if tables:
        work = _at_int4_opset(work)
        if work is None:  # the converter cannot lift the model: its tables stay in float
            work, exclude = split.model, [*exclude, *tables]
        else:
            ops = ("MatMul", "Gather")
    quantizer = _nbits_quantizer()(
        work,
        block_size=WEIGHT_ONLY_BLOCK,
        is_symmetric=True,
        accuracy_level=4,
        nodes_to_exclude=exclude,
        op_types_to_quantize=ops,
        quant_axes=(("MatMul", 0), ("Gather", 1)),  # a table's rows are looked up: blocks run along each row
    )
    with _quietly():
        quantizer.process()
    return quantizer.model.model


def embedding_tables(model: onnx.ModelProto, types: Sequence[int]) -> set[str]:
    """Names of the main graph's 2-D initializers of ``types``: the tables an embedding lookup reads."""
    return {t.name for t in model.graph.initializer if len(t.dims) == 2 and t.data_type in types}


def looks_up(node: onnx.NodeProto, tables: Collection[str]) -> bool:
    """Whether ``node`` is an embedding lookup: a Gather of rows (axis 0) of one of ``tables``."""
    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
    return node.op_type == "Gather" and node.domain in ("", "ai.onnx") and axis == 0 and node.input[0] in tables


def _at_int4_opset(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model`` at opset 21 or later, or None when ONNX's converter cannot bring it there."""
    try:
        return at_least_opset(model, INT4_OPSET)
    except Exception:  # the converter raises several types on ops it cannot lift
        return None


MODES.register(
    "static",
    QuantMode(
        "static",
        "QDQ, int8 weights per channel, uint8 activations calibrated on data",
        frozenset(STATIC_OPS) - LAYOUT_OPS,
        True,
        static,
        left_float=not_silu,
        int8_kernels=True,
    ),
)
MODES.register(
    "dynamic",
    QuantMode(
        "dynamic",
        "int8 MatMul/Gemm/LSTM weights, activations quantized per run",
        frozenset(DYNAMIC_OPS),
        False,
        dynamic,
        constant_weights_only=True,
        bodies=True,
        body_node=lambda node: node.op_type != "Gemm" or plain_gemm(node),
        int8_kernels=True,
    ),
)
MODES.register(
    "weight-only",
    QuantMode(
        "weight-only",
        "4-bit MatMul/Gemm weights and embedding tables in blocks of 32 (MatMulNBits, GatherBlockQuantized)",
        frozenset(WEIGHT_ONLY_OPS),
        False,
        weight_only,
        constant_weights_only=True,
        bodies=True,
        body_node=lambda node: node.op_type == "MatMul" or (node.op_type == "Gemm" and plain_gemm(node)),
    ),
)
