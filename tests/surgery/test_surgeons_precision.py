"""Float16ToFloat32: every float16 a model makes (weights, Constant and ConstantOfShape values, Cast
targets, declared types, bodies) becomes float32; the interface stays float16 unless asked. Float16Storage:
float32 weights float16 holds exactly take half the bytes behind a Cast, outputs bit for bit the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from catalogue_checks import applied
from onnx import TensorProto, helper, numpy_helper

from onnxsat.surgery.surgeons.precision import Float16Storage, Float16ToFloat32


def half_model() -> onnx.ModelProto:
    """y = If(flag, x * w + 1, x * w) with w a float16 weight, 1 a float16 Constant, plus a float32
    side input cast to float16 and a ConstantOfShape of float16 zeros added to it."""
    w = numpy_helper.from_array(np.linspace(-2, 2, 4).astype(np.float16), "w")
    then_body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.float16))),
            helper.make_node("Add", ["xw", "one"], ["then_y"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("then_y", TensorProto.FLOAT16, [2, 4])],
    )
    else_body = helper.make_graph(
        [helper.make_node("Identity", ["xw"], ["else_y"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", TensorProto.FLOAT16, [2, 4])],
    )
    zeros = numpy_helper.from_array(np.zeros(1, np.float16))
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["xw"]),
        helper.make_node("If", ["flag"], ["picked"], then_branch=then_body, else_branch=else_body),
        helper.make_node("Cast", ["side"], ["side16"], to=TensorProto.FLOAT16),
        helper.make_node("Shape", ["side"], ["side_shape"]),
        helper.make_node("ConstantOfShape", ["side_shape"], ["zero16"], value=zeros),
        helper.make_node("Add", ["side16", "zero16"], ["side_sum"]),
        helper.make_node("Add", ["picked", "side_sum"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "half",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
            helper.make_tensor_value_info("side", TensorProto.FLOAT, [2, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4])],
        [w],
        value_info=[helper.make_tensor_value_info("xw", TensorProto.FLOAT16, [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def outputs(model: onnx.ModelProto, flag: bool) -> np.ndarray:
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.normal(size=(2, 4)).astype(np.float16),
        "flag": np.array(flag),
        "side": rng.normal(size=(2, 4)).astype(np.float32),
    }
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def float16_left(model: onnx.ModelProto) -> list[str]:
    """Where float16 is still made inside the model (its interface aside)."""
    text = str(model.graph.node) + str(model.graph.initializer) + str(model.graph.value_info)
    return [line.strip() for line in text.splitlines() if "elem_type: 10" in line or "data_type: 10" in line]


def test_the_model_computes_in_float32_behind_a_float16_interface() -> None:
    model = half_model()
    outcome = applied(Float16ToFloat32(), model)
    result = outcome.model
    assert "2 float16 input(s)/output(s) kept behind Cast nodes" in outcome.notice
    assert [v.type.tensor_type.elem_type for v in result.graph.input] == [
        TensorProto.FLOAT16,
        TensorProto.BOOL,
        TensorProto.FLOAT,
    ]
    assert result.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    casts = [n for n in result.graph.node if n.op_type == "Cast"]
    targets = [helper.get_attribute_value(n.attribute[0]) for n in casts]
    assert targets.count(TensorProto.FLOAT16) == 1 and casts[-1].output[0] == "y"  # only the way out
    assert float16_left(result) == []
    for flag in (True, False):
        before, after = outputs(model, flag), outputs(result, flag)
        assert after.dtype == np.float16
        np.testing.assert_allclose(after.astype(np.float32), before.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_without_keep_io_types_the_interface_becomes_float32_too() -> None:
    result = applied(Float16ToFloat32(keep_io_types=False), half_model()).model
    assert result.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert result.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert not any(n.op_type == "Cast" and n.output[0] == "y" for n in result.graph.node)


def test_a_float32_model_is_left_as_it_is() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "f32",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    outcome = Float16ToFloat32().apply(helper.make_model(graph))
    assert not outcome.changed and "nothing to upcast" in outcome.notice


def stored_model() -> onnx.ModelProto:
    """y = x @ exact + x @ rounded + x @ small + x @ fed: ``exact`` came from float16, ``rounded`` did not,
    ``small`` has 16 values, ``fed`` is a weight a graph input overrides."""
    rng = np.random.default_rng(1)
    exact = rng.normal(size=(64, 16)).astype(np.float16).astype(np.float32)
    weights = {
        "exact": exact,
        "rounded": rng.normal(size=(64, 16)).astype(np.float32),
        "small": exact[0, :16].copy(),  # 16 values, exact too, added along the last axis
        "fed": exact.copy(),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "exact"], ["a"]),
        helper.make_node("MatMul", ["x", "rounded"], ["b"]),
        helper.make_node("MatMul", ["x", "fed"], ["c"]),
        helper.make_node("Add", ["a", "b"], ["ab"]),
        helper.make_node("Add", ["ab", "c"], ["abc"]),
        helper.make_node("Add", ["abc", "small"], ["y"]),
    ]
    initializers = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    graph = helper.make_graph(
        nodes,
        "stored",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64]),
         helper.make_tensor_value_info("fed", TensorProto.FLOAT, [64, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_weights_float16_holds_exactly_are_stored_in_float16_and_nothing_else_changes() -> None:
    model = stored_model()
    outcome = applied(Float16Storage(min_elements=17), model)
    stored = {t.name: t.data_type for t in outcome.model.graph.initializer}
    assert stored["exact_float16"] == TensorProto.FLOAT16 and "exact" not in stored
    assert stored["rounded"] == stored["fed"] == stored["small"] == TensorProto.FLOAT  # inexact, overridable, small
    assert f"{64 * 16 * 2:,} bytes less" in outcome.notice
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for m in (model, outcome.model)
    ]
    assert np.array_equal(runs[0], runs[1])  # bit for bit


def test_a_model_without_such_weights_is_left_as_it_is() -> None:
    outcome = Float16Storage(names=["rounded"], min_elements=17).apply(stored_model())
    assert not outcome.changed and "nothing to store smaller" in outcome.notice
