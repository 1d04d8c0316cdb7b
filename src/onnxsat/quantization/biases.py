"""Biases as ONNX Runtime's quantizer needs them: one axis, and one bias tensor per node that reads one.

Its static quantizer gives each bias a scale computed from its node's input and weight scales, so a bias two
nodes share is copied, each copy named after the bias with a number one above the largest that initializers
already end in (``bias0``, ``bias1``, ...), checked against initializer names only: basic-pitch's tf2onnx export
shares the bias ``...conv1d_25`` among 16 Convs, one of which writes ``...conv1d_252``; a copy took that
name, and ONNX Runtime refused the quantized model.
"""

from __future__ import annotations

import onnx

from onnxsat.surgery.graph_edit import consumers

BIAS_READERS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}
"""The ops whose input at that position ONNX Runtime's static quantizer quantizes as a bias."""


def flatten_gemm_biases(graph: onnx.GraphProto) -> int:
    """Give each Gemm bias of shape ``[1, N]`` (MatMul + Add of a row, as scikit-learn exports write it) the
    shape ``[N]``, the same values broadcast the same way. ORT's quantizer quantizes a Gemm bias along
    axis 0, which such a bias has only one of, and writes a DequantizeLinear ORT refuses to run. Only
    biases nothing else reads; returns how many."""
    readers = consumers(graph)
    declared = {value.name: value for value in [*graph.input, *graph.value_info]}
    flattened = 0
    for tensor in graph.initializer:
        name, uses = tensor.name, readers.get(tensor.name, [])
        gemm_bias_only = uses and all(node.op_type == "Gemm" and list(node.input).index(name) == 2 for node in uses)
        if gemm_bias_only and len(tensor.dims) == 2 and tensor.dims[0] == 1:
            tensor.dims[:] = [tensor.dims[1]]
            shape = declared[name].type.tensor_type.shape if name in declared else None
            if shape is not None and len(shape.dim) == 2:  # an old-IR model may declare its initializers' shapes
                del shape.dim[0]
            flattened += 1
    return flattened


def own_biases(graph: onnx.GraphProto) -> int:
    """In place: each node reading a bias initializer another node reads too gets its own copy, under a name no
    tensor, node output or graph input has; returns how many copies were made."""
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    taken = set(initializers) | {value.name for value in graph.input}
    taken |= {name for node in graph.node for name in [*node.input, *node.output]}
    readers = consumers(graph)
    copies = []
    for name, tensor in initializers.items():
        bias_of = [
            node
            for node in readers.get(name, [])
            if BIAS_READERS.get(node.op_type) is not None
            and len(node.input) > BIAS_READERS[node.op_type]
            and node.input[BIAS_READERS[node.op_type]] == name
        ]
        for node in bias_of[1:]:
            copy_name = f"{name}_bias_of_{node.name or node.output[0]}"
            while copy_name in taken:
                copy_name += "_"
            taken.add(copy_name)
            copy = onnx.TensorProto()
            copy.CopyFrom(tensor)
            copy.name = copy_name
            copies.append(copy)
            node.input[BIAS_READERS[node.op_type]] = copy_name
    graph.initializer.extend(copies)
    return len(copies)
