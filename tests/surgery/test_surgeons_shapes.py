"""InferShapes and RemoveShapes on the Olive document's examples: annotations added or dropped, outputs unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from interface_models import make_model, run
from onnx import TensorProto, helper

from onnxsat.surgery.surgeon import SurgeryError, build_surgeon
from onnxsat.surgery.surgeons.shapes import InferShapes, RemoveShapes, static_dims, tensor_types


def float_input(name: str, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def add_relu(value_info: list[onnx.ValueInfoProto] = (), output_shape: list[int] | None = None) -> onnx.ModelProto:
    """The document's RemoveShapes example: Add -> Relu over two [1] inputs."""
    nodes = [
        helper.make_node("Add", ["input1", "input2"], ["intermediate"], name="Add"),
        helper.make_node("Relu", ["intermediate"], ["output1"], name="Relu"),
    ]
    inputs = [float_input("input1", [1]), float_input("input2", [1])]
    return make_model(nodes, inputs, [float_input("output1", output_shape)], value_info=value_info)


FEEDS = {"input1": np.array([0.5], np.float32), "input2": np.array([-2.0], np.float32)}


def test_infer_shapes_fills_the_output_shape_of_the_document_example() -> None:
    nodes = [helper.make_node("Add", ["input1", "input2"], ["add_output"])]
    model = make_model(
        nodes, [float_input("input1", [1]), float_input("input2", [1])], [float_input("add_output", None)]
    )
    outcome = build_surgeon({"surgeon": "InferShapes"}).apply(model)
    assert outcome.changed
    assert static_dims(outcome.model.graph.output[0].type.tensor_type) == [1]
    assert not model.graph.output[0].type.tensor_type.HasField("shape"), "the input model was modified"
    onnx.checker.check_model(outcome.model, full_check=True)
    np.testing.assert_array_equal(run(outcome.model, FEEDS)[0], run(model, FEEDS)[0])


def test_infer_shapes_annotates_intermediates_and_a_second_run_changes_nothing() -> None:
    outcome = InferShapes().apply(add_relu())
    assert [(v.name, static_dims(v.type.tensor_type)) for v in outcome.model.graph.value_info] == [
        ("intermediate", [1])
    ]
    again = InferShapes().apply(outcome.model)
    assert not again.changed
    assert again.notice == "shape inference found nothing new to annotate"


def test_infer_shapes_reports_a_model_whose_annotation_contradicts_the_graph() -> None:
    model = add_relu()
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    with pytest.raises(SurgeryError, match="InferShapes: ONNX shape inference fails"):
        InferShapes().apply(model)


def test_tensor_types_knows_initializers_inputs_and_inferred_values() -> None:
    model = add_relu()
    model.graph.initializer.append(helper.make_tensor("w", TensorProto.FLOAT16, [2, 3], np.zeros(6)))
    types = tensor_types(model)
    assert static_dims(types["w"]) == [2, 3]
    assert types["w"].elem_type == TensorProto.FLOAT16
    assert static_dims(types["intermediate"]) == [1]
    assert static_dims(types.get("nowhere")) is None


def test_remove_shapes_drops_value_info_of_the_document_example_only() -> None:
    model = add_relu([float_input("intermediate", [1])], output_shape=[1])
    outcome = build_surgeon({"surgeon": "RemoveShapes"}).apply(model)
    assert outcome.changed
    assert outcome.notice == "removed 1 value_info entries"
    assert len(outcome.model.graph.value_info) == 0
    assert len(model.graph.value_info) == 1, "the input model was modified"
    assert [static_dims(v.type.tensor_type) for v in outcome.model.graph.input] == [[1], [1]]
    assert static_dims(outcome.model.graph.output[0].type.tensor_type) == [1]
    onnx.checker.check_model(outcome.model, full_check=True)
    np.testing.assert_array_equal(run(outcome.model, FEEDS)[0], run(model, FEEDS)[0])


def test_remove_shapes_reaches_into_subgraphs() -> None:
    branch_value = float_input("inner", [1])
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["input1"], ["inner"]), helper.make_node("Abs", ["inner"], ["then_out"])],
        "then",
        [],
        [float_input("then_out", [1])],
        value_info=[branch_value],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["input1"], ["else_out"])], "else", [], [float_input("else_out", [1])]
    )
    node = helper.make_node("If", ["flag"], ["output1"], then_branch=then_branch, else_branch=else_branch)
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    model = make_model([node], [flag, float_input("input1", [1])], [float_input("output1", [1])])
    outcome = RemoveShapes().apply(model)
    assert outcome.changed
    assert len(outcome.model.graph.node[0].attribute[0].g.value_info) == 0
    feeds = {"flag": np.array(True), "input1": np.array([-3.0], np.float32)}
    np.testing.assert_array_equal(run(outcome.model, feeds)[0], np.array([3.0], np.float32))


def test_remove_shapes_without_value_info_is_a_no_op() -> None:
    outcome = RemoveShapes().apply(add_relu())
    assert not outcome.changed
    assert outcome.notice == "no value_info: nothing to remove"
