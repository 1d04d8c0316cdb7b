"""AddIntermediateTensorsToOutputs and RemoveAllTensorValueShapes on the document's example."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from catalogue_checks import applied, assert_same_values, feeds, make_model, run
from onnx import helper

from onnxsat.surgery.surgeon import SurgeryError
from onnxsat.surgery.surgeons.outputs import AddIntermediateTensorsToOutputs, RemoveAllTensorValueShapes


def convs() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return make_model(
        [
            helper.make_node("Conv", ["input", "weight"], ["conv1_output"]),
            helper.make_node("Relu", ["conv1_output"], ["relu1_output"]),
            helper.make_node("Conv", ["relu1_output", "weight2"], ["final_output"]),
        ],
        {"input": [1, 2, 5, 5]},
        {"final_output": None},
        {
            "weight": rng.normal(size=(3, 2, 1, 1)).astype(np.float32),
            "weight2": rng.normal(size=(2, 3, 1, 1)).astype(np.float32),
        },
    )


def test_document_example_exposes_the_named_tensors() -> None:
    model = convs()
    result = applied(AddIntermediateTensorsToOutputs(["conv1_output", "relu1_output"]), model).model
    assert [item.name for item in result.graph.output] == ["final_output", "conv1_output", "relu1_output"]
    final, conv, relu = run(result, feeds(model))
    np.testing.assert_array_equal(final, run(model, feeds(model))[0])
    np.testing.assert_array_equal(relu, np.maximum(conv, 0))


def test_none_exposes_every_node_output_once() -> None:
    result = applied(AddIntermediateTensorsToOutputs(), convs()).model
    assert [item.name for item in result.graph.output] == ["final_output", "conv1_output", "relu1_output"]
    assert not AddIntermediateTensorsToOutputs(["final_output"]).apply(convs()).changed


def test_an_unknown_tensor_is_refused_by_name() -> None:
    with pytest.raises(SurgeryError, match="'nope'"):
        AddIntermediateTensorsToOutputs(["nope"]).apply(convs())


def test_remove_all_tensor_value_shapes() -> None:
    model = onnx.shape_inference.infer_shapes(convs())
    result = applied(RemoveAllTensorValueShapes(), model).model
    assert result.graph.value_info and not any(i.type.tensor_type.HasField("shape") for i in result.graph.value_info)
    assert_same_values(model, result)
    outcome = RemoveAllTensorValueShapes().apply(result)
    assert not outcome.changed and "nothing" in outcome.notice
