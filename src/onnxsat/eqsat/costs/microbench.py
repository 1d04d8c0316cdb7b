"""Time one node alone in ONNX Runtime: the measurement behind the ``measured`` cost model.

Why a one-node model: the extractor asks about nodes that do not exist in any model yet, and a node's
cost depends on its signature only, so a model holding just that node, with its constant inputs as
initializers (ORT pre-packs weights exactly as it would in the real model), times what matters.

The session mirrors how ONNXSat measures models elsewhere: CPU provider, ORT_ENABLE_ALL, one intra-op
thread, spinning off (so the timed thread is the only busy one), ORT logging silenced. A few warm-up
runs absorb first-run allocation; then runs are timed until ``max_runs`` are done, or ``budget_s`` has
passed with at least ``min_runs``, and the median is kept (robust to a stray slow run).

Inputs are seeded random values: floats uniform in [0.5, 1.5) (positive and away from 0, so Log, Sqrt,
Div and Pow stay on their normal fast path instead of producing NaN or inf), booleans random, integers
zero (always a valid index or axis), except shape-like inputs (Reshape's shape, Expand's shape, Tile's
repeats, Resize's scales or sizes, ...), which are derived from the static output shape so the node does
the work it would do in the model.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from onnxsat.eqsat.costs.signature import NodeSignature, TensorInfo
from onnxsat.eqsat.costs.tensors import elem_bytes

MS_DOMAIN = "com.microsoft"
DEFAULT_ONNX_OPSET = 17
"""ai.onnx opset imported beside a node of another domain (com.microsoft ops may be decomposed into it)."""

MIN_IR_VERSION = 9
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
SEED = 0


class Unbenchmarkable(Exception):
    """This signature cannot be timed; the reason says why (the caller falls back to an estimate)."""


@dataclass(frozen=True)
class Timing:
    median_us: float
    runs: int


@dataclass(frozen=True)
class TimingPlan:
    """How long to time one signature: ``warmup`` untimed runs, then ``min_runs``..``max_runs`` within ``budget_s``."""

    warmup: int = 3
    min_runs: int = 5
    max_runs: int = 20
    budget_s: float = 0.05


def check_benchmarkable(node: NodeSignature, max_bytes: float) -> None:
    """Raise ``Unbenchmarkable`` for what cannot or should not run: subgraphs, unknown shapes, huge tensors.

    ``node`` must already have its symbolic dims resolved to numbers.
    """
    if node.op_type in SUBGRAPH_OPS or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attributes
    ):
        raise Unbenchmarkable(f"{node.op_type} has a subgraph")
    total = 0.0
    for index, info in enumerate(node.inputs):
        if info is None:
            continue
        if info.shape is None:
            raise Unbenchmarkable(f"input {index} has unknown rank")
        if not info.elem_type:
            raise Unbenchmarkable(f"input {index} has an unknown element type")
        total += math.prod(info.shape) * elem_bytes(info.elem_type)  # type: ignore[arg-type]
    for info in node.outputs:
        if info.shape is not None and all(isinstance(d, int) for d in info.shape):
            total += math.prod(info.shape) * elem_bytes(info.elem_type)  # type: ignore[arg-type]
    if total > max_bytes:
        raise Unbenchmarkable(f"its tensors hold {total / 2**20:.0f} MiB, over the {max_bytes / 2**20:.0f} MiB bound")


def build_model(node: NodeSignature) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model holding only ``node`` (dims resolved), and feeds for its non-constant inputs."""
    rng = np.random.default_rng(SEED)
    input_names: list[str] = []
    graph_inputs, initializers, feeds = [], [], {}
    for index, info in enumerate(node.inputs):
        if info is None:
            input_names.append("")
            continue
        shape = tuple(int(d) for d in info.shape or ())  # type: ignore[arg-type]
        elem_type = int(info.elem_type or 0)
        values = _values(node, index, info, shape, rng)
        if info.constant:
            name = f"w{index}"
            initializers.append(numpy_helper.from_array(values, name))
        else:
            name = f"x{index}"
            graph_inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
            feeds[name] = values
        input_names.append(name)
    output_names = [f"y{index}" for index in range(len(node.outputs))]
    graph_outputs = [_output_info(name, info) for name, info in zip(output_names, node.outputs, strict=True)]
    proto = helper.make_node(node.op_type, input_names, output_names, domain=node.domain or None)
    proto.attribute.extend(node.attributes)
    graph = helper.make_graph([proto], "node", graph_inputs, graph_outputs, initializer=initializers)
    opsets = _opset_imports(node)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=_ir_version(opsets))
    return model, feeds


def _output_info(name: str, info: TensorInfo) -> onnx.ValueInfoProto:
    """The output's type, and its shape when static; ORT infers whatever is left out."""
    if not info.elem_type:
        return onnx.ValueInfoProto(name=name)
    static = info.shape is not None and all(isinstance(d, int) and d >= 0 for d in info.shape)
    return helper.make_tensor_value_info(name, info.elem_type, info.shape if static else None)


def _opset_imports(node: NodeSignature) -> list[onnx.OperatorSetIdProto]:
    if node.domain in ("", "ai.onnx"):
        return [helper.make_opsetid("", node.opset)]
    version = 1 if node.domain == MS_DOMAIN else node.opset  # com.microsoft has only ever had version 1
    return [helper.make_opsetid("", DEFAULT_ONNX_OPSET), helper.make_opsetid(node.domain, version)]


def _ir_version(opsets: list[onnx.OperatorSetIdProto]) -> int:
    try:
        needed = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    except ValueError:  # an opset newer than this onnx knows: let ORT judge the newest IR we know
        needed = onnx.IR_VERSION
    return max(MIN_IR_VERSION, needed)


def _values(node: NodeSignature, index: int, info: TensorInfo, shape: tuple[int, ...], rng: np.random.Generator):
    dtype = helper.tensor_dtype_to_np_dtype(int(info.elem_type or 0))
    shaped = _shape_input(node, index, shape)
    if shaped is not None:
        return shaped.astype(dtype)
    if dtype == np.dtype(object):
        return np.full(shape, "x", dtype=object)
    if dtype == np.dtype(bool):
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return np.zeros(shape, dtype=dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype)


_SHAPE_INPUTS = {
    ("Reshape", 1): "shape",
    ("Expand", 1): "shape",
    ("ConstantOfShape", 0): "shape",
    ("Resize", 3): "shape",
    ("Tile", 1): "repeats",
    ("Resize", 2): "scales",
    ("Upsample", 1): "scales",
}
"""Inputs whose values decide the output shape, and how to derive them from the static output shape."""


def _shape_input(node: NodeSignature, index: int, shape: tuple[int, ...]) -> np.ndarray | None:
    """The values a shape-like input must hold for the node to produce its static output shape, if known."""
    role = _SHAPE_INPUTS.get((node.op_type, index))
    if role is None or len(shape) != 1 or not node.outputs:
        return None
    out = node.outputs[0].shape
    if out is None or len(out) != shape[0] or not all(isinstance(d, int) for d in out):
        return None
    if role == "shape":
        return np.array(out, dtype=np.int64)
    data = node.inputs[0].shape if node.inputs[0] is not None else None
    if data is None or len(data) != len(out) or not all(isinstance(d, int) and d > 0 for d in data):
        return None
    if role == "repeats":
        return np.array([o // d for o, d in zip(out, data, strict=True)], dtype=np.int64)  # type: ignore[operator]
    return np.array([o / d for o, d in zip(out, data, strict=True)], dtype=np.float64)  # type: ignore[operator]


def make_session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def time_session(session: ort.InferenceSession, feeds: dict[str, np.ndarray], plan: TimingPlan) -> Timing:
    """Median wall time of ``session.run`` (see the module docstring for the stopping rule)."""
    for _ in range(plan.warmup):
        session.run(None, feeds)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max(plan.max_runs, 1):
        begin = time.perf_counter()
        session.run(None, feeds)
        end = time.perf_counter()
        times.append(end - begin)
        if len(times) >= plan.min_runs and end - start >= plan.budget_s:
            break
    return Timing(statistics.median(times) * 1e6, len(times))


def benchmark(node: NodeSignature, plan: TimingPlan) -> Timing:
    """Time ``node`` (dims resolved) alone; ``Unbenchmarkable`` if it cannot be built, loaded or run."""
    try:
        model, feeds = build_model(node)
    except Exception as error:  # onnx/numpy reject a dtype or attribute: any failure means "estimate"
        raise Unbenchmarkable(f"cannot build a model for it: {_one_line(error)}") from None
    try:
        session = make_session(model)
    except Exception as error:  # ORT raises its own exception types; all mean the same here
        raise Unbenchmarkable(f"ONNX Runtime rejects it: {_one_line(error)}") from None
    try:
        return time_session(session, feeds, plan)
    except Exception as error:
        raise Unbenchmarkable(f"ONNX Runtime cannot run it: {_one_line(error)}") from None


def baseline_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The cheapest possible run: Relu of one float. Its time is the fixed cost of one ``session.run`` call."""
    one = TensorInfo((1,), onnx.TensorProto.FLOAT)
    return build_model(NodeSignature("Relu", "", (), (one,), (one,), DEFAULT_ONNX_OPSET))


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(error).__name__
