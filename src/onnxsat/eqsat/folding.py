"""Compute one node's outputs ahead of time, for constant folding, with ONNX Runtime itself.

A folded tensor must equal what the original model computes at run time, so the node is run by the
same engine verification compares against (a one-node model, graph optimizations off), not by a
second implementation of the op that could round or broadcast differently.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

IR_VERSION = 9
"""Old enough for every ONNX Runtime this project supports, new enough for every opset up to 2x."""


def evaluate_node(
    op_type: str,
    domain: str,
    attributes: Sequence[onnx.AttributeProto],
    inputs: Sequence[np.ndarray | None],
    n_outputs: int,
    opset_imports: Sequence[onnx.OperatorSetIdProto],
) -> list[np.ndarray]:
    """The outputs of ``op_type`` applied to constant ``inputs`` (None for an omitted optional input)."""
    names = [f"in{i}" if value is not None else "" for i, value in enumerate(inputs)]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, domain=domain)
    node.attribute.extend(attributes)
    initializers = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, inputs, strict=True) if n]
    graph = helper.make_graph(
        [node], "fold", [], [helper.make_value_info(o, onnx.TypeProto()) for o in outputs], initializers
    )
    model = helper.make_model(graph, opset_imports=list(opset_imports), ir_version=IR_VERSION)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, {})]
