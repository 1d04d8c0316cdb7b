"""The static shape and element type of every tensor a profile counts, at input shapes the user fixes.

A profile is a count per inference, so every tensor needs a concrete shape. They come from:

1. The graph inputs, fixed first: a declared static shape as it is, a dynamic one from
   ``--input-shape``. An input with dynamic dims and no ``--input-shape`` stops the profile with an
   error that names it and suggests a shape (its dynamic dims set to 1), rather than guessing sizes
   that would silently scale every figure.
2. ONNX shape inference (with data propagation, so Reshape targets computed from shapes resolve) on
   a copy in which ONNX Runtime's ``com.microsoft`` ops with a standard twin are replaced by the twin:
   ``FusedConv`` by ``Conv``, ``FusedGemm`` by ``Gemm``, ``FusedMatMul`` without transposes by
   ``MatMul``. A fused activation never changes a shape, so the twin's inferred output is the fused
   op's output, and inference carries on past it instead of stopping at an op it has no schema for.
   Dropout's mask, which inference leaves out before opset 10, is filled in by rule as well.
   This is ORT-independent and costs nothing.
3. Only if tensors are still unknown after that (another contrib op, a data-dependent shape such as
   NonZero's): one ONNX Runtime run, optimizations off, with seeded random inputs
   (:func:`onnxsat.inputs.random_inputs`) on a copy exposing those tensors as outputs
   (:func:`onnxsat.verification.with_outputs`); their shapes and types are read off the arrays. A
   data-dependent shape is then the one those inputs produce. ``Shapes.method`` says which of the
   two methods the profile used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from onnxsat.errors import OnnxSatError, SettingsError
from onnxsat.external_data import inference_view
from onnxsat.inputs import (
    InputsLike,
    InputSpec,
    check_declared_shape,
    declared_dims,
    dim_expression,
    dynamic_size,
    fixed_dim,
    named_sizes,
    random_inputs,
)
from onnxsat.op_kinds import default_opset_version
from onnxsat.proto_fields import all_graphs
from onnxsat.verification import run_model, with_outputs

MICROSOFT = "com.microsoft"

_ACTIVATION_ATTRIBUTES = ("activation", "activation_params", "activation_alpha", "activation_beta", "activation_gamma")
# com.microsoft op -> (standard op whose output has the same shape, how many leading inputs it takes)
_STANDARD_TWINS = {"FusedConv": ("Conv", 3), "FusedGemm": ("Gemm", 3), "FusedMatMul": ("MatMul", 2)}

INFERENCE = "onnx shape inference"
ORT_RUN = "onnx shape inference, then one onnxruntime run for the rest"


class ShapesUnknownError(SettingsError):
    """Some tensor's shape stays unknown (and ONNX Runtime was not allowed to, or could not, tell it)."""


@dataclass(frozen=True)
class TensorFacts:
    """A tensor's static shape and ONNX element type (``onnx.TensorProto.FLOAT``, ...)."""

    shape: tuple[int, ...]
    elem_type: int


@dataclass(frozen=True)
class Shapes:
    """Facts about every value a node reads or writes, and the input shapes and method they came from."""

    tensors: dict[str, TensorFacts]
    inputs: dict[str, list[int]]
    method: str


def fixed_input_shapes(model: onnx.ModelProto, given: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """The shape of every graph input that is not an initializer: declared if static, else from ``given``.

    Raises a SettingsError naming every input whose dims are dynamic and not given, with a ready
    ``--input-shape`` for each; and one for a given shape that names no input or contradicts the
    declared rank or a fixed dim.
    """
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    unknown = sorted(set(given) - {v.name for v in inputs})
    if unknown:
        names = ", ".join(v.name for v in inputs) or "none"
        raise SettingsError(
            f"--input-shape names inputs the model does not have: {', '.join(unknown)} (inputs: {names})"
        )
    shapes: dict[str, list[int]] = {}
    missing: list[str] = []
    named = named_sizes(model, InputSpec(shapes={name: list(dims) for name, dims in given.items()}))
    for value in inputs:
        declared = declared_dims(value)
        if value.name in given:
            shapes[value.name] = list(given[value.name])
            check_declared_shape(value.name, shapes[value.name], declared)
        elif declared is not None and all(_known(d, named) is not None for d in declared):
            shapes[value.name] = [_known(d, named) for d in declared]  # type: ignore[misc]
        else:
            missing.append(_suggestion(value.name, declared))
    if missing:
        raise ShapesUnknownError(
            "the shapes cannot be inferred without the input shapes; give them with "
            + " ".join(f"--input-shape {m}" for m in missing)
            + " (dynamic dims shown as 1)"
        )
    return shapes


def _known(dim: onnx.TensorShapeProto.Dimension, named: Mapping[str, int]) -> int | None:
    """A dim's size: fixed, or named by a given shape, or a sum of such names; None otherwise."""
    if fixed_dim(dim) is not None:
        return dim.dim_value
    if dim.dim_param in named:
        return named[dim.dim_param]
    return dim_expression(dim.dim_param, named, unnamed=None) if dim.dim_param else None


def _suggestion(name: str, declared: list[onnx.TensorShapeProto.Dimension] | None) -> str:
    """``name:1,3,224,224`` (dynamic dims as 1, a sum of them as that sum: optimum's attention mask spans
    ``past_sequence_length + sequence_length``), or ``name:D1,D2,...`` when not even the rank is declared."""
    if declared is None:
        return f"{name}:D1,D2,..."
    sizes = [d.dim_value if fixed_dim(d) is not None else dynamic_size(d, {}) for d in declared]
    return f"{name}:" + ",".join(map(str, sizes))


def resolve_shapes(
    model: onnx.ModelProto,
    given: InputsLike = None,
    *,
    allow_onnxruntime: bool = True,
    base_dir: Path | None = None,
) -> Shapes:
    """Facts for the inputs, initializers and node outputs of ``model``'s main graph (see the module doc).

    ``allow_onnxruntime=False`` raises :class:`ShapesUnknownError` instead of running the model when
    shape inference leaves gaps. ``base_dir`` is where the model's external data lives, for that run.
    """
    spec = InputSpec.of(given)
    spec.check(model)
    inputs = fixed_input_shapes(model, spec.dims())
    fixed = _with_input_shapes(model, inputs)
    facts = _inferred(_with_standard_twins(fixed))
    for tensor in model.graph.initializer:
        facts[tensor.name] = TensorFacts(tuple(tensor.dims), tensor.data_type)
    for sparse in model.graph.sparse_initializer:
        facts[sparse.values.name] = TensorFacts(tuple(sparse.dims), sparse.values.data_type)
    _add_dropout_masks(model, facts)
    wanted = [name for node in model.graph.node for name in node.output if name]
    missing = [name for name in wanted if name not in facts]
    branches = [(index, branch) for index, branch in _if_branches(model) if _unknown_in(branch, facts)]
    if not missing and not branches:
        return Shapes(facts, inputs, INFERENCE)
    if not allow_onnxruntime:
        if not missing:  # counting a branch's nodes is best effort; the main graph's shapes are all known
            return Shapes(facts, inputs, INFERENCE)
        raise ShapesUnknownError(f"shape inference cannot tell the shape of {_listed(missing)}")

    feeds = random_inputs(fixed, spec)
    if missing:
        _read_off(with_outputs(fixed, missing), missing, feeds, facts, base_dir)
    for index, branch in branches:  # the branch's nodes in the If's place, so a run can expose their outputs
        try:
            _read_off(_with_branch_inlined(fixed, index, branch), _unknown_in(branch, facts), feeds, facts, base_dir)
        except OnnxSatError:  # a branch these inputs cannot run: its nodes stay unsized, and the profile says so
            continue
    return Shapes(facts, inputs, ORT_RUN)


def _read_off(
    model: onnx.ModelProto,
    names: list[str],
    feeds: dict[str, np.ndarray],
    facts: dict[str, TensorFacts],
    base_dir: Path | None,
) -> None:
    """One ONNX Runtime run of ``model`` exposing ``names``; their shapes and types go into ``facts``."""
    exposed = with_outputs(model, names)
    outputs = [o.name for o in exposed.graph.output]
    arrays = run_model(exposed, feeds, "model to learn its shapes", base_dir=base_dir)
    for name, array in zip(outputs, arrays, strict=True):
        if name in names and isinstance(array, np.ndarray):  # not a sequence, map or optional: no tensor facts
            facts[name] = TensorFacts(
                tuple(int(d) for d in array.shape), onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
            )


def _if_branches(model: onnx.ModelProto) -> list[tuple[int, onnx.GraphProto]]:
    """(index, branch) of every main-graph If node's two branches: a merged decoder is one If."""
    return [
        (index, attribute.g)
        for index, node in enumerate(model.graph.node)
        if node.op_type == "If" and node.domain in ("", "ai.onnx")
        for attribute in node.attribute
        if attribute.type == onnx.AttributeProto.GRAPH
    ]


def _unknown_in(branch: onnx.GraphProto, facts: Mapping[str, TensorFacts]) -> list[str]:
    return [name for node in branch.node for name in node.output if name and name not in facts]


def _with_branch_inlined(model: onnx.ModelProto, index: int, branch: onnx.GraphProto) -> onnx.ModelProto:
    """A copy of ``model`` that runs ``branch`` where the If at ``index`` was, whatever its condition, so
    that one ONNX Runtime run can expose the branch's tensors (a body's tensors cannot be outputs)."""
    inlined = onnx.ModelProto()
    inlined.CopyFrom(model)
    node = inlined.graph.node[index]
    handover = [
        onnx.helper.make_node("Identity", [inner.name], [outer], name=f"{outer}_from_branch")
        for inner, outer in zip(branch.output, node.output, strict=True)
        if outer and outer != inner.name  # a merger may name a branch's output as the If's
    ]
    nodes = [*inlined.graph.node[:index], *branch.node, *handover, *inlined.graph.node[index + 1 :]]
    del inlined.graph.node[:]
    inlined.graph.node.extend(nodes)
    inlined.graph.initializer.extend(branch.initializer)
    return inlined


def _add_dropout_masks(model: onnx.ModelProto, facts: dict[str, TensorFacts]) -> None:
    """Dropout's mask has its input's shape; ONNX shape inference leaves it out before opset 10.

    Its type is the input's before opset 10 and bool from then on. Filled in by rule so that a mask
    nobody reads does not cost an ONNX Runtime run of the whole model.
    """
    opset = default_opset_version(model, missing=0)
    for node in model.graph.node:
        if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or len(node.output) < 2:
            continue
        data, mask = facts.get(node.input[0]), node.output[1]
        if data is not None and mask and mask not in facts:
            facts[mask] = TensorFacts(data.shape, data.elem_type if opset < 10 else onnx.TensorProto.BOOL)


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more tensors" if len(names) > 5 else "")


def _with_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy whose graph inputs declare ``shapes`` and whose stale value_info is dropped."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    del fixed.graph.value_info[:]
    for value in fixed.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in shapes[value.name]:
                dims.add().dim_value = int(size)
    return fixed


def _with_standard_twins(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy for shape inference with FusedConv/FusedGemm/plain FusedMatMul replaced by Conv/Gemm/MatMul."""
    twins = onnx.ModelProto()
    twins.CopyFrom(model)
    for node in (node for graph in all_graphs(twins.graph) for node in graph.node):
        twin = _STANDARD_TWINS.get(node.op_type) if node.domain == MICROSOFT else None
        if twin is None or (node.op_type == "FusedMatMul" and _transposes(node)):
            continue
        op_type, arity = twin
        # MatMul takes no attributes (FusedMatMul's alpha only scales values); Conv/Gemm keep theirs.
        kept = [] if op_type == "MatMul" else [a for a in node.attribute if a.name not in _ACTIVATION_ATTRIBUTES]
        del node.input[arity:]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.op_type, node.domain = op_type, ""
    return twins


def _transposes(node: onnx.NodeProto) -> bool:
    return any(a.name.startswith("trans") and a.i for a in node.attribute)


def _inferred(model: onnx.ModelProto) -> dict[str, TensorFacts]:
    """Every tensor ONNX shape inference gives a fully static shape and a known type."""
    view = inference_view(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(view, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        inferred = view  # inference is best effort; what it cannot tell is left to the ORT run
    facts: dict[str, TensorFacts] = {}
    for graph in all_graphs(inferred.graph):  # body tensors too: names are unique across a model's graphs
        for value in [*graph.input, *graph.value_info, *graph.output]:
            tensor_type = value.type.tensor_type
            if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape") or not tensor_type.elem_type:
                continue
            dims = tensor_type.shape.dim
            if value.name not in facts and all(fixed_dim(d) is not None for d in dims):
                facts[value.name] = TensorFacts(tuple(d.dim_value for d in dims), tensor_type.elem_type)
        if graph is not inferred.graph:  # a body's own weights (the main graph's are added by the caller)
            for tensor in graph.initializer:
                facts.setdefault(tensor.name, TensorFacts(tuple(tensor.dims), tensor.data_type))
    return facts
