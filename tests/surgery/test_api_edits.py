"""Surgery's initializer, node-removal, shape, check and save methods: exact edits keep ONNX Runtime's
outputs, refusals are one SurgeryError line that leaves the model as it was, and saving is atomic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat import model_io
from onnxsat.errors import InputNotFoundError, InvalidModelError, OutputPathError
from onnxsat.surgery.api import Surgery, SurgeryError


def model_of(nodes, inputs, outputs, initializers) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def chain() -> onnx.ModelProto:
    """x [2, 6] -> Identity -> Mul(scale) -> no-op Reshape [2, 6] -> Relu -> Reshape [2, 3, 2] -> y."""
    inits = [
        numpy_helper.from_array(np.full((6,), 2.0, np.float32), "scale"),
        numpy_helper.from_array(np.array([2, 6], np.int64), "same_shape"),
        numpy_helper.from_array(np.array([2, 3, 2], np.int64), "out_shape"),
    ]
    nodes = [
        helper.make_node("Identity", ["x"], ["i"], name="identity"),
        helper.make_node("Mul", ["i", "scale"], ["m"], name="mul"),
        helper.make_node("Reshape", ["m", "same_shape"], ["r"], name="noop_reshape"),
        helper.make_node("Relu", ["r"], ["a"], name="relu"),
        helper.make_node("Reshape", ["a", "out_shape"], ["y"], name="out_reshape"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 2])
    return model_of(nodes, [x], [y], inits)


def names(surgery: Surgery) -> list[str]:
    return [node.name for node in surgery.model.graph.node]


def refused(call, *words: str, error: type[Exception] = SurgeryError) -> None:
    """``call`` raises ``error`` with one line containing every one of ``words``."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_surgery_edits_a_copy_of_the_callers_model():
    model = chain()
    before = model.SerializeToString()
    surgery = Surgery(model)
    surgery.remove_nodes(["identity"])
    assert model.SerializeToString() == before
    assert surgery.original.SerializeToString() == before


def test_find_add_and_replace_initializers():
    surgery = Surgery(chain())
    np.testing.assert_array_equal(surgery.find_initializer("scale"), np.full((6,), 2.0, np.float32))
    assert surgery.find_initializer("missing") is None
    assert surgery.find_initializer("x") is None  # a graph input is not an initializer
    surgery.add_initializer("offset", np.arange(3, dtype=np.int64))
    np.testing.assert_array_equal(surgery.find_initializer("offset"), [0, 1, 2])
    refused(lambda: surgery.add_initializer("offset", np.zeros(3)), "'offset' already exists", "replace=True")
    refused(lambda: surgery.add_initializer("relu", np.zeros(3)), "a tensor or node of the model has that name")
    surgery.add_initializer("scale", np.full((6,), 3.0, np.float32), replace=True)
    (row,) = surgery.compare()
    assert row.max_abs_diff > 0  # the new scale changes the result: the replacement is what the model reads


def test_remove_initializer_refuses_one_still_read_unless_forced():
    surgery = Surgery(chain())
    surgery.add_initializer("unused", np.zeros(2, np.float32))
    surgery.remove_initializer("unused")
    assert surgery.find_initializer("unused") is None
    refused(lambda: surgery.remove_initializer("scale"), "'scale' is still read by mul", "force=True")
    refused(lambda: surgery.remove_initializer("nothing"), "no initializer named 'nothing'")
    surgery.remove_initializer("scale", force=True)
    assert surgery.find_initializer("scale") is None
    refused(surgery.check, "ONNX checker", error=InvalidModelError)  # 'scale' now comes from nowhere


def test_removing_identity_and_a_no_op_reshape_keeps_the_outputs_exactly():
    surgery = Surgery(chain())
    surgery.remove_nodes(["identity", "noop_reshape"])
    assert names(surgery) == ["mul", "relu", "out_reshape"]
    assert surgery.model.graph.node[0].input[0] == "x"
    assert surgery.find_initializer("same_shape") is None  # only the removed Reshape read it
    surgery.check()
    (row,) = surgery.compare()
    assert (row.min_diff, row.max_diff, row.max_abs_diff, row.note) == (0.0, 0.0, 0.0, "")


def test_removing_the_node_before_an_output_lets_its_producer_write_the_output():
    surgery = Surgery(chain())
    surgery.remove_nodes(["out_reshape"])
    assert list(surgery.model.graph.node[-1].output) == ["y"]
    surgery.infer_shapes()
    assert [d.dim_value for d in surgery.model.graph.output[0].type.tensor_type.shape.dim] == [2, 6]
    (row,) = surgery.compare()
    assert row.max_abs_diff == 0.0
    assert row.note == "reshaped from (2, 6)"


def test_removing_a_chain_in_any_order():
    """Removing id2 first makes id1's output the graph output itself; id1 must still be found."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["h"], name="id1"),
        helper.make_node("Identity", ["h"], ["y"], name="id2"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    surgery = Surgery(model_of(nodes, [x], [y], []))
    surgery.remove_nodes(["id2", "id1", "id2"])
    assert [(node.name, list(node.output)) for node in surgery.model.graph.node] == [("relu", ["y"])]
    assert surgery.compare()[0].max_abs_diff == 0.0


def test_remove_nodes_by_op_takes_the_first_ones_in_graph_order():
    surgery = Surgery(chain())
    surgery.remove_nodes_by_op({"Reshape": 1, "Identity": 1})
    assert names(surgery) == ["mul", "relu", "out_reshape"]
    refused(lambda: surgery.remove_nodes_by_op({"Reshape": 2}), "cannot remove 2 Reshape nodes: the model has 1")
    refused(lambda: surgery.remove_nodes_by_op({"Softmax": 1}), "the model has 0")


def test_node_removal_refusals_leave_the_model_unchanged():
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("Add", ["x", "h"], ["y"], name="add"),
        helper.make_node("Split", ["y"], ["y0", "y1"], name="split", axis=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in ("y0", "y1")]
    surgery = Surgery(model_of(nodes, [x], outputs, []))
    before = surgery.model.SerializeToString()
    refused(lambda: surgery.remove_nodes(["relu", "no_such_node"]), "no node named 'no_such_node'")
    refused(lambda: surgery.remove_nodes(["relu", "add"]), "Add node 'add'", "one data input")
    refused(lambda: surgery.remove_nodes(["split"]), "Split node 'split'", "more than its first output")
    assert surgery.model.SerializeToString() == before


def test_a_node_between_graph_input_and_output_cannot_be_bypassed():
    """Removing both Identities would need the graph output to be the graph input itself."""
    nodes = [
        helper.make_node("Identity", ["x"], ["h"], name="first"),
        helper.make_node("Identity", ["h"], ["y"], name="second"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    surgery = Surgery(model_of(nodes, [x], [y], []))
    before = surgery.model.SerializeToString()
    refused(lambda: surgery.remove_nodes(["first", "second"]), "graph output 'y' would become 'x'")
    assert surgery.model.SerializeToString() == before  # 'first' was removed on the working copy only


def test_set_shapes_and_re_infer():
    surgery = Surgery(chain())
    surgery.infer_shapes()
    assert surgery.model.graph.value_info
    surgery.clear_shapes()
    assert not surgery.model.graph.value_info
    surgery.set_input_shape("x", ["batch", 6])
    surgery.set_output_shape("y", [None, 3, 2])
    x_dims = surgery.model.graph.input[0].type.tensor_type.shape.dim
    assert [(d.dim_param, d.dim_value) for d in x_dims] == [("batch", 0), ("", 6)]
    surgery.infer_shapes()
    assert surgery.model.graph.value_info
    refused(lambda: surgery.set_input_shape("scale", [6]), "no graph input named 'scale'", "its inputs: x")
    refused(lambda: surgery.set_output_shape("a", [2, 6]), "no graph output named 'a'")
    refused(lambda: surgery.set_input_shape("x", [2, -1]), "sizes >= 0")


def test_infer_shapes_refuses_a_declared_shape_the_graph_contradicts():
    surgery = Surgery(chain())
    surgery.set_output_shape("y", [2, 6])
    refused(surgery.infer_shapes, "shape inference fails", error=InvalidModelError)


def test_save_writes_a_checked_model_and_never_the_loaded_file(tmp_path: Path):
    source = tmp_path / "model.onnx"
    onnx.save(chain(), source)
    before = source.read_bytes()
    surgery = Surgery.load(source)
    surgery.remove_nodes(["identity"])
    refused(lambda: surgery.save(source), "the input model itself", error=OutputPathError)
    assert source.read_bytes() == before
    target = tmp_path / "edited.onnx"
    surgery.save(target)
    assert [n.name for n in onnx.load(target).graph.node] == ["mul", "noop_reshape", "relu", "out_reshape"]
    refused(
        lambda: surgery.save(tmp_path / "missing" / "x.onnx"), "output folder does not exist", error=OutputPathError
    )


def test_save_writes_nothing_for_an_invalid_model_or_a_failed_write(tmp_path: Path, monkeypatch):
    surgery = Surgery(chain())
    surgery.remove_initializer("scale", force=True)
    refused(lambda: surgery.save(tmp_path / "broken.onnx"), "ONNX checker", error=InvalidModelError)
    assert list(tmp_path.iterdir()) == []

    def disk_full(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_io.os, "fsync", disk_full)
    refused(lambda: Surgery(chain()).save(tmp_path / "full.onnx"), "No space left", error=OutputPathError)
    assert list(tmp_path.iterdir()) == []  # neither the model nor a temporary file


def test_a_model_with_external_weights_is_edited_and_saved_whole(tmp_path: Path):
    source = tmp_path / "external.onnx"
    onnx.save(chain(), source, save_as_external_data=True, location="weights.bin", size_threshold=0)
    surgery = Surgery.load(source)
    np.testing.assert_array_equal(surgery.find_initializer("scale"), np.full((6,), 2.0, np.float32))
    surgery.remove_nodes(["noop_reshape"])
    surgery.save(tmp_path / "edited.onnx")
    saved = onnx.load(tmp_path / "edited.onnx")
    assert [t.name for t in saved.graph.initializer] == ["scale", "out_shape"]
    assert not any(t.external_data for t in saved.graph.initializer)  # the weights came along, in the file


def test_load_refuses_a_missing_file(tmp_path: Path):
    refused(lambda: Surgery.load(tmp_path / "absent.onnx"), "input model not found", error=InputNotFoundError)
