"""One form for the ways exporters write the same model, made once when a model is loaded for work.

Exporters differ in where they put weights and how they spell an unknown size. Paddle2ONNX and tf2onnx
put weights in ``Constant`` nodes, PyTorch in initializers; some exporters write an unknown dimension
as ``0``. Every feature (sparsify, prune, profile, quantize) wants weights as initializers and dynamic
dims as dynamic, so the model is brought to that form here, before any pass sees it, rather than each
feature learning every spelling:

- a main-graph ``Constant`` node's tensor becomes an initializer of the same name (the node goes); a
  model of IR version < 4 also lists it as a graph input, as that IR requires of initializers. A
  Constant that is itself a graph output, or holds a sparse tensor, stays a node.
- an ``Identity`` of a weight (PyTorch's exporter writes one for every weight equal to another) is read
  through: its readers read the weight. An Identity whose output is a graph output, or is read inside a
  subgraph, stays.
- calls of model-local functions (PyTorch's ``export_modules_as_functions``, onnxscript models, converters
  that keep a module as a function) are inlined, as ONNX Runtime does when it loads the model: a pass that
  looks for a Conv or a MatMul finds it only in the graph, not inside an opaque call.
- a graph input or output dimension declared ``0`` becomes dynamic: ONNX Runtime would take it as a
  fixed size of zero, refusing every real input. Symbolic names (``dim_param``) are kept as written.

All are lossless: the model computes the same, for every input it accepted before.

Weights stored sparse (``graph.sparse_initializer``, COO: ``sparsify --sparse-initializers`` writes them) stay so
here: optimize folds them and profile counts them as they are. A pass that reads and rewrites weights (sparsify,
prune, quantize, compress) gets them dense instead (:func:`densify_sparse_initializers`, by the runner), as
ONNX Runtime reads them when it loads the model; to them a sparse weight would be no weight at all.

One more step changes the interface, so it is separate and made only where the user's inputs are known
(:func:`initializers_as_constants`, by the runner): an initializer also listed as a graph input (IR >= 4)
is a default the caller may override, and ONNX Runtime neither folds nor prepacks it. Old exporters list
every weight so (tf2onnx at opset 7: a Keras CNN ran 1.8x slower for it). Such inputs are dropped, and
their initializers become constants, unless the user feeds them.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
from onnx import numpy_helper

from onnxsat.external_data import sparse_tensor_value
from onnxsat.proto_fields import all_nodes, copy_fields, drop_unused_domains

_TENSOR_ATTRIBUTES = (
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
)
"""The attributes a Constant node holds a dense tensor in (``sparse_value`` stays a node)."""


def normal_form(model: onnx.ModelProto, in_place: bool = False) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` in the form described in the module doc, and one line per kind of change made.

    Returns ``model`` itself when nothing changes, else a changed copy; ``in_place`` changes ``model`` itself
    instead (for a caller that just loaded it: a large model is not held twice).
    """
    calls = _local_function_calls(model)
    notes = []
    if calls:
        if not in_place:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model, in_place = copy, True
        _inline_local_functions(model)
        notes.append(f"{calls} calls of model-local functions inlined")
    liftable = [node for node in model.graph.node if _liftable(node, model.graph)]
    lifted = {node.output[0] for node in liftable}
    aliases = _weight_aliases(model, lifted)
    zero_dims = [value.name for value in _interface(model.graph) if _zero_dims(value)]
    if not liftable and not aliases and not zero_dims:
        return model, notes
    result = model
    if not in_place:
        result = onnx.ModelProto()
        result.CopyFrom(model)
    if liftable:
        _lift_constants(result)
        notes.append(f"{len(liftable)} Constant node tensors read as initializers of the same names")
    if aliases:
        _read_through(result.graph, aliases)
        notes.append(f"{len(aliases)} Identity nodes of weights read through (their readers read the weight)")
    if zero_dims:
        for value in _interface(result.graph):
            for dim in _zero_dims(value):
                dim.ClearField("dim_value")
        notes.append(f"dims declared 0 read as dynamic on {', '.join(zero_dims)}")
    return result, notes


def working_form(
    model: onnx.ModelProto, fed: Collection[str] = (), in_place: bool = False
) -> tuple[onnx.ModelProto, list[str], tuple[str, ...]]:
    """The form every command works on: :func:`normal_form`, then :func:`initializers_as_constants` (but for
    the inputs in ``fed``); one line per kind of change, and the names of the inputs that only restated an
    initializer (the file as given runs slower for them: see ``with_restated_inputs``).

    ``model`` is left as it is unless ``in_place``; the result is ``model`` itself when nothing changes.
    """
    result, notes = normal_form(model, in_place=in_place)
    restated = tuple(initializer_inputs(result, fed))
    if restated:
        if result is model and not in_place:
            result = onnx.ModelProto()
            result.CopyFrom(model)
        notes += initializers_as_constants(result, fed)
    return result, notes, restated


def initializer_inputs(model: onnx.ModelProto, fed: Collection[str] = ()) -> list[str]:
    """Graph inputs that only restate an initializer and that :func:`initializers_as_constants` drops."""
    if model.ir_version < 4:
        return []  # IR 3 requires every initializer among the inputs, and reads them as constants anyway
    initializers = {t.name for t in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name in initializers and v.name not in fed]


def initializers_as_constants(model: onnx.ModelProto, fed: Collection[str] = ()) -> list[str]:
    """In place: graph inputs that only restate an initializer (IR >= 4) are dropped, except those in ``fed``
    (the user gives them a value); returns the line saying so, or nothing."""
    dropped = set(initializer_inputs(model, fed))
    if not dropped:
        return []
    graph = model.graph
    kept = [v for v in graph.input if v.name not in dropped]
    del graph.input[:]
    graph.input.extend(kept)
    return [
        f"{len(dropped)} initializers also listed as graph inputs read as constants (ONNX Runtime neither folds "
        "nor prepacks an input; give one in --inputs to keep it an input)"
    ]


def with_restated_inputs(model: onnx.ModelProto, names: Collection[str]) -> onnx.ModelProto:
    """A copy of ``model`` with the initializers ``names`` listed as graph inputs again: the interface of the
    file as given before :func:`initializers_as_constants`, for timing the original as the user has it."""
    restated = onnx.ModelProto()
    restated.CopyFrom(model)
    listed = {value.name for value in restated.graph.input}
    for tensor in restated.graph.initializer:
        if tensor.name in names and tensor.name not in listed:
            restated.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    return restated


def densify_sparse_initializers(model: onnx.ModelProto, base_dir: Path | None = None) -> list[str]:
    """In place: every main-graph sparse initializer becomes a dense initializer of the same name and value;
    the line saying so, or nothing. ``base_dir``: where the sparse tensors' external data lives.

    Passes that transform weights find them among ``graph.initializer`` only: a Conv whose weight is stored
    sparse read as "no constant weight" to quantize, as a run-time value to prune, and sparsify skipped it.
    ONNX Runtime densifies them when it loads a model, so nothing it computes changes.
    """
    graph = model.graph
    if not graph.sparse_initializer:
        return []
    dense = [numpy_helper.from_array(sparse_tensor_value(s, base_dir), s.values.name) for s in graph.sparse_initializer]
    del graph.sparse_initializer[:]
    graph.initializer.extend(dense)
    weights = "1 weight" if len(dense) == 1 else f"{len(dense)} weights"
    return [
        f"{weights} stored as sparse_initializer read as dense initializers, as ONNX Runtime reads them "
        "(the result stores them dense: sparsify --sparse-initializers stores sparse weights in COO form again)"
    ]


def _local_function_calls(model: onnx.ModelProto) -> int:
    """How many nodes (in any graph) call a function the model itself defines."""
    local = {(function.domain, function.name) for function in model.functions}
    if not local:
        return 0
    return sum((node.domain, node.op_type) in local for node in all_nodes(model.graph))


def _inline_local_functions(model: onnx.ModelProto) -> None:
    """In place: every call of a model-local function replaced by the function's nodes (ONNX's inliner, which
    renames the function's inner values apart and resolves attribute references).

    The inliner is given the graph without its initializers, so a large model is not serialized whole; the
    main graph's names stay as they are, so the weights need no change. The functions go, and so do the
    opset imports of domains nothing uses any more.
    """
    light = onnx.ModelProto()
    copy_fields(model, light, skip={"graph"})
    copy_fields(model.graph, light.graph, skip={"initializer", "sparse_initializer"})
    inlined = onnx.inliner.inline_local_functions(light)
    del model.graph.node[:]
    model.graph.node.extend(inlined.graph.node)
    del model.functions[:]
    model.functions.extend(inlined.functions)
    drop_unused_domains(model)


def _weight_aliases(model: onnx.ModelProto, lifted: set[str]) -> dict[str, str]:
    """Identity output -> the weight it copies, for the Identities that can be read through."""
    graph = model.graph
    overridable = {value.name for value in graph.input} if model.ir_version >= 4 else set()
    weights = ({t.name for t in graph.initializer} | lifted) - overridable
    kept = {value.name for value in graph.output} | _read_in_subgraphs(graph)
    aliases: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(node.input) != 1:
            continue
        source = aliases.get(node.input[0], node.input[0])
        if source in weights and node.output[0] not in kept:
            aliases[node.output[0]] = source
    return aliases


def _read_in_subgraphs(graph: onnx.GraphProto) -> set[str]:
    names: set[str] = set()
    for node in graph.node:
        for attribute in node.attribute:
            for body in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                names |= {name for inner in body.node for name in inner.input} | _read_in_subgraphs(body)
    return names


def _read_through(graph: onnx.GraphProto, aliases: dict[str, str]) -> None:
    kept = [node for node in graph.node if not (node.op_type == "Identity" and node.output[0] in aliases)]
    for node in kept:
        for slot, name in enumerate(node.input):
            if name in aliases:
                node.input[slot] = aliases[name]
    del graph.node[:]
    graph.node.extend(kept)


def _interface(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [*graph.input, *graph.output]


def _zero_dims(value: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return []
    return [d for d in value.type.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value == 0]


def _liftable(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return False
    outputs = {value.name for value in graph.output}
    return len(node.attribute) == 1 and node.attribute[0].name in _TENSOR_ATTRIBUTES and node.output[0] not in outputs


def _lift_constants(model: onnx.ModelProto) -> None:
    graph = model.graph
    kept = []
    lifted = []
    for node in graph.node:
        if not _liftable(node, graph):
            kept.append(node)
            continue
        tensor = _tensor(node.attribute[0])
        tensor.name = node.output[0]
        lifted.append(tensor)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(lifted)
    if model.ir_version < 4:
        graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in lifted)


def _tensor(attribute: onnx.AttributeProto) -> onnx.TensorProto:
    """A Constant node's attribute as the tensor it defines (a copy, so the node's stays untouched)."""
    if attribute.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attribute.t)
        return tensor
    value = onnx.helper.get_attribute_value(attribute)
    if attribute.name.startswith("value_string"):
        strings = [value] if attribute.name == "value_string" else list(value)
        dims = [] if attribute.name == "value_string" else [len(strings)]
        return onnx.helper.make_tensor("", onnx.TensorProto.STRING, dims, strings)
    dtype = np.float32 if attribute.name.startswith("value_float") else np.int64
    return numpy_helper.from_array(np.asarray(value, dtype=dtype))
