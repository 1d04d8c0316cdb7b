"""Interface surgeons on the Olive document's examples: the graph they leave, what it computes, and refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from interface_models import checked, make_model, run, value
from onnx import TensorProto, helper, numpy_helper

from onnxsat.surgery.surgeon import SurgeryError, build_surgeon
from onnxsat.surgery.surgeons.io import (
    ExposeOutputs,
    ExposeQuantizedOutput,
    RemoveInitializerFromInputs,
    RemoveInputs,
    RenameInputs,
    RenameOutputs,
    ReorderInputs,
    ZeroOutInput,
)

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3)).astype(np.float32)
Y = RNG.standard_normal((2, 3)).astype(np.float32)


def add_model() -> onnx.ModelProto:
    """The document's running example: add_output = Add(input1, input2)."""
    node = helper.make_node("Add", ["input1", "input2"], ["add_output"], name="AddNode")
    return make_model([node], [value("input1"), value("input2")], [value("add_output")])


def test_rename_inputs_document_example() -> None:
    model = add_model()
    config = {
        "surgeon": "RenameInputs",
        "old_names": ["input1", "input2"],
        "new_names": ["renamed_input1", "renamed_input2"],
    }
    outcome = build_surgeon(config).apply(model)
    result = checked(outcome.model)
    assert outcome.changed
    assert [v.name for v in result.graph.input] == ["renamed_input1", "renamed_input2"]
    assert list(result.graph.node[0].input) == ["renamed_input1", "renamed_input2"]
    assert [v.name for v in model.graph.input] == ["input1", "input2"], "the input model was modified"
    (after,) = run(result, {"renamed_input1": X, "renamed_input2": Y})
    np.testing.assert_array_equal(after, run(model, {"input1": X, "input2": Y})[0])


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (["input1", "input2"], ["a"], "old_names has 2 names but new_names has 1"),
        (["input9"], ["a"], "the model has no input 'input9'"),
        (["input1"], ["input2"], "cannot rename 'input1' to 'input2': the model already has a tensor 'input2'"),
        (["input1", "input2"], ["a", "a"], "'a' appears twice in new_names"),
    ],
)
def test_rename_inputs_refuses_an_impossible_request(old: list[str], new: list[str], message: str) -> None:
    with pytest.raises(SurgeryError, match=message):
        RenameInputs(old, new).apply(add_model())


def test_rename_inputs_keeps_the_name_of_an_input_that_is_also_an_output() -> None:
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [value("x")], [value("y"), value("x")])
    result = checked(RenameInputs(["x"], ["features"]).apply(model).model)
    assert [v.name for v in result.graph.input] == ["features"]
    assert [v.name for v in result.graph.output] == ["y", "x"]
    negated, passed = run(result, {"features": X})
    np.testing.assert_array_equal(negated, -X)
    np.testing.assert_array_equal(passed, X)


def test_rename_outputs_document_example_and_readers_follow() -> None:
    nodes = [
        helper.make_node("Add", ["input1", "input2"], ["output1"]),
        helper.make_node("Neg", ["output1"], ["output2"]),
    ]
    model = make_model(nodes, [value("input1"), value("input2")], [value("output1"), value("output2")])
    config = {"surgeon": "RenameOutputs", "old_names": ["output1"], "new_names": ["renamed_output1"]}
    outcome = build_surgeon(config).apply(model)
    result = checked(outcome.model)
    assert list(result.graph.node[0].output) == ["renamed_output1"]
    assert list(result.graph.node[1].input) == ["renamed_output1"]
    assert [v.name for v in result.graph.output] == ["renamed_output1", "output2"]
    feeds = {"input1": X, "input2": Y}
    for after, before in zip(run(result, feeds), run(model, feeds), strict=True):
        np.testing.assert_array_equal(after, before)


def test_rename_outputs_leaves_a_passed_through_input_its_name() -> None:
    model = make_model([], [value("x")], [value("x")])
    result = checked(RenameOutputs(["x"], ["y"]).apply(model).model)
    assert [v.name for v in result.graph.input] == ["x"]
    assert [v.name for v in result.graph.output] == ["y"]
    np.testing.assert_array_equal(run(result, {"x": X})[0], X)


def test_rename_outputs_refuses_an_unknown_output() -> None:
    with pytest.raises(SurgeryError, match="the model has no output 'input1'"):
        RenameOutputs(["input1"], ["x"]).apply(add_model())


def test_reorder_inputs_document_example() -> None:
    model = add_model()
    outcome = build_surgeon({"surgeon": "ReorderInputs", "permutation": [1, 0]}).apply(model)
    result = checked(outcome.model)
    assert [v.name for v in result.graph.input] == ["input2", "input1"]
    assert list(result.graph.node[0].input) == ["input1", "input2"]
    np.testing.assert_array_equal(run(result, {"input1": X, "input2": Y})[0], X + Y)


def test_reorder_inputs_identity_is_a_no_op_and_a_bad_permutation_is_refused() -> None:
    outcome = ReorderInputs([0, 1]).apply(add_model())
    assert not outcome.changed
    with pytest.raises(SurgeryError, match=r"permutation \[0, 0\] is not a rearrangement of the model's 2 input"):
        ReorderInputs([0, 0]).apply(add_model())


def test_remove_inputs_refuses_the_document_example_which_would_leave_a_one_input_add() -> None:
    with pytest.raises(SurgeryError, match="input 'input2' feeds required input 1 of Add node 'AddNode'"):
        build_surgeon({"surgeon": "RemoveInputs", "names": ["input2"]}).apply(add_model())


def test_remove_inputs_blanks_optional_slots_and_trims_trailing_ones() -> None:
    node = helper.make_node("Clip", ["x", "low", "high"], ["y"])
    model = make_model([node], [value("x"), value("low", []), value("high", [])], [value("y")])
    low, high = np.array(-0.5, np.float32), np.array(0.25, np.float32)
    without_low = checked(RemoveInputs(["low"]).apply(model).model)
    assert list(without_low.graph.node[0].input) == ["x", "", "high"]
    assert [v.name for v in without_low.graph.input] == ["x", "high"]
    np.testing.assert_array_equal(run(without_low, {"x": X, "high": high})[0], np.minimum(X, high))
    without_high = checked(RemoveInputs(["high"]).apply(model).model)
    assert list(without_high.graph.node[0].input) == ["x", "low"]
    np.testing.assert_array_equal(run(without_high, {"x": X, "low": low})[0], np.maximum(X, low))


def test_remove_inputs_turns_an_overridable_initializer_into_a_constant() -> None:
    model = add_model()
    model.graph.initializer.append(numpy_helper.from_array(Y, "input2"))
    result = checked(RemoveInputs(["input2"]).apply(model).model)
    assert [v.name for v in result.graph.input] == ["input1"]
    np.testing.assert_array_equal(run(result, {"input1": X})[0], X + Y)


def test_remove_inputs_refuses_an_unknown_name() -> None:
    with pytest.raises(SurgeryError, match="the model has no input 'mask'"):
        RemoveInputs(["mask"]).apply(add_model())


def test_zero_out_input_document_example_then_remove_the_unread_input() -> None:
    node = helper.make_node("Add", ["input1", "input2"], ["add_output"], name="AddNode")
    model = make_model([node], [value("input1", ["N", 3]), value("input2", ["N", 3])], [value("add_output", ["N", 3])])
    outcome = build_surgeon({"surgeon": "ZeroOutInput", "node_name": "AddNode", "input_idx": 1}).apply(model)
    result = checked(outcome.model)
    constant, add = result.graph.node
    assert constant.op_type == "Constant"
    assert list(constant.output) == ["AddNode_zero_output_0"]
    assert list(add.input) == ["input1", "AddNode_zero_output_0"]
    zeros = numpy_helper.to_array(constant.attribute[0].t)
    assert zeros.shape == (1, 3) and zeros.dtype == np.float32 and not zeros.any()
    np.testing.assert_array_equal(run(result, {"input1": X, "input2": Y})[0], X)
    trimmed = checked(RemoveInputs(["input2"]).apply(result).model)
    np.testing.assert_array_equal(run(trimmed, {"input1": X})[0], X)


@pytest.mark.parametrize(
    ("node_name", "index", "message"),
    [("Nowhere", 0, "the model has no node named 'Nowhere'"), ("AddNode", 2, "node 'AddNode' has no input 2")],
)
def test_zero_out_input_refuses_a_missing_node_or_slot(node_name: str, index: int, message: str) -> None:
    with pytest.raises(SurgeryError, match=message):
        ZeroOutInput(node_name, index).apply(add_model())


def test_zero_out_input_refuses_a_tensor_of_unknown_shape() -> None:
    node = helper.make_node("Add", ["input1", "input2"], ["add_output"], name="AddNode")
    model = make_model([node], [value("input1"), value("input2", None)], [value("add_output")])
    with pytest.raises(SurgeryError, match="the type or shape of 'input2'"):
        ZeroOutInput("AddNode", 1).apply(model)


def relu_between() -> onnx.ModelProto:
    """x -> ReluNode -> relu_output -> Neg -> y: the document's Relu, inside a graph."""
    nodes = [
        helper.make_node("Relu", ["x"], ["relu_output"], name="ReluNode"),
        helper.make_node("Neg", ["relu_output"], ["y"]),
    ]
    return make_model(nodes, [value("x")], [value("y")])


def test_expose_outputs_document_example() -> None:
    model = relu_between()
    outcome = build_surgeon({"surgeon": "ExposeOutputs", "names": ["ReluNode"]}).apply(model)
    result = checked(outcome.model)
    assert [v.name for v in result.graph.output] == ["y", "relu_output"]
    assert result.graph.output[1].type.tensor_type.elem_type == TensorProto.FLOAT
    negated, relu = run(result, {"x": X})
    np.testing.assert_array_equal(relu, np.maximum(X, 0))
    np.testing.assert_array_equal(negated, run(model, {"x": X})[0])
    assert not ExposeOutputs(["ReluNode"]).apply(result).changed


def test_expose_outputs_refuses_an_unknown_node() -> None:
    with pytest.raises(SurgeryError, match="the model has no node named 'Gelu'"):
        ExposeOutputs(["ReluNode", "Gelu"]).apply(relu_between())


def quantized_model(zero_point: bool = True) -> onnx.ModelProto:
    """x -> QuantizeLinear -> quantized_tensor -> DequantizeLinear -> output1 (per-tensor uint8)."""
    params = ["scale", "zero_point"] if zero_point else ["scale"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *params], ["quantized_tensor"]),
        helper.make_node("DequantizeLinear", ["quantized_tensor", *params], ["output1"]),
    ]
    constants = [numpy_helper.from_array(np.array(0.02, np.float32), "scale")]
    if zero_point:
        constants.append(numpy_helper.from_array(np.array(128, np.uint8), "zero_point"))
    return make_model(nodes, [value("x")], [value("output1")], constants)


@pytest.mark.parametrize("zero_point", [True, False])
def test_expose_quantized_output_document_example(zero_point: bool) -> None:
    model = quantized_model(zero_point)
    outcome = build_surgeon({"surgeon": "ExposeQuantizedOutput", "output_name": "output1"}).apply(model)
    result = checked(outcome.model)
    names = [v.name for v in result.graph.output]
    assert names == ["quantized_tensor", "output1_scale", "output1_zero_point"]
    assert "DequantizeLinear" not in [node.op_type for node in result.graph.node]
    assert result.graph.output[0].type.tensor_type.elem_type == TensorProto.UINT8
    quantized, scale, offset = run(result, {"x": X})
    assert quantized.dtype == np.uint8 and offset.dtype == np.uint8
    dequantized = (quantized.astype(np.float32) - offset.astype(np.float32)) * scale
    np.testing.assert_array_equal(dequantized, run(model, {"x": X})[0])


def test_expose_quantized_output_refuses_an_output_not_computed_by_dequantize_linear() -> None:
    with pytest.raises(SurgeryError, match="output 'y' comes from a Neg node, not a DequantizeLinear"):
        ExposeQuantizedOutput("y").apply(relu_between())
    with pytest.raises(SurgeryError, match="the model has no output 'relu_output'"):
        ExposeQuantizedOutput("relu_output").apply(relu_between())


def with_listed_initializer(ir_version: int) -> onnx.ModelProto:
    model = add_model()
    model.ir_version = ir_version
    model.graph.initializer.append(numpy_helper.from_array(Y, "input2"))
    return model


def test_remove_initializer_from_inputs_document_example() -> None:
    model = with_listed_initializer(10)
    outcome = build_surgeon({"surgeon": "RemoveInitializerFromInputs"}).apply(model)
    result = checked(outcome.model)
    assert [v.name for v in result.graph.input] == ["input1"]
    assert [t.name for t in result.graph.initializer] == ["input2"]
    np.testing.assert_array_equal(run(result, {"input1": X})[0], run(model, {"input1": X})[0])
    again = RemoveInitializerFromInputs().apply(result)
    assert not again.changed
    assert again.notice == "no initializer is listed as an input: nothing to remove"


def test_remove_initializer_from_inputs_refuses_ir_version_3() -> None:
    with pytest.raises(SurgeryError, match="IR version 3 requires every initializer to be a graph input"):
        RemoveInitializerFromInputs().apply(with_listed_initializer(3))
