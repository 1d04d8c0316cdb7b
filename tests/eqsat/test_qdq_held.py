"""A QDQ model's units (DequantizeLinear -> op -> QuantizeLinear) are left as they are: ONNX Runtime runs
each as one integer kernel, which a rewrite of the middle would turn back into float."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from eqsat_helpers import op_types, roundtrip
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.qdq import held_nodes


def qdq_conv_relu() -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(int8 weight), bias) -> Relu -> Q -> DQ -> y, as ORT's quantizer writes it."""
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8), "w_q"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "y_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_d"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w_d"]),
        helper.make_node("Conv", ["x_d", "w_d", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "y_scale", "y_zero"], ["r_q"]),
        helper.make_node("DequantizeLinear", ["r_q", "y_scale", "y_zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_nodes_between_dequantize_and_quantize_are_held() -> None:
    model = qdq_conv_relu()
    assert sorted(model.graph.node[p].op_type for p in held_nodes(model.graph)) == ["Conv", "Relu"]


def test_conv_relu_inside_a_qdq_unit_is_not_fused_and_runs_the_same_in_ort() -> None:
    """Outside a unit the pair becomes FusedConv (tests/eqsat/test_fusions_activation.py); inside, ORT makes
    it a QLinearConv, so it stays, and ORT with its optimizations on computes exactly what it did."""
    model = qdq_conv_relu()
    trip = roundtrip(model, target="ort")
    assert not trip.fusions
    assert op_types(trip.model) == Counter(node.op_type for node in model.graph.node)
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    outputs = []
    for candidate in (model, trip.model):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(candidate.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, {"x": x})[0])
    np.testing.assert_array_equal(outputs[0], outputs[1])


def qdq_gelu(quantized: bool = True, weight_only: bool = False) -> onnx.ModelProto:
    """x -> [Q -> DQ] -> x * (0.5 * (1 + Erf(x / sqrt(2)))) -> [Q -> DQ] -> y: a GELU written out between a
    quantized model's units, as ORT's quantizer leaves a PyTorch export's ``nn.GELU``. Without ``quantized``,
    the same GELU in float; with ``weight_only``, in float after a MatMul by a dequantized int8 weight."""
    initializers = [
        numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32), "root2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(0.02, np.float32), "scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "zero"),
    ]
    x, y = ("x_d", "g") if quantized and not weight_only else ("x", "y")
    nodes = [
        helper.make_node("Div", [x, "root2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["half", "a"], ["h"]),
        helper.make_node("Mul", [x, "h"], [y]),
    ]
    if weight_only:
        weight = np.random.default_rng(0).integers(-127, 128, (64, 64)).astype(np.int8)
        initializers += [
            numpy_helper.from_array(weight, "w_q"),
            numpy_helper.from_array(np.array(0.01, np.float32), "w_s"),
        ]
        nodes = [
            helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["p"]),
            *(helper.make_node(n.op_type, [("p" if i == "x" else i) for i in n.input], n.output) for n in nodes),
        ]
    elif quantized:
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["x_q"]),
            helper.make_node("DequantizeLinear", ["x_q", "scale", "zero"], ["x_d"]),
            *nodes,
            helper.make_node("QuantizeLinear", ["g", "scale", "zero"], ["g_q"]),
            helper.make_node("DequantizeLinear", ["g_q", "scale", "zero"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_gelu_written_out_between_quantized_units_is_not_fused() -> None:
    """In float the five ops become one Gelu; between a DequantizeLinear and a QuantizeLinear they stay, since
    the fused kernel's rounding, quantized after it, moves whole int8 steps."""
    assert "com.microsoft::Gelu" in op_types(roundtrip(qdq_gelu(quantized=False), target="ort").model)
    trip = roundtrip(qdq_gelu(), target="ort")
    assert not trip.fusions and "com.microsoft::Gelu" not in op_types(trip.model)
    # after a MatMul by a dequantized weight, which stays as it is, the GELU computes in float: fused
    assert "com.microsoft::Gelu" in op_types(roundtrip(qdq_gelu(weight_only=True), target="ort").model)
