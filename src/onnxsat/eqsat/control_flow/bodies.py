"""If, Loop and Scan bodies rewritten with the same rules, cost model and extraction as the main graph.

Each body becomes a model of its own for the rewrite: its own inputs stay first, each outer tensor it
captures becomes one more input (typed from the enclosing graph's shape inference), or an initializer when
the enclosing graph holds it as a constant, so the rules fold it inside the body as they would outside.
The rewritten model becomes the body again: the added inputs and constants go (the body reads them from the
enclosing scope by the same names), the body's own signature is restored as it was, and outputs keep their
names and order, so the node holding the body is untouched.

A rewritten body is run side by side with the original before it replaces it, since an untaken branch never
runs when the whole model is verified. It is fed what it would see in the enclosing graph's verification run:
the captured tensors' values from that run (the enclosing graph is run once more with them as outputs), a
Loop's first iteration (counter 0, condition true, the initial carried values), a Scan's first slices; seeded
random data only where those are not known. A body that cannot run alone even so is kept rewritten, and is
verified as part of the model only (the report counts it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnxsat.errors import OnnxSatError
from onnxsat.inputs import InputSpec
from onnxsat.normal_form import normal_form
from onnxsat.proto_fields import bodies_of, free_names, subgraph_captures
from onnxsat.surgery.graph_edit import remove_where
from onnxsat.verification import Tolerance, reference_run, run_model, verify

MIN_BODY_NODES = 2
"""A body of one node has nothing to fuse or remove (each search costs a few tens of milliseconds on the
ready e-graph, plus the body's run on its own)."""

Feeds = dict[str, np.ndarray]
Rewrite = Callable[[onnx.ModelProto, Feeds], tuple[onnx.ModelProto, Counter[str]]]
"""The optimizer on one standalone model and the values its inputs take in the enclosing run (it recurses
into that model's own bodies with them); returns the result and its fusions."""


@dataclass
class BodyStats:
    """What happened to the bodies of a model, at every depth, for the report."""

    rewritten: int = 0
    verified: int = 0
    """Rewritten bodies run side by side with their original on their own."""
    unverifiable: int = 0
    """Rewritten bodies that could not run alone: verified as part of the whole model only."""
    refused: list[str] = field(default_factory=list)
    """Bodies kept as they were because their rewrite did not verify, with why."""
    skipped: int = 0
    """Bodies left alone: too small, untyped captures, or an IR version before 4."""
    nodes_before: int = 0
    nodes_after: int = 0
    fusions: Counter[str] = field(default_factory=Counter)
    """Fusions in the bodies that replaced their originals (nested bodies' included)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "rewritten": self.rewritten,
            "verified": self.verified,
            "unverifiable": self.unverifiable,
            "refused": list(self.refused),
            "skipped": self.skipped,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
        }


@dataclass
class Standalone:
    """A body as a model of its own, and what was added to make it one."""

    model: onnx.ModelProto
    original: onnx.GraphProto
    captured_inputs: list[str]
    captured_constants: list[str]


def rewrite_bodies(
    model: onnx.ModelProto,
    typed: onnx.ModelProto | None,
    rewrite: Rewrite,
    stats: BodyStats,
    tolerance: Tolerance,
    feeds: Feeds,
    base_dir: Path | None = None,
    timeout: float = 60.0,
) -> onnx.ModelProto:
    """``model`` with the bodies of its main graph's nodes rewritten (a copy when any changed).

    ``feeds`` are the values of ``model``'s inputs in the verification run. ``rewrite`` optimizes a
    standalone model and handles the bodies nested in it, so every depth is reached.
    """
    if model.ir_version < 4 or not any(True for node in model.graph.node for _ in bodies_of(node)):
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    types = _scope_types(typed or model)
    constants = _constants(result.graph)
    values = _enclosing_values(model, feeds, types, base_dir, timeout)
    for node in result.graph.node:
        for body in bodies_of(node):
            small = len(body.node) < MIN_BODY_NODES and not any(True for n in body.node for _ in bodies_of(n))
            standalone = None if small else make_standalone(body, node, result, types, constants)
            if standalone is None:  # too small (a lone Loop still has its own body to rewrite), or untyped
                stats.skipped += 1
                continue
            body_feeds = _body_feeds(standalone, node, values)
            lifted, _ = normal_form(standalone.model)  # a body's Constant nodes become initializers to fold
            try:
                rewritten, fusions = rewrite(lifted, body_feeds)
            except MemoryError:
                raise
            except Exception as error:  # a body the optimizer cannot take stays as it was; the model still can
                stats.refused.append(f"{body.name or '(unnamed body)'}: {type(error).__name__}: {error}"[:200])
                continue
            checked = _checked(standalone, rewritten, body_feeds, stats, tolerance, base_dir, timeout)
            if checked is None:
                continue
            body.CopyFrom(restore(checked, standalone))
            _import_opsets(result, checked)
            stats.rewritten += 1
            stats.fusions.update(fusions)
    return result


def _checked(
    standalone: Standalone,
    rewritten: onnx.ModelProto,
    feeds: Feeds,
    stats: BodyStats,
    tolerance: Tolerance,
    base_dir: Path | None,
    timeout: float,
) -> onnx.ModelProto | None:
    """``rewritten`` when it computes what the body did on ``feeds`` (the values it sees in the enclosing run,
    seeded random data for the rest), or when the body cannot run alone on them; else None."""
    original = standalone.model
    try:
        reference = reference_run(original, InputSpec(given=feeds), base_dir=base_dir, timeout=timeout)
    except (OnnxSatError, ValueError, TypeError):  # an untaken branch fed the taken one's sizes, say
        stats.unverifiable += 1
        return rewritten
    result = verify(
        original,
        rewritten,
        tolerance=tolerance,
        reference=reference,
        base_dir=base_dir,
        timeout=timeout,
        checked=False,
        blind_spots=False,  # the body ran on the values the enclosing run gave it, not random ones
    )
    if not result.ok:
        reason = result.error or "outputs differ"
        stats.refused.append(f"{standalone.original.name or '(unnamed body)'}: {reason}"[:200])
        return None
    stats.verified += 1
    return rewritten


def make_standalone(
    body: onnx.GraphProto,
    node: onnx.NodeProto,
    enclosing: onnx.ModelProto,
    types: dict[str, onnx.TypeProto],
    constants: dict[str, onnx.TensorProto],
) -> Standalone | None:
    """``body`` of ``node`` as a model of its own, or None when a captured tensor's type is unknown."""
    model = onnx.ModelProto()
    for name in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(model, name, getattr(enclosing, name))
    model.opset_import.extend(enclosing.opset_import)
    model.functions.extend(enclosing.functions)
    model.graph.CopyFrom(body)
    _drop_untyped_value_info(model.graph)
    if not _type_formal_inputs(model.graph, node, types):
        return None
    captured_inputs, captured_constants = [], []
    for name in free_names(body):
        if name in constants:
            model.graph.initializer.append(constants[name])
            captured_constants.append(name)
        elif name in types:
            model.graph.input.append(onnx.helper.make_value_info(name, types[name]))
            captured_inputs.append(name)
        else:
            return None
    return Standalone(model, body, captured_inputs, captured_constants)


def restore(rewritten: onnx.ModelProto, standalone: Standalone) -> onnx.GraphProto:
    """The body again: captured names read from the enclosing scope, the original signature and name."""
    graph = onnx.GraphProto()
    graph.CopyFrom(rewritten.graph)
    added = set(standalone.captured_inputs)
    formal = list(standalone.original.input)
    kept_inputs = [value for value in graph.input if value.name not in added]
    del graph.input[:]
    graph.input.extend(formal if [v.name for v in kept_inputs] == [v.name for v in formal] else kept_inputs)
    constants = set(standalone.captured_constants)
    for index in reversed(range(len(graph.initializer))):
        if graph.initializer[index].name in constants:
            del graph.initializer[index]
    graph.name = standalone.original.name
    graph.doc_string = standalone.original.doc_string
    return graph


def _enclosing_values(
    model: onnx.ModelProto, feeds: Feeds, types: dict[str, onnx.TypeProto], base_dir: Path | None, timeout: float
) -> Feeds:
    """The values the bodies' captures and the Loop and Scan inputs take when ``model`` runs on ``feeds``.

    Empty when the model cannot run on them (its bodies then get seeded random data).
    """
    inputs = {value.name for value in model.graph.input}
    constants = {tensor.name for tensor in model.graph.initializer} - inputs
    wanted: dict[str, None] = {}
    for node in model.graph.node:
        if any(True for _ in bodies_of(node)):
            for name in [*node.input, *subgraph_captures(node)]:
                if name and name not in inputs and name not in constants:
                    wanted.setdefault(name, None)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {value.name for value in probe.graph.output}
    for name in wanted:
        if name not in outputs:
            typed = types.get(name)
            value = onnx.helper.make_value_info(name, typed) if typed is not None else onnx.ValueInfoProto(name=name)
            probe.graph.output.append(value)
    try:
        ran = run_model(probe, {k: v for k, v in feeds.items() if k in inputs}, "enclosing graph", base_dir, timeout)
    except OnnxSatError:
        return {}
    values = {value.name: array for value, array in zip(probe.graph.output, ran, strict=True)}
    return {**{k: v for k, v in feeds.items() if k in inputs}, **values}


def _body_feeds(standalone: Standalone, node: onnx.NodeProto, values: Feeds) -> Feeds:
    """The standalone body's inputs as they are in the enclosing run (a Loop's or Scan's first step)."""
    feeds = {name: values[name] for name in standalone.captured_inputs if name in values}
    formal = [value.name for value in standalone.original.input]
    outer = [values.get(name) if name else None for name in node.input]
    first: list[np.ndarray | None] = []
    if node.op_type == "Loop" and len(formal) >= 2:
        first = [np.array(0, dtype=np.int64), np.array(True), *outer[2:]]
    elif node.op_type == "Scan":
        scanned = next((int(a.i) for a in node.attribute if a.name == "num_scan_inputs"), 0)
        axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"), [0] * scanned)
        states = len(outer) - scanned
        first = list(outer[:states])
        for array, axis in zip(outer[states:], axes, strict=False):
            first.append(None if array is None or array.shape[axis] == 0 else np.take(array, 0, axis=axis))
    for name, array in zip(formal, first, strict=False):
        if array is not None:
            feeds[name] = array
    return feeds


def _drop_untyped_value_info(graph: onnx.GraphProto) -> None:
    """Exporters leave value infos without a type in bodies; the checker refuses them in a model's graph."""
    remove_where(graph.value_info, lambda value: value.type.WhichOneof("value") is None)
    for node in graph.node:
        for body in bodies_of(node):
            _drop_untyped_value_info(body)


def _import_opsets(model: onnx.ModelProto, rewritten: onnx.ModelProto) -> None:
    """Import the domains a rewritten body now uses (fused ``com.microsoft`` ops) into the whole model."""
    imported = {entry.domain or "ai.onnx" for entry in model.opset_import}
    for entry in rewritten.opset_import:
        if (entry.domain or "ai.onnx") not in imported:
            model.opset_import.append(entry)
            imported.add(entry.domain or "ai.onnx")


def _type_formal_inputs(graph: onnx.GraphProto, node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> bool:
    """Give each body input without an element type the type its node feeds it; False if one stays unknown.

    Exporters may leave a Loop's counter and carried values untyped; the standalone model needs types to
    be checked, inferred and run.
    """
    outer = [types.get(name) if name else None for name in node.input]
    for index, value in enumerate(graph.input):
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            continue
        known = _fed_type(node, index, outer)
        if known is None:
            return False
        value.type.CopyFrom(known)
    return True


def _fed_type(node: onnx.NodeProto, index: int, outer: list[onnx.TypeProto | None]) -> onnx.TypeProto | None:
    if node.op_type == "Loop":
        if index == 0:
            return onnx.helper.make_tensor_type_proto(onnx.TensorProto.INT64, [])
        if index == 1:
            return onnx.helper.make_tensor_type_proto(onnx.TensorProto.BOOL, [])
        return outer[index] if index < len(outer) else None
    fed = outer[index] if node.op_type == "Scan" and index < len(outer) else None
    if fed is None or not fed.HasField("tensor_type"):
        return None
    scanned = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
    if index < len(outer) - scanned:
        return fed  # a state: as fed
    return onnx.helper.make_tensor_type_proto(fed.tensor_type.elem_type, None)  # a slice: one axis fewer


def _scope_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every tensor's type the (shape-inferred) model declares, in the main graph and in its bodies."""
    types: dict[str, onnx.TypeProto] = {}

    def visit(graph: onnx.GraphProto) -> None:
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.WhichOneof("value") is not None:
                types.setdefault(value.name, value.type)
        for tensor in graph.initializer:
            types.setdefault(tensor.name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
        for node in graph.node:
            for body in bodies_of(node):
                visit(body)

    visit(model.graph)
    return types


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The graph's initializers no feed can override: a body may fold them."""
    inputs = {value.name for value in graph.input}
    return {tensor.name: tensor for tensor in graph.initializer if tensor.name not in inputs}


def body_nodes(graph: onnx.GraphProto) -> int:
    """Nodes inside the bodies of ``graph``'s nodes, at every depth."""
    return sum(len(body.node) + body_nodes(body) for node in graph.node for body in bodies_of(node))
