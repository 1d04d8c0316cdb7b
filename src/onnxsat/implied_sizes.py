"""Sizes of a model's dynamic input dims that its weights imply.

Some exports declare every input dim dynamic although the weights fix some of them: madmom's recurrent and
convolutional nets take ``[input_dim_0, input_dim_1]``, frames by features, and their first LSTM's weights
need 138 features. Random inputs with the unsized dims at 1 (or 64, or 224) cannot run such a model. Where a
dim meets a known size in an op that needs them equal (a MatMul's contracted axis, a convolution's or
recurrent op's input channels, a normalization's channels, a broadcast against a size other than 1), that
size is the one the model was trained at. Read off ONNX shape inference with each unsized dim as a symbol of
its own, so the dim is followed through Unsqueeze, Transpose, elementwise ops and the like.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx

from onnxsat.external_data import inference_view
from onnxsat.inputs import fixed_dim

Dim = int | str | None
Shape = list[Dim]

_BROADCASTING = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "Where", "Max", "Min", "Sum", "Mean",
        "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitShift",
    }
)  # fmt: skip
"""Ops whose inputs broadcast: two sizes on one axis (from the right) are equal or one of them is 1."""
_RECURRENT = frozenset({"LSTM", "GRU", "RNN"})
_CHANNELS_FIRST_NORMS = frozenset({"BatchNormalization", "InstanceNormalization"})


def implied_sizes(model: onnx.ModelProto, unsized: Mapping[str, list[int]]) -> dict[tuple[str, int], int]:
    """``{(input, axis): size}`` for the ``unsized`` axes of inputs (by input name) whose size the weights
    imply, and of every other such axis that shares its symbol. Empty when inference cannot run or tells
    nothing; a symbol that meets two different sizes is left out."""
    symbols = {
        (name, axis): f"__unsized_{index}_{axis}" for index, name in enumerate(unsized) for axis in unsized[name]
    }
    if not symbols:
        return {}
    view = inference_view(model)
    for value in view.graph.input:
        for axis in unsized.get(value.name, []):
            dims = value.type.tensor_type.shape.dim
            declared = dims[axis].dim_param
            shared = declared and not set("+*") & set(declared)
            if shared:  # one size for every axis of that name: one symbol for them all
                symbols[(value.name, axis)] = declared
            dims[axis].Clear()
            dims[axis].dim_param = symbols[(value.name, axis)]
    try:
        inferred = onnx.shape_inference.infer_shapes(view, strict_mode=False, data_prop=True)
    except Exception:  # inference is best effort: an op it cannot read only leaves the dims unsized
        return {}
    shapes = _shapes(inferred)
    wanted = set(symbols.values())
    found: dict[str, set[int]] = {}
    for node in inferred.graph.node:
        for symbol, size in _equalities(node, shapes):
            if symbol in wanted and size > 1:
                found.setdefault(symbol, set()).add(size)
    sizes = {symbol: next(iter(values)) for symbol, values in found.items() if len(values) == 1}
    return {key: sizes[symbol] for key, symbol in symbols.items() if symbol in sizes}


def _shapes(model: onnx.ModelProto) -> dict[str, Shape]:
    """Every tensor's inferred dims (int, symbol, or None), initializers' included."""
    shapes: dict[str, Shape] = {t.name: [int(d) for d in t.dims] for t in model.graph.initializer}
    graph = model.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            shapes[value.name] = [
                size if (size := fixed_dim(dim)) is not None else (dim.dim_param or None)
                for dim in tensor_type.shape.dim
            ]
    return shapes


def _equalities(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> Iterator[tuple[str, int]]:
    """``(symbol, size)`` pairs that ``node`` needs equal: a symbolic dim of one input against a known size."""
    inputs = [shapes.get(name) if name else None for name in node.input]
    first = inputs[0] if inputs else None
    weight = inputs[1] if len(inputs) > 1 else None
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return
    if op == "MatMul" and first and weight:
        if len(weight) >= 2:
            yield from _pair(first[-1], weight[-2])
            yield from _pair(weight[-2], first[-1])
        elif len(weight) == 1:
            yield from _pair(first[-1], weight[0])
    elif op == "Gemm" and first and weight and len(first) == 2 and len(weight) == 2:
        trans_a, trans_b = _int_attribute(node, "transA"), _int_attribute(node, "transB")
        yield from _pair(first[0 if trans_a else 1], weight[1 if trans_b else 0])
    elif op in ("Conv", "ConvTranspose") and first and weight and len(first) >= 2 and len(weight) >= 2:
        group = _int_attribute(node, "group") or 1
        if op == "ConvTranspose":
            yield from _pair(first[1], weight[0])  # [C_in, C_out / group, ...]
        elif isinstance(weight[1], int):
            yield from _pair(first[1], weight[1] * group)  # [C_out, C_in / group, ...]
    elif op in _RECURRENT and first and weight and len(first) == 3 and len(weight) == 3:
        yield from _pair(first[2], weight[2])  # features are last in either layout
    elif op in _CHANNELS_FIRST_NORMS and first and weight and len(first) >= 2 and len(weight) == 1:
        yield from _pair(first[1], weight[0])
    elif op == "LayerNormalization" and first and weight and len(weight) <= len(first):
        for dim, size in zip(first[len(first) - len(weight) :], weight, strict=True):
            yield from _pair(dim, size)
    elif op in _BROADCASTING:
        known = [shape for shape in inputs if shape is not None]
        for shape in known:
            for other in known:
                if other is not shape:
                    for dim, size in zip(reversed(shape), reversed(other), strict=False):
                        yield from _pair(dim, size)


def _pair(dim: Dim, size: Dim) -> Iterator[tuple[str, int]]:
    if isinstance(dim, str) and isinstance(size, int):
        yield dim, size


def _int_attribute(node: onnx.NodeProto, name: str) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), 0)
