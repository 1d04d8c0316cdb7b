"""Small graphs for the surgeon tests (interface, shapes, decompositions; ``catalogue_checks`` runs with it):
build them with onnx.helper, check them, and run them in ONNX Runtime with its optimizations off (our
graph, not ORT's rewrite of it)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def value(name: str, shape: list[int | str] | None = (2, 3), elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializer: list[onnx.TensorProto] = (),
    opset: int = 17,
    ir_version: int = 10,
    value_info: list[onnx.ValueInfoProto] = (),
) -> onnx.ModelProto:
    """A model importing the default domain at ``opset`` and com.microsoft (for contrib-op originals)."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializer, value_info=value_info)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=ir_version)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def checked(model: onnx.ModelProto) -> onnx.ModelProto:
    onnx.checker.check_model(model, full_check=True)
    return model
