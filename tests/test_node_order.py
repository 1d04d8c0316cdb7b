"""Node order that counts the outer tensors control-flow bodies read."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from onnxsat.node_order import sort_graph, topological_order


def body_reading(name: str) -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Identity", [name], ["out"])],
        "body",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )


def if_before_its_capture() -> onnx.GraphProto:
    """The If lists only ``flag`` as input, but its branches read ``h``, which a later node makes."""
    return helper.make_graph(
        [
            helper.make_node("If", ["flag"], ["y"], then_branch=body_reading("h"), else_branch=body_reading("x")),
            helper.make_node("Relu", ["x"], ["h"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )


def test_a_body_read_counts_as_an_input() -> None:
    graph = if_before_its_capture()
    assert topological_order(list(graph.node)) == [1, 0]
    assert sort_graph(graph)
    assert [n.op_type for n in graph.node] == ["Relu", "If"]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)


def test_a_valid_order_is_kept_and_keys_break_ties() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])]
    assert topological_order(nodes) == [0, 1]
    assert topological_order(nodes, [(1,), (0,)]) == [1, 0]


def test_a_cycle_leaves_the_graph_as_it_was() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])],
        "g",
        [],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
    )
    assert not sort_graph(graph)
    assert [n.op_type for n in graph.node] == ["Relu", "Neg"]
