"""Is a node faster in INT8 than in FP32 on this machine? Time it both ways, alone, in ONNX Runtime.

Why per node: quantization does not always pay on a CPU. Each node timed alone by ``node_speeds`` (1
thread, a 2-core x86_64 CPU with AVX-512 VNNI, ONNX Runtime 1.31), the PP-OCRv4 detector's convolutions
ran 0.06-0.19x as fast dynamically quantized (ConvInteger) as in fp32, its 3-channel stem 0.37x as a
static QLinearConv, while its 1x1 convolutions ran 1.55-1.95x faster between quantized neighbours
(QLinearConv has fixed costs a few channels do not amortize).
The quantize pass asks this module which nodes pay and keeps the others in FP32.

How: each quantizable node becomes a one-node model (its data inputs as graph inputs of the inferred
shape, its weight and bias copied from the model, its attributes). The FP32 model is that; the INT8 model
is what ``onnxruntime.quantization`` makes of it: ``quantize_static`` (QDQ, per-channel QInt8 weights,
QUInt8 activations, calibrated on a few seeded random inputs) or ``quantize_dynamic`` (QInt8 weights).
Both run with ORT_ENABLE_ALL, so ORT fuses the QDQ pattern into its integer kernels as it would in the
real model. Static mode also times the *core* of the INT8 model: the same model with the graph input's
QuantizeLinear and the output's DequantizeLinear cut off (uint8 in, uint8 out), which is what the node
costs inside a chain of quantized nodes, where the tensors between nodes stay 8-bit.

Timing follows ``onnxsat.timing``: sessions made by ``timing_session`` (``threads`` intra-op threads,
spinning off), a few warm-up runs, then interleaved rounds in ``round_order`` until ``max_rounds`` or the
time budget, medians kept. Times are raw ``session.run`` medians: the fixed cost of one call (a few
microseconds) is in both, which pulls the ratio of a tiny node toward 1.

Nodes with equal signatures (op, attributes, input shapes and types, weight and bias shapes) are timed
once, and results are cached on disk beside the cost cache (``disk_cache``), keyed by signature, mode and
threads, at ``<cache root>/quant_speed/<machine key>.json``. Only successes are stored: a node ORT cannot
quantize or run is left out of the result and re-tried by the next process (as the cost cache does).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxsat.eqsat.costs import disk_cache
from onnxsat.eqsat.costs.microbench import MIN_IR_VERSION
from onnxsat.eqsat.costs.signature import NodeSignature, TensorInfo
from onnxsat.op_kinds import default_opset_version
from onnxsat.quantization.opsets import PER_CHANNEL_OPSET
from onnxsat.quantization.widening import widen_narrow_convolutions
from onnxsat.quantized_already import quantized_nodes
from onnxsat.timing import LEVELS, round_order, timing_session

log = logging.getLogger(__name__)

QUANTIZABLE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
"""The ops whose weight (input 1) the quantizer turns to INT8."""
MODES = ("static", "dynamic")
CACHE_VERSION = 2
"""Part of every cache key: bump it when the measurement changes meaning (quantizer settings, core model)."""
CALIBRATION_SAMPLES = 3
SEED = 0


@dataclass(frozen=True)
class NodeSpeed:
    """One node's median run time alone, FP32 vs INT8, in microseconds (ORT_ENABLE_ALL, ``threads`` threads)."""

    node: str
    """The node's name (its first output's name if it has none)."""
    op_type: str
    fp32_us: float
    int8_us: float
    """The quantized one-node model, input quantized and output dequantized inside it (static QDQ or dynamic)."""
    int8_core_us: float | None = None
    """Static mode only: the quantized node with 8-bit input and output (no boundary Q/DQ), as inside a
    chain of quantized nodes; None in dynamic mode (activations are quantized inside every node there) or
    when the quantized model had no boundary to cut."""
    signature: str = field(default="", compare=False)
    """The cache key the figures are stored under (nodes sharing it were timed once)."""

    @property
    def ratio(self) -> float:
        """fp32_us / int8_us: above 1, INT8 pays even with its input and output converted."""
        return self.fp32_us / self.int8_us

    @property
    def core_ratio(self) -> float | None:
        """fp32_us / int8_core_us: above 1, INT8 pays where its neighbours are quantized too."""
        return None if self.int8_core_us is None else self.fp32_us / self.int8_core_us


@dataclass(frozen=True)
class TimingPlan:
    """How long to time one signature: ``warmup`` untimed rounds, then ``min_rounds``..``max_rounds`` rounds
    within ``budget_s`` seconds."""

    warmup: int = 3
    min_rounds: int = 5
    max_rounds: int = 20
    budget_s: float = 0.3


PLAN = TimingPlan()

TensorFacts = tuple[int, tuple[int, ...] | None]
"""Element type, and shape with unknown dims as 1 (None when even the rank is unknown)."""


# --------------------------------------------------------------------------------------------- which


def node_key(node: onnx.NodeProto) -> str:
    """The name a node goes by in ``node_speeds`` results: its name, else its first output's name."""
    return node.name or (node.output[0] if node.output else "")


def quantizable_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Conv, ConvTranspose, MatMul and Gemm nodes (default domain) whose weight (input 1) is an fp32
    initializer: what the quantizer would quantize. A weight computed by other nodes is not: quantizing
    it would need a Q/DQ of its own on every run. Nodes in QDQ form already are not either."""
    weights = {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}
    already = quantized_nodes(model.graph)
    return [
        node
        for node in model.graph.node
        if node.op_type in QUANTIZABLE_OPS
        and node.domain in ("", "ai.onnx")
        and len(node.input) >= 2
        and node.input[1] in weights
        and node.name not in already
    ]


# --------------------------------------------------------------------------------------------- public


def node_speeds(
    model: onnx.ModelProto,
    nodes: Sequence[str] | None = None,
    *,
    mode: str = "static",
    threads: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    cache: bool = True,
) -> dict[str, NodeSpeed]:
    """For each named quantizable node (default all): its time alone in FP32 and in INT8.

    ``shapes`` gives graph input sizes; any other dynamic input dim, and any dim shape inference leaves
    unknown, is taken as 1. A node ORT cannot quantize, run, or that the quantizer leaves unchanged (as
    ``quantize_dynamic`` does ConvTranspose) is left out. ``cache=False`` neither reads nor writes
    the disk cache.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    candidates = quantizable_nodes(model)
    if nodes is not None:
        wanted = set(nodes)
        candidates = [node for node in candidates if node_key(node) in wanted]
    if not candidates:
        return {}
    inferred = _with_shapes(model, shapes or {})
    facts = _tensor_facts(inferred)
    opset = default_opset_version(model, missing=PER_CHANNEL_OPSET)
    if mode == "static":  # per-channel DequantizeLinear (its axis) needs opset 13, and ORT's quantizer no longer
        opset = max(opset, PER_CHANNEL_OPSET)  # upgrades it; Conv, ConvTranspose, MatMul, Gemm mean the same there
    weights = {t.name: t for t in model.graph.initializer}

    jobs: dict[str, list[onnx.NodeProto]] = {}
    for node in candidates:
        key = signature(node, facts, weights, opset)
        if key is None:
            log.debug("node %s skipped: an input has unknown rank or type, or it has no data input", node_key(node))
            continue
        jobs.setdefault(f"{key}|{mode}|t{threads}|v{CACHE_VERSION}", []).append(node)

    path = disk_cache.cache_root() / "quant_speed" / f"{disk_cache.machine_key()}.json"
    stored = _load_entries(path) if cache else {}
    fresh: dict[str, dict[str, Any]] = {}
    result: dict[str, NodeSpeed] = {}
    for key, members in jobs.items():
        entry = stored.get(key)
        if entry is None:
            job = one_node(members[0], facts, weights, opset)  # built only now: it copies the weights
            entry = measure(job, mode, threads) if job is not None else None
            if entry is None:
                continue
            fresh[key] = entry
        for node in members:
            result[node_key(node)] = NodeSpeed(
                node_key(node), node.op_type, entry["us"], entry["int8_us"], entry.get("int8_core_us"), key
            )
    if cache and fresh:
        disk_cache.save(path, None, fresh)
    return result


# ------------------------------------------------------------------------------------------ one node


@dataclass
class OneNode:
    """A quantizable node as a model of its own, fed seeded random inputs."""

    model: onnx.ModelProto
    samples: list[dict[str, np.ndarray]]
    """Feeds: the first is timed, all calibrate the static quantizer."""
    signature: str


def signature(
    node: onnx.NodeProto, facts: Mapping[str, TensorFacts], weights: Mapping[str, TensorProto], opset: int
) -> str | None:
    """What decides ``node``'s speed (op, opset, attributes, input shapes and types, weight and bias shapes) as
    a ``NodeSignature`` key; None when it cannot be timed alone (see ``one_node``)."""
    infos = _input_infos(node, facts, weights)
    if infos is None:
        return None
    outs = tuple(TensorInfo(None, facts.get(name, (TensorProto.FLOAT, None))[0]) for name in node.output)
    return NodeSignature(node.op_type, "", tuple(node.attribute), infos, outs, opset).key()


def one_node(
    node: onnx.NodeProto, facts: Mapping[str, TensorFacts], weights: Mapping[str, TensorProto], opset: int
) -> OneNode | None:
    """``node`` alone: initializer inputs copied, the others graph inputs (unknown dims as 1); None when an
    input's type or rank is unknown, or no input is data (ORT would fold the node away)."""
    key = signature(node, facts, weights, opset)
    if key is None:
        return None
    inputs, initializers = [], []
    for name in node.input:
        if name in weights:
            initializers.append(weights[name])
        elif name:
            elem_type, shape = facts[name]
            inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
    outputs = [
        helper.make_tensor_value_info(name, facts.get(name, (TensorProto.FLOAT, None))[0], None) for name in node.output
    ]
    copy = helper.make_node(node.op_type, list(node.input), list(node.output), name=node_key(node) or "node")
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph([copy], "node", inputs, outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(  # the lowest IR that fits: ORT may not read the newest onnx writes
        graph, opset_imports=opsets, ir_version=max(MIN_IR_VERSION, helper.find_min_ir_version_for(opsets, True))
    )
    rng = np.random.default_rng(SEED)
    samples = [{v.name: _random(v, rng) for v in inputs} for _ in range(CALIBRATION_SAMPLES)]
    return OneNode(model, samples, key)


def _input_infos(
    node: onnx.NodeProto, facts: Mapping[str, TensorFacts], weights: Mapping[str, TensorProto]
) -> tuple[TensorInfo | None, ...] | None:
    infos: list[TensorInfo | None] = []
    for name in node.input:
        if not name:
            infos.append(None)
        elif name in weights:
            infos.append(TensorInfo(tuple(weights[name].dims), weights[name].data_type, constant=True))
        else:
            elem_type, shape = facts.get(name, (0, None))
            if not elem_type or shape is None:
                return None
            infos.append(TensorInfo(shape, elem_type))
    return tuple(infos) if any(i is not None and not i.constant for i in infos) else None


def _random(value: onnx.ValueInfoProto, rng: np.random.Generator) -> np.ndarray:
    tensor = value.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
    shape = tuple(d.dim_value for d in tensor.shape.dim)
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


# ------------------------------------------------------------------------------------------ measuring


def measure(job: OneNode, mode: str, threads: int, plan: TimingPlan | None = None) -> dict[str, Any] | None:
    """A cache entry for ``job`` (``us`` the FP32 median, ``int8_us``, ``int8_core_us`` when static,
    ``rounds``); None when ORT cannot quantize it, leaves it unquantized, or cannot run either model.
    ``plan`` defaults to the module's ``PLAN``, read at call time (tests shorten it)."""
    try:
        quantized = quantize(job, mode)
    except Exception as error:  # ORT's quantizer raises anything from KeyError to RuntimeError
        log.debug("cannot quantize %s: %s", job.signature, error)
        return None
    if quantized is None:
        log.debug("the quantizer leaves %s unchanged", job.signature)
        return None
    feeds = job.samples[0]
    models: list[tuple[onnx.ModelProto, dict[str, np.ndarray]]] = [(job.model, feeds), (quantized, feeds)]
    core = boundary_cut(quantized, feeds) if mode == "static" else None
    if core is not None:
        models.append(core)
    try:
        sessions = [timing_session(model, LEVELS["all"], threads) for model, _ in models]
        times = time_interleaved([(s, f) for s, (_, f) in zip(sessions, models, strict=True)], plan or PLAN)
    except Exception as error:  # ORT raises its own exception types; all mean "cannot run"
        log.debug("cannot run %s: %s", job.signature, error)
        return None
    medians = [statistics.median(t) * 1e6 for t in times]
    entry: dict[str, Any] = {"us": medians[0], "int8_us": medians[1], "rounds": len(times[0])}
    if core is not None:
        entry["int8_core_us"] = medians[2]
    return entry


def time_interleaved(runs: Sequence[tuple[Any, Mapping[str, np.ndarray]]], plan: TimingPlan) -> list[list[float]]:
    """Seconds per round for each (session, feeds), in ``round_order``, after ``plan.warmup`` rounds; stops
    at ``plan.max_rounds``, or once ``plan.budget_s`` has passed with ``plan.min_rounds`` done."""
    runners = [lambda s=s, f=dict(f): s.run(None, f) for s, f in runs]
    for _ in range(plan.warmup):
        for run in runners:
            run()
    times: list[list[float]] = [[] for _ in runners]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()  # a collection inside one run would be charged to it
    try:
        start = time.perf_counter()
        for index in range(plan.max_rounds):
            for which in round_order(index, len(runners)):
                begin = time.perf_counter()
                runners[which]()
                times[which].append(time.perf_counter() - begin)
            if index + 1 >= plan.min_rounds and time.perf_counter() - start >= plan.budget_s:
                break
    finally:
        if was_enabled:
            gc.enable()
    return times


def quantize(job: OneNode, mode: str) -> onnx.ModelProto | None:
    """``job.model`` through ``quantize_static`` (QDQ, per-channel QInt8 weights, QUInt8 activations) or
    ``quantize_dynamic`` (QInt8 weights); None if the quantizer left the node as it was."""
    from onnxruntime.quantization import (  # imported late: it pulls in much of ORT's Python tooling
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    with tempfile.TemporaryDirectory(prefix="onnxsat-qspeed-") as folder, _quiet():
        source, target = Path(folder) / "node.onnx", Path(folder) / "node.int8.onnx"
        onnx.save(job.model, str(source))
        if mode == "static":
            quantize_static(
                str(source),
                str(target),
                _Samples(job.samples),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
        else:
            quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
        result = onnx.load(str(target))
    if mode == "static":
        widen_narrow_convolutions(result)  # as the whole model's static mode does
    before = [n.op_type for n in job.model.graph.node]
    return None if [n.op_type for n in result.graph.node] == before else result


def boundary_cut(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]] | None:
    """The QDQ model without the QuantizeLinear of its graph inputs and the DequantizeLinear of its outputs
    (8-bit in and out), with seeded random 8-bit feeds (values do not change an integer kernel's speed); None if
    it has no such boundary, or something else reads a graph input that would go."""
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    inputs = {v.name for v in graph.input}
    outputs = {v.name for v in graph.output}
    entry = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] in inputs]
    exit_ = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.output[0] in outputs]
    if not entry or not exit_:
        return None
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    dropped = {id(n) for n in entry + exit_}
    kept = [n for n in graph.node if id(n) not in dropped]
    if {n.input[0] for n in entry} & {name for n in kept for name in n.input}:
        return None
    del cut.graph.node[:]
    cut.graph.node.extend(kept)
    new_feeds = {name: value for name, value in feeds.items() if name not in {n.input[0] for n in entry}}
    del cut.graph.input[:]
    del cut.graph.output[:]
    for value in graph.input:
        quantizer = next((n for n in entry if n.input[0] == value.name), None)
        if quantizer is None:
            cut.graph.input.append(value)
            continue
        elem_type = _zero_point_type(quantizer, constants)
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        cut.graph.input.append(helper.make_tensor_value_info(quantizer.output[0], elem_type, shape))
        dtype = helper.tensor_dtype_to_np_dtype(elem_type)
        info = np.iinfo(dtype)
        new_feeds[quantizer.output[0]] = np.random.default_rng(SEED).integers(
            info.min, info.max, size=shape, endpoint=True, dtype=dtype
        )
    for value in graph.output:
        dequantizer = next((n for n in exit_ if n.output[0] == value.name), None)
        if dequantizer is None:
            cut.graph.output.append(value)
            continue
        elem_type = _zero_point_type(dequantizer, constants)
        cut.graph.output.append(helper.make_tensor_value_info(dequantizer.input[0], elem_type, None))
    return cut, new_feeds


def _zero_point_type(node: onnx.NodeProto, constants: Mapping[str, TensorProto]) -> int:
    """The 8-bit type a (De)QuantizeLinear works in: its zero point's, uint8 without one (the ONNX default)."""
    if len(node.input) > 2 and node.input[2] in constants:
        return constants[node.input[2]].data_type
    return TensorProto.UINT8


class _Samples:
    """A ``CalibrationDataReader``: the given feeds, then None (duck-typed; ORT only calls ``get_next``)."""

    def __init__(self, samples: Sequence[dict[str, np.ndarray]]) -> None:
        self._samples: Iterator[dict[str, np.ndarray]] = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._samples, None)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        sample = self.get_next()
        if sample is None:
            raise StopIteration
        return sample


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the quantizer's advice (pre-processing, opset upgrades): it logs warnings on the root logger
    for every node, which would drown the caller's output."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


# ------------------------------------------------------------------------------------------- shapes


def _with_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``model``'s graph (weights left out) with input dims from ``shapes``, other dynamic input
    dims 1, and shapes inferred."""
    copy = onnx.ModelProto()
    copy.ir_version = model.ir_version
    copy.opset_import.extend(model.opset_import)
    copy.graph.node.extend(model.graph.node)
    copy.graph.output.extend(model.graph.output)
    copy.graph.value_info.extend(model.graph.value_info)
    weights = {t.name for t in model.graph.initializer}
    for tensor in model.graph.initializer:
        if _shape_like(tensor):  # values inference reads: a Reshape's target, a Slice's ends
            copy.graph.initializer.append(tensor)
        else:  # shapes and types only: inference needs no weight values
            copy.graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    for value in model.graph.input:
        if value.name in weights:
            continue
        fixed = onnx.ValueInfoProto()
        fixed.CopyFrom(value)
        given = shapes.get(value.name)
        dims = fixed.type.tensor_type.shape.dim if fixed.type.HasField("tensor_type") else []
        if given is not None and len(given) != len(dims):
            raise ValueError(f"shapes[{value.name!r}] has {len(given)} dims, the input has {len(dims)}")
        for index, dim in enumerate(dims):
            size = int(given[index]) if given is not None else (dim.dim_value if dim.dim_value > 0 else 1)
            dim.Clear()
            dim.dim_value = size
        copy.graph.input.append(fixed)
    copy.ir_version = max(copy.ir_version, 4)
    try:
        return onnx.shape_inference.infer_shapes(copy)
    except Exception as error:  # stored shapes may contradict the fixed input sizes: infer from scratch
        log.debug("shape inference with the model's value_info failed: %s", error)
    del copy.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(copy)
    except Exception as error:  # the graph inputs' shapes still serve the nodes they feed
        log.debug("shape inference failed: %s", error)
        return copy


def _shape_like(tensor: onnx.TensorProto) -> bool:
    """A small integer initializer (a shape, axes, indices) whose values shape inference needs: without a
    tf2onnx export's Reshape target every later dim was unknown, read as 1, and each Conv was timed
    on a [1, 1, 1, 1] input."""
    integral = tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    return integral and math.prod(tensor.dims) <= SHAPE_LIKE_ELEMENTS and not tensor.external_data


SHAPE_LIKE_ELEMENTS = 64


def _tensor_facts(model: onnx.ModelProto) -> dict[str, TensorFacts]:
    """Name -> (element type, shape with unknown dims as 1, None when the rank is unknown)."""
    facts: dict[str, TensorFacts] = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        shape = (
            tuple(d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim) if tensor.HasField("shape") else None
        )
        facts[value.name] = (tensor.elem_type, shape)
    return facts


# -------------------------------------------------------------------------------------------- cache


def _load_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The stored entries whose figures are all positive numbers (``disk_cache.load`` checked the rest)."""
    entries = disk_cache.load(path)["entries"]
    return {key: entry for key, entry in entries.items() if _valid(entry)}


def _valid(entry: dict[str, Any]) -> bool:
    figures = [entry.get("us"), entry.get("int8_us")]
    if "int8_core_us" in entry:
        figures.append(entry["int8_core_us"])
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in figures)
