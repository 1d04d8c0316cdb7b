"""Node-level edits behind :class:`onnxsat.surgery.api.Surgery`: removing nodes by bypassing them, and
rewriting a Gemm (alone, or followed by Slices) as Convs, as the vendor guide does for UFLD.

Every function edits the model it is given in place; the caller (``Surgery``) hands it a copy and keeps
the copy only when the edit succeeds, so a refused edit leaves nothing half-done. Weights must be in
memory (``Surgery.load`` reads external data).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsat.inputs import fixed_dim
from onnxsat.surgery.graph_edit import (
    constant_value,
    consumers,
    producers,
    remove_where,
    rename_tensor,
    unique_name,
    used_names,
)
from onnxsat.surgery.surgeon import SurgeryError


def find_node(graph: onnx.GraphProto, name: str) -> onnx.NodeProto:
    """The one node called ``name``; refuses a missing or ambiguous name rather than guessing."""
    found = [node for node in graph.node if node.name == name]
    if not found:
        raise SurgeryError(f"the model has no node named {name!r}")
    if len(found) > 1:
        raise SurgeryError(f"{len(found)} nodes are named {name!r}; node names must be unique to edit by name")
    return found[0]


def _is_constant(graph: onnx.GraphProto, name: str) -> bool:
    """Whether ``name`` is absent (an optional input), an initializer or a Constant node's output."""
    if not name or any(tensor.name == name for tensor in graph.initializer):
        return True
    node = producers(graph).get(name)
    return node is not None and node.op_type == "Constant"


def _describe(node: onnx.NodeProto) -> str:
    return f"{node.op_type} node {node.name!r}" if node.name else f"unnamed {node.op_type} node"


def remove_nodes(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto]) -> None:
    """Remove each node by bypassing it: the readers of its output read its data input instead.

    Only a node with one data input (any further inputs constant, like Reshape's shape) and one used
    output can be bypassed; anything else is refused, since its readers would have nothing to read.
    Constants that only the removed nodes read go too.
    """
    graph = model.graph
    readers = consumers(graph)
    outputs = {item.name for item in graph.output}
    for node in nodes:
        used = [name for name in node.output if name in readers or name in outputs]
        if not node.input or not node.input[0] or not all(_is_constant(graph, n) for n in node.input[1:]):
            raise SurgeryError(
                f"cannot remove {_describe(node)}: only a node with one data input (others constant) can be bypassed"
            )
        if used and used != [node.output[0]]:
            raise SurgeryError(f"cannot remove {_describe(node)}: its readers use more than its first output")
    # Nodes are found again by their first output, which a rename by an earlier bypass may change.
    keys = list(dict.fromkeys(node.output[0] for node in nodes))
    while keys:
        key = keys.pop(0)
        node = next(node for node in graph.node if node.output and node.output[0] == key)
        old, new = _bypass(graph, node)
        keys = [new if key == old else key for key in keys]


def _bypass(graph: onnx.GraphProto, node: onnx.NodeProto) -> tuple[str, str]:
    """Remove ``node``, joining its input and output tensors into one; returns the rename (old, new)."""
    source, result = node.input[0], node.output[0]
    outputs = {item.name for item in graph.output}
    description = _describe(node)
    graph.node.remove(node)
    _drop_value_info(graph, [source, result])
    if result in outputs:
        if source in outputs or source in {item.name for item in graph.input} or _is_constant(graph, source):
            raise SurgeryError(
                f"cannot remove {description}: graph output {result!r} would become {source!r}, which is itself "
                "a graph input, output or constant"
            )
        old, new = source, result  # the producer now writes the graph output itself
        output = next(item for item in graph.output if item.name == result)
        output.type.tensor_type.ClearField("shape")  # its shape was the removed node's; infer_shapes fills it
    else:
        old, new = result, source
    rename_tensor(graph, old, new)
    drop_unread(graph, node.input[1:])
    return old, new


def _is_graph_output(graph: onnx.GraphProto, name: str) -> bool:
    return any(item.name == name for item in graph.output)


def _drop_value_info(graph: onnx.GraphProto, names: Iterable[str]) -> None:
    """Forget recorded shapes of tensors an edit changed: stale shapes would mislead ORT and the checker."""
    stale = set(names)
    remove_where(graph.value_info, lambda item: item.name in stale)


def drop_unread(graph: onnx.GraphProto, names: Iterable[str]) -> None:
    """Remove the initializers, and the nodes, that produced ``names`` if nothing reads them any more.

    A local clean-up after an edit: unlike ``remove_dead`` it never touches parts of the graph the edit
    did not disconnect, so a user's deliberately dangling tensors survive.
    """
    pending = [name for name in names if name]
    while pending:
        name = pending.pop()
        if name in consumers(graph) or _is_graph_output(graph, name):
            continue
        if any(tensor.name == name for tensor in graph.initializer):
            remove_where(graph.initializer, lambda tensor, name=name: tensor.name == name)
            remove_where(graph.input, lambda item, name=name: item.name == name)  # old IR lists it as an input
        node = producers(graph).get(name)
        if node is not None and not any(out in consumers(graph) or _is_graph_output(graph, out) for out in node.output):
            graph.node.remove(node)
            _drop_value_info(graph, node.output)
            pending.extend(node.input)


def gemm_to_conv(
    model: onnx.ModelProto,
    name: str,
    kernel: tuple[int, int] = (1, 1),
    channels: int | None = None,
    outputs: int | None = None,
    output_4d: bool = False,
) -> str:
    """Rewrite Gemm ``name`` as a Conv with an R×S kernel over C channels and K outputs; returns its name.

    The Gemm's input is read as [N, C, R, S] and its weight reshaped to [K, C, R, S], so the Conv
    computes exactly the Gemm's dot products (in another summation order). The input comes straight
    from a 4D tensor when there is one (the Gemm's input, or the input of the Flatten/Reshape feeding
    it); otherwise a Reshape is inserted. ``output_4d`` keeps the Conv's [N, K, 1, 1] result instead of
    flattening it back to [N, K], for a graph that stays 4D throughout.
    """
    graph = model.graph
    gemm = _gemm(graph, name)
    weight, bias = _gemm_weights(graph, gemm)
    if outputs is not None and outputs != weight.shape[0]:
        raise SurgeryError(f"Gemm {name!r} has {weight.shape[0]} outputs, not the {outputs} asked for")
    shape = _conv_shape(gemm, weight.shape[1], kernel, channels)
    taken = used_names(graph)
    index = list(graph.node).index(gemm)
    source = _conv_source(model, gemm.input[0], shape, taken, index)
    base = f"{gemm.name or 'Gemm'}_Conv"
    conv = _make_conv(graph, base, weight, bias, shape, source, gemm.output[0], output_4d, taken)
    _replace(graph, [gemm], conv)
    return conv[0].name


def gemm_slices_to_convs(
    model: onnx.ModelProto,
    name: str,
    kernel: tuple[int, int] = (1, 1),
    channels: int | None = None,
    output_4d: bool = False,
) -> list[str]:
    """Rewrite Gemm ``name`` and the Slices reading it as one Conv per Slice; returns the Convs' names.

    Every reader of the Gemm's output must be a Slice along the feature axis (step 1, constant bounds):
    each Conv gets the Gemm's weight and bias rows the Slice kept, and writes the Slice's output (4D
    with ``output_4d``). The input is handled as in :func:`gemm_to_conv`.
    """
    graph = model.graph
    gemm = _gemm(graph, name)
    weight, bias = _gemm_weights(graph, gemm)
    if _is_graph_output(graph, gemm.output[0]):
        raise SurgeryError(f"Gemm {name!r} writes a graph output; only Slices may read it for this rewrite")
    slices = consumers(graph).get(gemm.output[0], [])
    if not slices:
        raise SurgeryError(f"nothing reads Gemm {name!r}'s output; there are no Slices to rewrite")
    bounds = [_slice_bounds(graph, node, weight.shape[0]) for node in slices]
    shape = _conv_shape(gemm, weight.shape[1], kernel, channels)
    taken = used_names(graph)
    index = list(graph.node).index(gemm)
    source = _conv_source(model, gemm.input[0], shape, taken, index)
    new_nodes: list[onnx.NodeProto] = []
    conv_names = []
    for k, (node, (start, end)) in enumerate(zip(slices, bounds, strict=True)):
        part = bias[start:end] if bias is not None else None
        base = f"{gemm.name or 'Gemm'}_Conv_{k}"  # the guide's names
        made = _make_conv(graph, base, weight[start:end], part, shape, source, node.output[0], output_4d, taken)
        conv_names.append(made[0].name)
        new_nodes.extend(made)
    _replace(graph, [gemm, *slices], new_nodes)
    return conv_names


def _gemm(graph: onnx.GraphProto, name: str) -> onnx.NodeProto:
    node = find_node(graph, name)
    if node.op_type != "Gemm":
        raise SurgeryError(f"node {name!r} is a {node.op_type}, not a Gemm")
    if _attribute(node, "transA", 0):
        raise SurgeryError(f"Gemm {name!r} transposes its input (transA=1); only transA=0 can become a Conv")
    return node


def _has(node: onnx.NodeProto, attribute: str) -> bool:
    return any(item.name == attribute for item in node.attribute)


def _attribute(node: onnx.NodeProto, attribute: str, default: Any) -> Any:
    return helper.get_node_attr_value(node, attribute) if _has(node, attribute) else default


def _gemm_weights(graph: onnx.GraphProto, gemm: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray | None]:
    """The Gemm's weight as [K, F] and bias as [K] (or None), with transB, alpha and beta folded in."""
    weight = constant_value(graph, gemm.input[1])
    if weight is None or weight.ndim != 2:
        raise SurgeryError(f"Gemm {gemm.name!r}: its weight {gemm.input[1]!r} is not a constant 2D matrix")
    if not _attribute(gemm, "transB", 0):
        weight = weight.T
    alpha = _attribute(gemm, "alpha", 1.0)
    if alpha != 1.0:
        weight = (weight * alpha).astype(weight.dtype)
    if len(gemm.input) < 3 or not gemm.input[2]:
        return np.ascontiguousarray(weight), None
    bias = constant_value(graph, gemm.input[2])
    outputs = weight.shape[0]
    if bias is None or bias.size not in (1, outputs) or (bias.ndim == 2 and bias.shape[0] != 1) or bias.ndim > 2:
        raise SurgeryError(
            f"Gemm {gemm.name!r}: its bias {gemm.input[2]!r} is not a constant of {outputs} values (one per output)"
        )
    beta = _attribute(gemm, "beta", 1.0)
    bias = np.broadcast_to(bias.reshape(-1), (outputs,))
    if beta != 1.0:
        bias = bias * beta
    return np.ascontiguousarray(weight), np.ascontiguousarray(bias).astype(weight.dtype)


def _conv_shape(gemm: onnx.NodeProto, features: int, kernel: tuple[int, int], channels: int | None) -> tuple[int, ...]:
    """(C, R, S) for the Gemm's ``features`` inputs, refusing a kernel and channel count that do not fit."""
    rows, cols = kernel
    if rows < 1 or cols < 1:
        raise SurgeryError(f"kernel must be two sizes >= 1, got {kernel}")
    if channels is None:
        if features % (rows * cols):
            raise SurgeryError(
                f"Gemm {gemm.name!r} has {features} input features, not a multiple of kernel {rows}x{cols}"
            )
        channels = features // (rows * cols)
    if channels * rows * cols != features:
        raise SurgeryError(
            f"Gemm {gemm.name!r} has {features} input features, but {channels} channels x kernel {rows}x{cols} "
            f"is {channels * rows * cols}"
        )
    return channels, rows, cols


def _conv_source(model: onnx.ModelProto, tensor: str, shape: tuple[int, ...], taken: set[str], index: int) -> str:
    """A tensor holding the Gemm's input as [N, C, R, S]: an existing 4D one, or a new Reshape's output.

    The Flatten/Reshape look-through is exact only when it flattens [N, C, R, S] to [N, C*R*S], which
    inferred shapes confirm; without them a Reshape is inserted, which is always right.
    """
    graph = model.graph
    shapes = _inferred_shapes(model)
    if _fits(shapes.get(tensor), shape):
        return tensor
    producer = producers(graph).get(tensor)
    if (
        producer is not None
        and producer.op_type in ("Flatten", "Reshape")
        and _fits(shapes.get(producer.input[0]), shape)
    ):
        batch, flat = shapes[producer.input[0]][0], shapes.get(tensor)
        if producer.op_type == "Flatten" and _attribute(producer, "axis", 1) == 1:
            return producer.input[0]
        if producer.op_type == "Reshape" and batch is not None and flat == [batch, int(np.prod(shape))]:
            return producer.input[0]
    target = unique_name(graph, f"{tensor}_4d_shape", taken)
    graph.initializer.append(numpy_helper.from_array(np.array([0, *shape], dtype=np.int64), target))
    reshaped = unique_name(graph, f"{tensor}_4d", taken)
    graph.node.insert(
        index,
        helper.make_node("Reshape", [tensor, target], [reshaped], name=unique_name(graph, f"{tensor}_to_4d", taken)),
    )
    return reshaped


def _fits(dims: list[int | None] | None, shape: tuple[int, ...]) -> bool:
    return dims is not None and len(dims) == 4 and tuple(dims[1:]) == shape


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Tensor name -> dims (None where unknown), as far as ONNX shape inference gets; {} if it fails."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return {}
    graph = inferred.graph
    result = {}
    for item in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = item.type.tensor_type
        if item.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            result[item.name] = [fixed_dim(d) for d in tensor_type.shape.dim]
    return result


def _slice_bounds(graph: onnx.GraphProto, node: onnx.NodeProto, features: int) -> tuple[int, int]:
    """[start, end) of a Slice along the Gemm output's feature axis, or a refusal saying why it is not one."""
    if node.op_type != "Slice":
        raise SurgeryError(f"{_describe(node)} reads the Gemm's output; every reader must be a Slice")
    if len(node.input) > 1:
        names = list(node.input[1:5])
        values = [constant_value(graph, name) if name else None for name in names]
        if any(name and value is None for name, value in zip(names, values, strict=True)):
            raise SurgeryError(f"Slice {node.name!r} has bounds that are not constants")
        starts, ends, axes, steps = [*values, None, None][:4]
    else:  # opset < 10 keeps the bounds in attributes
        starts, ends = helper.get_node_attr_value(node, "starts"), helper.get_node_attr_value(node, "ends")
        axes, steps = (helper.get_node_attr_value(node, "axes") if _has(node, "axes") else None), None
    axes = list(range(len(starts))) if axes is None else np.asarray(axes).reshape(-1).tolist()
    if len(axes) != 1 or int(axes[0]) not in (1, -1):
        raise SurgeryError(f"Slice {node.name!r} does not slice only the feature axis (1) of the Gemm's output")
    if steps is not None and int(np.asarray(steps).reshape(-1)[0]) != 1:
        raise SurgeryError(f"Slice {node.name!r} has a step other than 1; only contiguous slices become Convs")
    start, end = (int(np.asarray(v).reshape(-1)[0]) for v in (starts, ends))
    start, end = (min(max(v + features if v < 0 else v, 0), features) for v in (start, end))
    if start >= end:
        raise SurgeryError(f"Slice {node.name!r} keeps no features ({start}:{end})")
    return start, end


def _make_conv(
    graph: onnx.GraphProto,
    base: str,
    weight: np.ndarray,
    bias: np.ndarray | None,
    shape: tuple[int, ...],
    source: str,
    result: str,
    output_4d: bool,
    taken: set[str],
) -> list[onnx.NodeProto]:
    """The Conv (and, unless ``output_4d``, the Flatten back to 2D) that writes ``result``."""
    weight_name = unique_name(graph, f"{base}_weight", taken)
    graph.initializer.append(numpy_helper.from_array(weight.reshape(weight.shape[0], *shape), weight_name))
    inputs = [source, weight_name]
    if bias is not None:
        bias_name = unique_name(graph, f"{base}_bias", taken)
        graph.initializer.append(numpy_helper.from_array(bias, bias_name))
        inputs.append(bias_name)
    conv_output = result if output_4d else unique_name(graph, f"{result}_4d", taken)
    conv = helper.make_node(
        "Conv", inputs, [conv_output], name=unique_name(graph, f"{base}", taken), kernel_shape=list(shape[1:])
    )
    if output_4d:
        _set_4d_output(graph, result, weight.shape[0])
        return [conv]
    flatten = helper.make_node(
        "Flatten", [conv_output], [result], name=unique_name(graph, f"{base}_flatten", taken), axis=1
    )
    return [conv, flatten]


def _set_4d_output(graph: onnx.GraphProto, name: str, outputs: int) -> None:
    """A graph output that becomes [N, K, 1, 1] says so (keeping its batch dimension as declared)."""
    _drop_value_info(graph, [name])
    for item in graph.output:
        if item.name == name:
            dims = item.type.tensor_type.shape.dim
            batch = onnx.TensorShapeProto.Dimension()  # unknown, unless the output declared one
            if len(dims):
                batch.CopyFrom(dims[0])
            del dims[:]
            dims.add().CopyFrom(batch)
            for size in (outputs, 1, 1):
                dims.add().dim_value = size


def _replace(graph: onnx.GraphProto, old: list[onnx.NodeProto], new: list[onnx.NodeProto]) -> None:
    """Put ``new`` where the first of ``old`` was (its inputs exist there), drop ``old`` and what only it read."""
    index = list(graph.node).index(old[0])
    inputs = [name for node in old for name in node.input]
    _drop_value_info(graph, [name for node in old for name in node.output])
    for node in old:
        graph.node.remove(node)
    for offset, node in enumerate(new):
        graph.node.insert(index + offset, node)
    drop_unread(graph, inputs)
