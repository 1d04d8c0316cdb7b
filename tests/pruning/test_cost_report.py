"""Before / after figures of ``onnxsat prune``: counted on Paddle-style exports, or said to be unknown."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pruning_helpers import prune, run

from onnxsat.inputs import InputSpec
from onnxsat.profile.counting import profile_model
from onnxsat.profile.shapes import ShapesUnknownError
from onnxsat.pruning.cost import counted_macs, parameter_count
from onnxsat.pruning.report import PruneReport


def constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def paddle_style(batch: int | str = -1) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> GlobalAveragePool -> Reshape to [N, 4] -> Gemm, as Paddle2ONNX writes it at
    opset 11: weights in Constant nodes, a batch dim of -1, and the Reshape target computed from the
    pooled tensor's Shape through Slice and two Casts (ONNX shape inference cannot follow it)."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(size=(8, 3, 3, 3)).astype(np.float32),
        "w2": rng.normal(size=(4, 8, 3, 3)).astype(np.float32),
        "fc": rng.normal(size=(4, 5)).astype(np.float32),
    }
    nodes = [constant(name, value) for name, value in weights.items()]
    nodes += [constant(n, np.array([v], np.int64)) for n, v in (("zero", 0), ("one", 1), ("axis0", 0))]
    nodes.append(constant("four", np.array([4], np.int32)))
    nodes += [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="c2", pads=[1] * 4),
        helper.make_node("GlobalAveragePool", ["c2"], ["pool"], name="pool"),
        helper.make_node("Shape", ["pool"], ["shape"], name="shape"),
        helper.make_node("Cast", ["shape"], ["shape32"], name="cast32", to=TensorProto.INT32),
        helper.make_node("Slice", ["shape32", "zero", "one", "axis0"], ["batch"], name="batch"),
        helper.make_node("Concat", ["batch", "four"], ["target32"], name="concat", axis=0),
        helper.make_node("Cast", ["target32"], ["target"], name="cast64", to=TensorProto.INT64),
        helper.make_node("Reshape", ["pool", "target"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "fc"], ["y"], name="fc_mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "paddle_style",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    return model


def test_macs_of_a_paddle_style_export_are_counted_with_a_run_for_the_shapes_inference_misses() -> None:
    model = paddle_style()
    with pytest.raises(ShapesUnknownError, match="'flat'"):
        profile_model(model, {"x": [1, 3, 8, 8]}, allow_onnxruntime=False)
    macs, why = counted_macs(model, {"x": [1, 3, 8, 8]})
    assert why == "" and macs == profile_model(model, {"x": [1, 3, 8, 8]}).macs
    dynamic_as_one, _ = counted_macs(model)  # -1, h and w taken as 1
    assert dynamic_as_one == profile_model(model, {"x": [1, 3, 1, 1]}).macs


def test_weights_in_constant_nodes_are_parameters_before_and_after() -> None:
    model = paddle_style()
    assert parameter_count(model) == 8 * 27 + 4 * 72 + 20 + 4  # the four int scalars too, as after pruning
    pruned, report = prune(model, rate=0.5, inputs=InputSpec({"x": [2, 3, 8, 8]}))
    assert report.params["original"] == parameter_count(model) > report.params["pruned"]
    assert report.macs_unknown == "" and report.macs["original"] > report.macs["pruned"] > 0  # type: ignore[operator]
    assert "MACs unknown" not in report.to_table()
    assert run(pruned, {"x": np.ones((2, 3, 8, 8), np.float32)})[0].shape == (2, 5)


def test_unknown_macs_are_said_with_the_reason_in_summary_and_table() -> None:
    report = PruneReport("in.onnx", None, "l1", "tree-level", 0.5, params={"original": 10, "pruned": 5})
    report.macs = {"original": None, "pruned": None}
    report.macs_unknown = "shape inference cannot tell the shape of 't'"
    assert report.summary()[0].endswith("params 5 of 10, MACs unknown: shape inference cannot tell the shape of 't'")
    assert "MACs unknown: shape inference cannot tell" in report.to_table()
    report.macs = {"original": 20, "pruned": 8}
    assert report.summary()[0].endswith("MACs 8 of 20")
