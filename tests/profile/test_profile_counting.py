"""Per-node MACs, parameters and memory on graphs small enough to count by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from profile_models import conv_relu, model, weight

from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec
from onnxsat.profile.counting import profile_model
from onnxsat.profile.shapes import INFERENCE, ORT_RUN, ShapesUnknownError
from onnxsat.profile.table import profile_table
from onnxsat.pruning.cost import mac_count
from onnxsat.zoo.synthetic import simple_classifier


def test_conv_macs_params_and_memory() -> None:
    profile = profile_model(conv_relu())
    conv, relu = profile.layers
    outputs = 8 * 10 * 10
    assert conv.macs == outputs * 3 * 3 * 3 + outputs  # Cout*H*W * Cin*k*k, plus one add per output for the bias
    assert conv.params == 8 * 3 * 3 * 3 + 8
    assert conv.weight_bytes == 4 * conv.params and conv.output_bytes == 4 * outputs
    assert conv.memory_bytes == 4 * (224 + 800)
    assert (relu.macs, relu.params, relu.memory_bytes) == (outputs, 0, 4 * outputs)
    assert (profile.macs, profile.params, profile.memory_bytes) == (22_400 + 800, 224, 4 * (224 + 1600))
    assert profile.op_counts == {"Conv": 1, "Relu": 1} and profile.shape_method == INFERENCE


def test_conv_without_bias_and_grouped() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], "dw", group=4)
    (layer,) = profile_model(model([node], [("x", [2, 4, 6, 6])], ["y"], [weight("w", 4, 1, 3, 3)])).layers
    assert layer.output_shapes == ((2, 4, 4, 4),)
    assert layer.macs == 2 * 4 * 4 * 4 * (1 * 3 * 3)


def test_gemm_and_matmul() -> None:
    gemm = helper.make_node("Gemm", ["a", "w", "c"], ["g"], "gemm", transB=1)
    matmul = helper.make_node("MatMul", ["t", "m"], ["p"], "matmul")
    profile = profile_model(
        model(
            [gemm, matmul],
            [("a", [2, 16]), ("t", [2, 3, 5])],
            ["g", "p"],
            [weight("w", 4, 16), weight("c", 4), weight("m", 5, 7)],
        )
    )
    assert [layer.macs for layer in profile.layers] == [2 * 4 * 16 + 2 * 4, 2 * 3 * 7 * 5]
    assert [layer.params for layer in profile.layers] == [4 * 16 + 4, 5 * 7]


def test_elementwise_ops_count_the_broadcast_output() -> None:
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"], "add"),
        helper.make_node("Sigmoid", ["a"], ["s"], "sigmoid"),
        helper.make_node("Div", ["s", "x"], ["d"], "div"),
        helper.make_node("Sum", ["d", "a", "s"], ["y"], "sum"),
        helper.make_node("Reshape", ["y", "shape"], ["r"], "reshape"),
    ]
    shape = numpy_helper.from_array(np.array([6], np.int64), "shape")
    profile = profile_model(model(nodes, [("x", [2, 3])], ["r"], [weight("bias", 3), shape]))
    assert [layer.macs for layer in profile.layers] == [6, 6 * 32, 6 * 4, 6 * 2, 0]
    assert profile.params == 3 + 1


def test_seed_table_1_simple_classifier_original_row() -> None:
    """The seed's Table 1 reports 671,050 MACs, 62,006 params, 308,032 bytes for its SimpleClassifier."""
    profile = profile_model(simple_classifier())
    assert (profile.macs, profile.params, profile.memory_bytes) == (671_050, 62_006, 308_032)


def test_fused_conv_counts_like_conv_and_its_shapes_come_from_inference() -> None:
    plain, fused = profile_model(conv_relu()), profile_model(conv_relu(fused=True))
    assert fused.shape_method == INFERENCE
    assert fused.op_counts == {"com.microsoft.FusedConv": 1}
    assert fused.macs == plain.layers[0].macs  # the activation is not counted: it does no multiply-accumulate
    assert fused.memory_bytes == plain.memory_bytes - plain.layers[1].memory_bytes
    assert fused.layers[0].output_shapes == ((1, 8, 10, 10),)


def test_contrib_op_without_a_twin_is_shaped_by_one_onnxruntime_run() -> None:
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], "fmm", domain="com.microsoft", transA=1)
    relu = helper.make_node("Relu", ["y"], ["z"], "relu")
    contrib = model([node, relu], [("a", [5, 3])], ["z"], [weight("b", 5, 4)], microsoft=True)
    profile = profile_model(contrib)
    assert profile.shape_method == ORT_RUN
    assert profile.layers[0].output_shapes == ((3, 4),)
    assert [layer.macs for layer in profile.layers] == [3 * 4 * 5, 3 * 4]
    with pytest.raises(ShapesUnknownError, match="'y'"):
        profile_model(contrib, allow_onnxruntime=False)


def test_dynamic_inputs_need_shapes_named() -> None:
    dynamic = model([helper.make_node("Relu", ["pixel_values"], ["y"], "relu")], [("pixel_values", ["N", 3])], ["y"])
    with pytest.raises(ShapesUnknownError, match="--input-shape pixel_values:1,3"):
        profile_model(dynamic)
    assert profile_model(dynamic, {"pixel_values": [4, 3]}).macs == 12
    with pytest.raises(SettingsError, match="does not fit"):
        profile_model(dynamic, {"pixel_values": [4, 5]})


def test_unread_initializers_and_constants() -> None:
    constant = helper.make_node("Constant", [], ["k"], "k", value=numpy_helper.from_array(np.ones(3, np.float32)))
    add = helper.make_node("Add", ["x", "k"], ["y"], "add")
    profile = profile_model(model([constant, add], [("x", [3])], ["y"], [weight("unused", 10)]))
    assert profile.params == 13  # a Constant node's tensor is a weight like an initializer; unread ones count too
    assert [layer.op_type for layer in profile.layers] == ["Add"]  # the Constant was read as an initializer
    assert [layer.params for layer in profile.layers] == [3]
    assert [layer.memory_bytes for layer in profile.layers] == [12 + 12]


def test_pruning_cost_uses_the_profile_with_dynamic_dims_as_one() -> None:
    dynamic = conv_relu()
    dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    assert mac_count(dynamic) == profile_model(conv_relu()).macs
    assert mac_count(dynamic, {"x": [2, 3, 10, 10]}) == 2 * profile_model(conv_relu()).macs


@pytest.mark.parametrize(("op", "gates"), [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_macs_are_the_gate_products(op: str, gates: int) -> None:
    seq, batch, features, hidden = 5, 2, 6, 8
    node = helper.make_node(op, ["x", "w", "r"], ["y"], "rnn", hidden_size=hidden, direction="bidirectional")
    weights = [weight("w", 2, gates * hidden, features), weight("r", 2, gates * hidden, hidden)]
    (layer,) = profile_model(model([node], [("x", [seq, batch, features])], ["y"], weights)).layers
    assert layer.macs == seq * batch * 2 * gates * hidden * (features + hidden)


def test_sequence_outputs_are_profiled_without_tensor_facts() -> None:
    """An If whose branches return a sequence: ONNX Runtime hands back a list, not an array."""
    sequence = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    then_branch = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"])], "then", [], [sequence])
    else_branch = helper.make_graph(
        [helper.make_node("SequenceEmpty", [], ["s"], dtype=TensorProto.FLOAT)], "else", [], [sequence]
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["seq"], then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    profile = profile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    assert [layer.op_type for layer in profile.layers] == ["ReduceSum", "Greater", "If"]
    assert profile.layers[-1].output_shapes == ()
    assert profile.uncounted_ops == ("SequenceConstruct", "SequenceEmpty")  # the branches' ops, not the If


def _matmul_branch(name: str, width: int) -> onnx.GraphProto:
    """A branch computing ``x @ w`` with its own [4, width] weight, after a Reshape to a target the model
    is given at run time: shape inference cannot size what follows it, an ONNX Runtime run can."""
    nodes = [
        helper.make_node("Reshape", ["x", "target"], [f"{name}_x"]),
        helper.make_node("MatMul", [f"{name}_x", f"{name}_w"], [f"{name}_y"]),
        helper.make_node("ReduceSum", [f"{name}_y"], [f"{name}_out"], keepdims=0),
    ]
    out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)
    return helper.make_graph(nodes, name, [], [out], [weight(f"{name}_w", 4, width)])


def _if_model() -> onnx.ModelProto:
    """A merged-decoder-like model: the whole computation is in an If's branches."""
    node = helper.make_node(
        "If", ["flag"], ["y"], "branches", then_branch=_matmul_branch("a", 8), else_branch=_matmul_branch("b", 2)
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("target", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


_IF_FEEDS = InputSpec(given={"target": np.array([3, 4], np.int64)})


def test_an_if_counts_its_larger_branch_and_both_branches_weights() -> None:
    """Each branch is run in the If's place to size its tensors: the whole model is counted."""
    profile = profile_model(_if_model(), _IF_FEEDS)
    (layer,) = profile.layers
    assert layer.macs == 3 * 8 * 4 + 3 * 8  # the larger branch: MatMul [3,4]x[4,8], then its ReduceSum
    assert layer.params == profile.params == 4 * 8 + 4 * 2  # each branch's own weight
    assert profile.uncounted_ops == () and profile.unsized == 0 and profile.shape_method == ORT_RUN


def test_without_onnxruntime_a_branch_s_unknown_sizes_count_zero_and_are_said() -> None:
    profile = profile_model(_if_model(), _IF_FEEDS, allow_onnxruntime=False)
    assert profile.layers[0].macs == 0
    assert profile.unsized == 4  # each branch's MatMul and ReduceSum; the Reshape costs nothing anyway
    assert "note: 4 nodes inside bodies counted as 0" in profile_table(profile, "m.onnx", 0)
    assert profile.shape_method == INFERENCE


def _loop_model(trips: onnx.TensorProto | None) -> onnx.ModelProto:
    """A Loop adding ``x @ w`` to a carried value; its trip count a constant or a graph input."""
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["carried", "w"], ["product"]),
            helper.make_node("Add", ["product", "carried"], ["next"]),
            helper.make_node("Identity", ["condition"], ["go_on"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("condition", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried", TensorProto.FLOAT, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("go_on", TensorProto.BOOL, []),
            helper.make_tensor_value_info("next", TensorProto.FLOAT, [2, 4]),
        ],
    )
    loop = helper.make_node("Loop", ["trips", "", "x"], ["y"], "loop", body=body)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])]
    if trips is None:
        inputs.append(helper.make_tensor_value_info("trips", TensorProto.INT64, []))
    initializers = [weight("w", 4, 4), *([trips] if trips is not None else [])]
    graph = helper.make_graph(
        [loop], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializers
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_loop_counts_its_body_times_a_constant_trip_count() -> None:
    profile = profile_model(_loop_model(numpy_helper.from_array(np.array(5, np.int64), "trips")))
    assert profile.layers[0].macs == 5 * (2 * 4 * 4 + 2 * 4)  # MatMul and Add, five times
    assert profile.per_iteration == ()


def test_a_loop_with_a_trip_count_given_at_run_time_counts_one_iteration_and_says_so() -> None:
    profile = profile_model(_loop_model(None))
    assert profile.layers[0].macs == 2 * 4 * 4 + 2 * 4
    assert profile.per_iteration == ("loop",)
    assert "note: loop counted for one iteration" in profile_table(profile, "m.onnx", 0)


def test_a_scikit_learn_model_s_weights_in_attributes_are_parameters() -> None:
    """skl2onnx and onnxmltools keep a linear model's (or a forest's) weights in the node's attributes:
    those are its parameters, stored as the attributes hold them."""
    import onnx

    node = helper.make_node(
        "LinearClassifier",
        ["x"],
        ["label", "scores"],
        "linear",
        domain="ai.onnx.ml",
        coefficients=[0.5] * 12,
        intercepts=[0.0, 1.0, 2.0],
        classlabels_ints=[0, 1, 2],
    )
    graph = helper.make_graph(
        [node],
        "sklearn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    profile = profile_model(onnx.helper.make_model(graph, opset_imports=opsets, ir_version=8))
    (layer,) = profile.layers
    assert layer.params == profile.params == 12 + 3 + 3
    assert layer.weight_bytes == 4 * 15 + 8 * 3


@pytest.mark.parametrize(
    ("equation", "shapes", "macs"),
    [
        ("ij,jk->ik", [[5, 8], [8, 4]], 5 * 8 * 4),
        ("...ij,jk->...ik", [[2, 3, 5, 8], [8, 4]], 2 * 3 * 5 * 8 * 4),  # the ellipsis covers 2 and 3
        ("...ij,...jk->...ik", [[1, 3, 5, 8], [2, 1, 8, 4]], 2 * 3 * 5 * 8 * 4),  # broadcast to [2, 3]
    ],
)
def test_einsum_counts_every_index_once(equation: str, shapes: list[list[int]], macs: int) -> None:
    names = [f"in{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], "einsum", equation=equation)
    (layer,) = profile_model(model([node], list(zip(names, shapes, strict=True)), ["y"], [])).layers
    assert layer.macs == macs


def test_quantized_forms_count_as_the_float_ops_they_replace(tmp_path: Path) -> None:
    """ORT's QOperator form (QLinearConv, QGemm), its dynamic form (ConvInteger, MatMulInteger) and 4-bit
    MatMulNBits had no MAC rule: a quantized model profiled at 2,196 MACs against 494,346 for its original.
    Their Conv, Gemm and MatMul products now count as in the float model, and MatMulNBits's packed weight
    has K x N parameters."""
    from onnxruntime.quantization import QuantFormat, matmul_nbits_quantizer, quantize_dynamic

    from onnxsat.zoo.digits_cnn import bundled_digits_cnn
    from tests.ort_quantized import statically_quantized_digits_cnn

    shape = {"input": [1, 1, 8, 8]}

    def products(path: Path | str) -> dict[str, int]:
        kinds = {"Conv": "Conv", "QLinearConv": "Conv", "ConvInteger": "Conv", "Gemm": "Gemm", "QGemm": "Gemm"}
        kinds |= {"MatMul": "Gemm", "MatMulInteger": "Gemm"}  # dynamic quantization splits Gemm into MatMul + Add
        found: dict[str, int] = {}
        for layer in profile_model(onnx.load(path), shape).layers:
            if layer.op_type in kinds:
                found[kinds[layer.op_type]] = found.get(kinds[layer.op_type], 0) + layer.macs
        return found

    qop, dyn = tmp_path / "qop.onnx", tmp_path / "dyn.onnx"
    statically_quantized_digits_cnn(qop, QuantFormat.QOperator)
    quantize_dynamic(bundled_digits_cnn(), dyn, op_types_to_quantize=["Conv", "MatMul", "Gemm"])
    float_products = products(bundled_digits_cnn())
    assert products(qop) == float_products  # biases folded into the quantized op count as in the float op
    assert (
        products(dyn)["Conv"]
        == float_products["Conv"]
        - sum(  # ConvInteger takes no bias: a separate Add
            layer.output_shapes[0][1] * int(np.prod(layer.output_shapes[0][2:]))
            for layer in profile_model(onnx.load(bundled_digits_cnn()), shape).layers
            if layer.op_type == "Conv"
        )
    )
    for path in (qop, dyn):
        assert not profile_model(onnx.load(path), shape).uncounted_ops

    matmul = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [1, 64])], ["y"], [weight("w", 64, 128)])
    quantizer = matmul_nbits_quantizer.MatMulNBitsQuantizer(matmul, block_size=32, bits=4)
    quantizer.process()
    nbits = quantizer.model.model
    (layer,) = [layer for layer in profile_model(nbits).layers if layer.op_type == "MatMulNBits"]
    assert layer.macs == 64 * 128 and profile_model(nbits).params >= 64 * 128


def test_a_branch_the_inputs_cannot_run_leaves_its_nodes_unsized(monkeypatch: pytest.MonkeyPatch) -> None:
    """Running a branch in its If's place is best effort: one that fails leaves its nodes counted 0 and said,
    not the whole profile refused."""
    from onnxsat.errors import RuntimeUnsupportedError
    from onnxsat.profile import shapes as shapes_module

    real = shapes_module._read_off

    def branch_fails(model: onnx.ModelProto, *args: object) -> None:
        if not any(node.op_type == "If" for node in model.graph.node):  # the copy with a branch inlined
            raise RuntimeUnsupportedError("ONNX Runtime cannot run the model to learn its shapes: a bad branch")
        real(model, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(shapes_module, "_read_off", branch_fails)
    profile = profile_model(_if_model(), _IF_FEEDS)
    assert profile.layers[0].macs == 0 and profile.unsized == 4


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_opset_23_attention_counts_its_two_products_and_its_softmax(layout: str) -> None:
    """It counted 0 (no rule): the attention of an encoder exported at opset 23 vanished from its MACs."""
    batch, heads, seq, depth = 1, 4, 16, 8
    if layout == "4d":
        shapes, attrs = [batch, heads, seq, depth], {}
    else:
        shapes, attrs = [batch, seq, heads * depth], {"q_num_heads": heads, "kv_num_heads": heads}
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], "attention", **attrs)
    built = model([node], [(name, shapes) for name in "qkv"], ["y"])
    del built.opset_import[:]
    built.opset_import.append(helper.make_opsetid("", 23))
    built.ir_version = 10
    (layer,) = profile_model(built).layers
    scores = batch * heads * seq * seq
    assert layer.macs == scores * 2 * depth + 36 * scores
