"""Divide and conquer, and the proof afterwards: split a model at named tensors, merge the parts back,
and compare two models output by output (the vendor guide's workflow for ViT-sized rewrites).

A split is refused unless it cuts the model completely (every output reachable from the graph inputs
only through the cut), since only then do head and tail merge back into the same computation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.compose
import onnx.utils

from onnxsat.errors import InvalidModelError
from onnxsat.inputs import random_inputs
from onnxsat.surgery.graph_edit import (
    clear_shapes,
    copy_model,
    producers,
    remove_where,
    rename_tensor,
    unique_name,
    used_names,
)
from onnxsat.surgery.surgeon import SurgeryError
from onnxsat.verification import Tolerance, compare_outputs, run_model


def fed_inputs(graph: onnx.GraphProto) -> list[str]:
    """The graph inputs a caller feeds (old-IR models also list their initializers as inputs)."""
    constants = {tensor.name for tensor in graph.initializer}
    return [item.name for item in graph.input if item.name not in constants]


def split_model(model: onnx.ModelProto, at: Sequence[str]) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(head, tail): head maps the graph inputs to the tensors ``at``, tail maps those to the outputs."""
    graph = model.graph
    if isinstance(at, str) or not at:
        raise SurgeryError("split needs a list of one or more tensor names to cut at")
    made = producers(graph)
    constants = {tensor.name for tensor in graph.initializer}
    for name in at:
        if name in constants:
            raise SurgeryError(f"cannot split at {name!r}: it is an initializer; cut at a tensor a node computes")
        if name in fed_inputs(graph):
            raise SurgeryError(f"cannot split at {name!r}: it is a graph input; cut at a tensor a node computes")
        if name not in made:
            raise SurgeryError(f"cannot split at {name!r}: the model has no tensor of that name")
    _check_complete_cut(graph, set(at))
    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError as error:
        raise InvalidModelError(f"shape inference fails, so the cut tensors have no types: {error}") from None
    known = {item.name for item in [*typed.graph.value_info, *typed.graph.output] if item.type.tensor_type.elem_type}
    untyped = [name for name in at if name not in known]
    if untyped:
        raise SurgeryError(f"cannot split at {untyped[0]!r}: shape inference cannot tell its element type")
    extractor = onnx.utils.Extractor(typed)
    head = extractor.extract_model(fed_inputs(graph), list(at))
    tail = extractor.extract_model(list(at), [item.name for item in graph.output])
    head.graph.name, tail.graph.name = f"{graph.name}_head", f"{graph.name}_tail"
    return head, tail


def _check_complete_cut(graph: onnx.GraphProto, cut: set[str]) -> None:
    """Refuse a cut some path from a graph input to an output goes around: the tail would need that input."""
    made = producers(graph)
    inputs = set(fed_inputs(graph))
    seen: set[str] = set()
    for output in graph.output:
        pending = [output.name]
        while pending:
            name = pending.pop()
            if name in cut or name in seen:
                continue
            seen.add(name)
            if name in inputs:
                raise SurgeryError(
                    f"cannot split at {sorted(cut)}: output {output.name!r} also depends on graph input {name!r} "
                    "by a path that bypasses the cut; add a tensor on that path to the cut"
                )
            node = made.get(name)
            if node is not None:
                pending.extend(item for item in node.input if item)


def merge_models(head: onnx.ModelProto, tail: onnx.ModelProto) -> onnx.ModelProto:
    """One model: ``head`` feeding ``tail`` wherever a head output and a tail input share a name.

    ``onnx.compose.merge_models`` does the joining. It refuses any name both parts use, so stale
    value_info (both parts describe the seam) is cleared first, and a constant both parts read (a
    Reshape shape on each side) is renamed in the tail for the merge and joined back afterwards.
    """
    tail_inputs = set(fed_inputs(tail.graph))
    links = [(item.name, item.name) for item in head.graph.output if item.name in tail_inputs]
    if not links:
        raise SurgeryError("cannot merge: no output of the head is an input of the tail")
    head, tail = copy_model(head), copy_model(tail)
    clear_shapes(head)
    clear_shapes(tail)
    head_constants = {tensor.name: tensor for tensor in head.graph.initializer}
    taken = used_names(head.graph) | used_names(tail.graph)
    shared = {}
    for tensor in list(tail.graph.initializer):
        twin = head_constants.get(tensor.name)
        if twin is None:
            continue
        if twin.SerializeToString() != tensor.SerializeToString():
            raise SurgeryError(
                f"cannot merge: head and tail both have an initializer {tensor.name!r}, with different values"
            )
        shared[tensor.name] = unique_name(tail.graph, f"{tensor.name}_tail", taken)
        rename_tensor(tail.graph, tensor.name, shared[tensor.name])
    try:
        stem = head.graph.name.removesuffix("_head")
        name = stem if tail.graph.name == f"{stem}_tail" else None  # a split's parts get the model's name back
        merged = onnx.compose.merge_models(head, tail, io_map=links, name=name)
    except (ValueError, onnx.checker.ValidationError) as error:
        raise SurgeryError(f"cannot merge: {str(error).splitlines()[0]}") from None
    for original, renamed in shared.items():
        remove_where(merged.graph.initializer, lambda tensor, name=renamed: tensor.name == name)
        rename_tensor(merged.graph, renamed, original)
    opsets = {entry.domain: entry.version for entry in merged.opset_import}
    del merged.opset_import[:]
    merged.opset_import.extend(onnx.helper.make_opsetid(domain, version) for domain, version in opsets.items())
    return merged


@dataclass(frozen=True)
class OutputDifference:
    """One output of a comparison: reference minus edited, as the vendor guide prints it."""

    name: str
    shape: tuple[int, ...]
    min_diff: float
    max_diff: float
    max_abs_diff: float
    max_rel_diff: float
    note: str = ""


def compare_models(
    reference: onnx.ModelProto,
    edited: onnx.ModelProto,
    inputs: Mapping[str, np.ndarray] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> list[OutputDifference]:
    """Run both models on ``inputs`` (or seeded random ones) and report each reference output's difference.

    Outputs are matched by name. An edited output with the same number of elements but another shape
    (a [1, K, 1, 1] Conv result for a [1, K] Gemm result) is reshaped first, as the guide does, and
    the row says so.
    """
    feeds = dict(inputs) if inputs is not None else random_inputs(reference, shapes, seed)
    for model in (reference, edited):
        missing = [name for name in fed_inputs(model.graph) if name not in feeds]
        if missing:
            raise SurgeryError(f"cannot compare: no data for input {missing[0]!r}; pass it in inputs")
    expected = run_model(reference, {n: feeds[n] for n in fed_inputs(reference.graph)}, "reference model")
    results = run_model(edited, {n: feeds[n] for n in fed_inputs(edited.graph)}, "edited model")
    actual = dict(zip([item.name for item in edited.graph.output], results, strict=True))
    rows = []
    for output, want in zip(reference.graph.output, expected, strict=True):
        if output.name not in actual:
            raise SurgeryError(f"cannot compare: the edited model has no output {output.name!r}")
        got, note = np.asarray(actual[output.name]), ""
        if got.shape != want.shape and got.size == want.size:
            note = f"reshaped from {got.shape}"
            got = got.reshape(want.shape)
        (comparison,) = compare_outputs([output.name], [want], [got], Tolerance())
        low = high = float("nan")
        if got.shape == want.shape and want.dtype.kind in "fiu":
            with np.errstate(invalid="ignore"):
                diff = want.astype(np.float64) - got.astype(np.float64)
            if diff.size and not np.isnan(diff).all():
                low, high = float(np.nanmin(diff)), float(np.nanmax(diff))
        rows.append(
            OutputDifference(
                output.name,
                tuple(want.shape),
                low,
                high,
                comparison.max_abs_diff,
                comparison.max_rel_diff,
                "; ".join(filter(None, [note, comparison.note])),
            )
        )
    return rows


def format_differences(rows: Sequence[OutputDifference]) -> str:
    """A plain-text table of ``rows``, one output a line."""
    header = f"{'output':<24} {'shape':<20} {'min diff':>12} {'max diff':>12} {'max |diff|':>12}  note"
    lines = [header]
    for row in rows:
        lines.append(
            f"{row.name:<24} {row.shape!s:<20} {row.min_diff:>12.3g} {row.max_diff:>12.3g} "
            f"{row.max_abs_diff:>12.3g}  {row.note}".rstrip()
        )
    return "\n".join(lines)
