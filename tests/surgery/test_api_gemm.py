"""Surgery.gemm_to_conv and gemm_slices_to_convs: the vendor guide's UFLD rewrite, checked numerically
with ONNX Runtime against the original Gemm, and every refusal as one SurgeryError line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.surgery.api import Surgery, SurgeryError

RNG = np.random.default_rng(0)


def constant(name: str, value: object, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def weights(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def model_of(nodes, inputs, outputs, initializers) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(trans_b: int = 1, alpha: float = 1.0, beta: float = 1.0, bias: np.ndarray | None = None) -> onnx.ModelProto:
    """x [2, 24] -> Gemm "fc1" (8 outputs) -> Relu -> Gemm "fc2" (5 outputs) -> y."""
    w1 = weights(8, 24) if trans_b else weights(24, 8)
    inits = [constant("w1", w1), constant("w2", weights(5, 8)), constant("b2", weights(5))]
    fc1_inputs = ["x", "w1"]
    if bias is not None:
        inits.append(constant("b1", bias))
        fc1_inputs.append("b1")
    nodes = [
        helper.make_node("Gemm", fc1_inputs, ["h"], name="fc1", transB=trans_b, alpha=alpha, beta=beta),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2", transB=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 24])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    return model_of(nodes, [x], [y], inits)


def ufld_tail() -> onnx.ModelProto:
    """The guide's UFLD tail in small: Conv -> Reshape to 2D -> Gemm -> Relu -> Gemm -> 4 Slices, each
    Reshaped to an output (the guide's five Reshapes and four Slices)."""
    inits = [
        constant("pool_w", weights(4, 3, 1, 1)),
        constant("flat", [1, 120], np.int64),
        constant("fc1_w", weights(32, 120)),
        constant("fc1_b", weights(32)),
        constant("fc2_w", weights(30, 32)),
        constant("fc2_b", weights(30)),
        constant("axis", [1], np.int64),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "pool_w"], ["pool"], name="/pool/Conv"),
        helper.make_node("Reshape", ["pool", "flat"], ["flat_out"], name="/Reshape"),
        helper.make_node("Gemm", ["flat_out", "fc1_w", "fc1_b"], ["fc1"], name="/cls/cls.1/Gemm", transB=1),
        helper.make_node("Relu", ["fc1"], ["relu"], name="/cls/cls.2/Relu"),
        helper.make_node("Gemm", ["relu", "fc2_w", "fc2_b"], ["fc2"], name="/cls/cls.3/Gemm", transB=1),
    ]
    outputs = []
    bounds = [(0, 12), (12, 24), (-6, -3), (27, 2**62)]  # negative and past-the-end bounds, as exporters write
    shapes = [(1, 2, 6), (1, 3, 4), (1, 3), (1, 3)]
    for k, ((start, end), shape) in enumerate(zip(bounds, shapes, strict=True)):
        inits += [
            constant(f"start{k}", [start], np.int64),
            constant(f"end{k}", [end], np.int64),
            constant(f"shape{k}", shape, np.int64),
        ]
        nodes.append(helper.make_node("Slice", ["fc2", f"start{k}", f"end{k}", "axis"], [f"s{k}"], name=f"/Slice_{k}"))
        nodes.append(helper.make_node("Reshape", [f"s{k}", f"shape{k}"], [f"out{k}"], name=f"/Reshape_{k + 1}"))
        outputs.append(helper.make_tensor_value_info(f"out{k}", TensorProto.FLOAT, shape))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 6])
    return model_of(nodes, [x], outputs, inits)


def op_types(surgery: Surgery) -> list[str]:
    return [node.op_type for node in surgery.model.graph.node]


def assert_same_outputs(surgery: Surgery, tolerance: float = 1e-5, relative: float = 1e-6) -> None:
    """The edited model passes the checker and computes what the original did (within float reordering).

    Reordered float32 sums differ by a few units in the last place of the value, so on outputs of size
    ~100 (the weights come from a module RNG whose draws depend on which tests ran first in the worker)
    the absolute difference can pass 1e-5 while the relative one stays near 1e-7.
    """
    surgery.check()
    rows = surgery.compare()
    assert rows
    for row in rows:
        assert row.max_abs_diff <= tolerance or row.max_rel_diff <= relative, row


@pytest.mark.parametrize(
    ("trans_b", "alpha", "beta", "bias"),
    [
        (1, 1.0, 1.0, weights(8)),
        (0, 1.0, 1.0, weights(1, 8)),
        (1, 0.5, 2.0, weights(8)),
        (1, 1.0, 1.0, None),
        (0, 1.0, 1.0, weights(1)),
    ],
)
def test_gemm_to_conv_computes_the_gemm(trans_b, alpha, beta, bias):
    surgery = Surgery(mlp(trans_b, alpha, beta, bias))
    conv = surgery.gemm_to_conv("fc1", kernel=(2, 3), channels=4, outputs=8)
    assert conv == "fc1_Conv"
    assert op_types(surgery) == ["Reshape", "Conv", "Flatten", "Relu", "Gemm"]
    weight = surgery.find_initializer("fc1_Conv_weight")
    assert weight is not None and weight.shape == (8, 4, 2, 3)
    assert surgery.find_initializer("w1") is None  # the Gemm's own weight went with it
    assert_same_outputs(surgery)


def test_gemm_to_conv_derives_channels_from_the_weight():
    surgery = Surgery(mlp())
    surgery.gemm_to_conv("fc2")  # 8 features, 1x1 kernel: 8 channels
    assert op_types(surgery)[-3:] == ["Reshape", "Conv", "Flatten"]
    assert_same_outputs(surgery)


def test_gemm_to_conv_reads_the_4d_tensor_behind_a_flatten():
    """Conv -> Flatten -> Gemm: the new Conv reads the 4D tensor and the Flatten goes (no Reshape added)."""
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["c"], name="conv"),
        helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w", "b"], ["y"], name="fc", transB=1),
    ]
    inits = [constant("cw", weights(4, 3, 1, 1)), constant("w", weights(7, 24)), constant("b", weights(7))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7])
    surgery = Surgery(model_of(nodes, [x], [y], inits))
    surgery.gemm_to_conv("fc", kernel=(2, 3), channels=4)
    assert op_types(surgery) == ["Conv", "Conv", "Flatten"]
    assert surgery.model.graph.node[1].input[0] == "c"
    assert_same_outputs(surgery)


def test_gemm_to_conv_reads_the_4d_tensor_behind_a_reshape():
    """UFLD's Reshape (1, 8, 10, 25) -> (1, 2000) in small: the Conv reads the pooled tensor itself."""
    surgery = Surgery(ufld_tail())
    surgery.gemm_to_conv("/cls/cls.1/Gemm", kernel=(5, 6), channels=4)
    assert op_types(surgery)[:4] == ["Conv", "Conv", "Flatten", "Relu"]
    assert surgery.model.graph.node[1].input[0] == "pool"
    assert surgery.find_initializer("flat") is None
    assert_same_outputs(surgery)


def test_gemm_to_conv_output_4d_declares_the_new_output_shape():
    surgery = Surgery(mlp())
    surgery.gemm_to_conv("fc2", output_4d=True)
    assert op_types(surgery)[-1] == "Conv"
    dims = [d.dim_value for d in surgery.model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 5, 1, 1]
    (row,) = surgery.compare()
    assert row.note == "reshaped from (2, 5, 1, 1)"
    assert row.max_abs_diff <= 1e-5 or row.max_rel_diff <= 1e-6
    surgery.check()


def test_the_guides_ufld_workflow_keeps_every_output():
    """Remove the five Reshapes, rewrite both Gemms (the second with its Slices) as 4D Convs, clear and
    re-infer shapes: only Conv and Relu remain, and every output matches the original."""
    surgery = Surgery(ufld_tail())
    surgery.remove_nodes_by_op({"Reshape": 5})
    surgery.gemm_to_conv("/cls/cls.1/Gemm", kernel=(5, 6), channels=4, outputs=32, output_4d=True)
    convs = surgery.gemm_slices_to_convs("/cls/cls.3/Gemm", output_4d=True)
    surgery.clear_shapes()
    surgery.infer_shapes()
    assert convs == [f"/cls/cls.3/Gemm_Conv_{k}" for k in range(4)]
    assert op_types(surgery) == ["Conv", "Conv", "Relu", "Conv", "Conv", "Conv", "Conv"]
    shapes = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in surgery.model.graph.output]
    assert shapes == [[1, 12, 1, 1], [1, 12, 1, 1], [1, 3, 1, 1], [1, 3, 1, 1]]
    assert {initializer.name for initializer in surgery.model.graph.initializer} == {
        "pool_w",
        "/cls/cls.1/Gemm_Conv_weight",
        "/cls/cls.1/Gemm_Conv_bias",
        *(f"/cls/cls.3/Gemm_Conv_{k}_{part}" for k in range(4) for part in ("weight", "bias")),
    }
    assert_same_outputs(surgery)


def test_gemm_slices_to_convs_keeps_2d_outputs_by_default():
    surgery = Surgery(ufld_tail())
    surgery.gemm_slices_to_convs("/cls/cls.3/Gemm", kernel=(1, 1), channels=32)
    assert "Slice" not in op_types(surgery)
    assert op_types(surgery).count("Flatten") == 4
    assert_same_outputs(surgery)


def one_line_refusal(call, *words: str) -> SurgeryError:
    """``call`` raises a SurgeryError (exit 9) whose single line contains every one of ``words``."""
    with pytest.raises(SurgeryError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    assert caught.value.exit_code == 9
    for word in words:
        assert word in message, message
    return caught.value


def test_a_kernel_the_weights_do_not_fit_is_refused_and_nothing_changes():
    surgery = Surgery(mlp(bias=weights(8)))
    before = surgery.model.SerializeToString()
    one_line_refusal(lambda: surgery.gemm_to_conv("fc1", kernel=(5, 5), channels=4), "24 input features", "100")
    one_line_refusal(lambda: surgery.gemm_to_conv("fc1", kernel=(5, 5)), "not a multiple of kernel 5x5")
    one_line_refusal(lambda: surgery.gemm_to_conv("fc1", kernel=(2, 3), outputs=16), "8 outputs", "16")
    one_line_refusal(lambda: surgery.gemm_to_conv("fc1", kernel=(0, 3)), "kernel must be")
    assert surgery.model.SerializeToString() == before


def test_gemm_rewrites_refuse_what_is_not_a_suitable_gemm():
    surgery = Surgery(mlp())
    one_line_refusal(lambda: surgery.gemm_to_conv("no_such_node"), "no node named 'no_such_node'")
    one_line_refusal(lambda: surgery.gemm_to_conv("relu"), "'relu' is a Relu, not a Gemm")
    one_line_refusal(lambda: surgery.gemm_slices_to_convs("fc1"), "Relu node 'relu'", "must be a Slice")
    one_line_refusal(lambda: surgery.gemm_slices_to_convs("fc2"), "writes a graph output")


def test_a_gemm_whose_weight_is_an_input_is_refused():
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    surgery = Surgery(model_of(nodes, [x, w], [y], []))
    one_line_refusal(lambda: surgery.gemm_to_conv("fc"), "weight 'w' is not a constant")


def test_a_transposed_input_is_refused():
    model = mlp()
    model.graph.node[0].attribute.append(helper.make_attribute("transA", 1))
    one_line_refusal(lambda: Surgery(model).gemm_to_conv("fc1"), "transA=1")


@pytest.mark.parametrize(
    ("axis", "step", "words"),
    [(0, 1, "only the feature axis"), (1, 2, "step other than 1")],
)
def test_slices_that_are_not_feature_ranges_are_refused(axis, step, words):
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["h"], name="fc", transB=1),
        helper.make_node("Slice", ["h", "start", "end", "axes", "steps"], ["y"], name="slice"),
    ]
    inits = [
        constant("w", weights(6, 4)),
        *(constant(n, [v], np.int64) for n, v in [("start", 0), ("end", 4), ("axes", axis), ("steps", step)]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", "cols"])
    one_line_refusal(lambda: Surgery(model_of(nodes, [x], [y], inits)).gemm_slices_to_convs("fc"), "'slice'", words)
