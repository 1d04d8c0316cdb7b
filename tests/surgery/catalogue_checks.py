"""Build small graphs with onnx.helper and compare a surgeon's result with the original in ONNX Runtime
(shared by the test_surgeons_* files of the accelerator / quantization half of the catalogue)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import interface_models
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int]],
    outputs: Mapping[str, Sequence[int] | None],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
    input_type: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """A checked model; outputs are float tensors of the given shape (None: the inferred shape)."""
    graph = helper.make_graph(
        list(nodes),
        "catalogue_test",
        [helper.make_tensor_value_info(name, input_type, list(shape)) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs.items()],
        [numpy_helper.from_array(np.asarray(value), name) for name, value in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = {item.name: item for item in onnx.shape_inference.infer_shapes(model).graph.output}
    for output in model.graph.output:
        if outputs[output.name] is None:
            output.type.CopyFrom(inferred[output.name].type)
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random float32 values for every (static-shaped) graph input."""
    rng = np.random.default_rng(seed)
    result = {}
    for item in model.graph.input:
        shape = [dim.dim_value for dim in item.type.tensor_type.shape.dim]
        result[item.name] = rng.normal(size=shape).astype(np.float32)
    return result


def run(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return interface_models.run(model, dict(inputs))


def applied(surgeon: Surgeon, model: onnx.ModelProto) -> SurgeryOutcome:
    """Apply ``surgeon``, asserting it left ``model`` untouched, changed something, and made a valid model."""
    before = model.SerializeToString()
    outcome = surgeon.apply(model)
    assert model.SerializeToString() == before, "the surgeon modified its input model"
    assert outcome.changed, outcome.notice
    onnx.checker.check_model(outcome.model, full_check=True)
    return outcome


def assert_same_values(
    original: onnx.ModelProto, result: onnx.ModelProto, seed: int = 0, atol: float = 1e-5, same_shape: bool = True
) -> list[np.ndarray]:
    """Both models on the same seeded inputs give the same outputs (after flattening when
    ``same_shape`` is False: for surgeons documented to change an output's rank). Returns the result's."""
    inputs = feeds(original, seed)
    expected, actual = run(original, inputs), run(result, inputs)
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        if same_shape:
            assert want.shape == got.shape
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=atol)
    return actual


def op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    """The single node of ``op_type``."""
    (found,) = [item for item in model.graph.node if item.op_type == op_type]
    return found


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    (found,) = [item for item in model.graph.initializer if item.name == name]
    return numpy_helper.to_array(found)


def attribute(item: onnx.NodeProto, name: str) -> object:
    (found,) = [entry for entry in item.attribute if entry.name == name]
    return helper.get_attribute_value(found)
