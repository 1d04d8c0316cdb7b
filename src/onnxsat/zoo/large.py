"""A synthetic model over 2 GB, written straight to disk with its weights in an external data file.

Why straight to disk: the point of the large-model test is that nothing in ONNXSat holds all the
weights in memory at once, so the builder must not either. Each weight is generated and written in
chunks; the protobuf only holds references.

The graph has two branches so that both ways a weight survives optimization are exercised: an MLP of
large MatMul+Add+Relu layers ending in Gemm+Relu (weights kept as references and streamed to the
output; Gemm+Relu becomes FusedGemm), and a small Conv+BatchNormalization+Relu (the folded weight is
computed from values read from the data file).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxsat.external_data import pad_to_alignment, set_reference

_CHUNK_ELEMENTS = 8 * 2**20
_BN_KEYS = ("scale", "bias", "mean", "var")


class _DataWriter:
    """Appends seeded uniform weights to the data file, page-aligned, and makes their references."""

    def __init__(self, stream: BinaryIO, location: str, seed: int) -> None:
        self.stream, self.location = stream, location
        self.rng = np.random.default_rng(seed)
        self.initializers: list[TensorProto] = []

    def add(self, name: str, dims: list[int], bound: float, offset_by: float = 0.0) -> str:
        offset = pad_to_alignment(self.stream)
        remaining = int(np.prod(dims))
        while remaining:
            count = min(_CHUNK_ELEMENTS, remaining)
            chunk = self.rng.random(count, dtype=np.float32) * np.float32(2 * bound) - np.float32(bound - offset_by)
            self.stream.write(chunk.astype("<f4").tobytes())
            remaining -= count
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        set_reference(tensor, self.location, offset, self.stream.tell() - offset)
        self.initializers.append(tensor)
        return name


def write_large_model(path: Path, target_bytes: int = int(2.2e9), width: int = 8192, seed: int = 0) -> int:
    """Write the model to ``path`` and its weights to ``<name>.data``; return the total bytes on disk.

    Layers of ``width`` x ``width`` float32 weights are added until the weights exceed
    ``target_bytes``.
    """
    location = f"{path.name}.data"
    layer_bytes = width * width * 4
    layers = max(1, -(-target_bytes // layer_bytes))
    nodes: list[onnx.NodeProto] = []
    with open(path.with_name(location), "wb") as stream:
        data = _DataWriter(stream, location, seed)
        hidden = "x"
        he_bound = float(np.sqrt(6.0 / width))
        for i in range(layers - 1):
            weight = data.add(f"w{i}", [width, width], he_bound)
            bias = data.add(f"b{i}", [width], 0.01)
            nodes += [
                helper.make_node("MatMul", [hidden, weight], [f"mm{i}"], name=f"matmul{i}"),
                helper.make_node("Add", [f"mm{i}", bias], [f"add{i}"], name=f"add{i}"),
                helper.make_node("Relu", [f"add{i}"], [f"h{i}"], name=f"relu{i}"),
            ]
            hidden = f"h{i}"
        head = data.add("head_w", [width, width], he_bound)
        head_bias = data.add("head_b", [width], 0.01)
        nodes += [
            helper.make_node("Gemm", [hidden, head, head_bias], ["logits"], name="head"),
            helper.make_node("Relu", ["logits"], ["mlp_out"], name="head_relu"),
        ]
        conv_w = data.add("conv_w", [16, 3, 3, 3], 0.5)
        bn = [data.add(f"bn_{k}", [16], 0.5, offset_by=1.0 if k in ("scale", "var") else 0.0) for k in _BN_KEYS]
        nodes += [
            helper.make_node("Conv", ["image", conv_w], ["conv"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["conv", *bn], ["bn"], name="bn"),
            helper.make_node("Relu", ["bn"], ["conv_out"], name="conv_relu"),
        ]
        initializers = data.initializers
    graph = helper.make_graph(
        nodes,
        "large",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width]),
            helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16]),
        ],
        [
            helper.make_tensor_value_info("mlp_out", TensorProto.FLOAT, ["batch", width]),
            helper.make_tensor_value_info("conv_out", TensorProto.FLOAT, ["batch", 16, 16, 16]),
        ],
        initializers,
    )
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path.stat().st_size + path.with_name(location).stat().st_size
