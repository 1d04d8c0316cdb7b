"""4D-ization surgeons: the document's examples, valid models, and the same values (same shapes unless
the document says an output becomes 4D, then the same values in row-major order)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from catalogue_checks import (
    applied,
    assert_same_values,
    attribute,
    feeds,
    initializer,
    make_model,
    node,
    op_types,
    run,
)
from onnx import helper

from onnxsat.surgery.surgeon import surgeons
from onnxsat.surgery.surgeons import four_d
from onnxsat.surgery.surgeons._editing import constant_axes

FOUR_D = [
    "Non4DModelInputs",
    "Non4DModelOutputs",
    "Non4DInitializers",
    "Non4DReshape",
    "Non4DExpand",
    "Non4DTranspose",
    "Non4DSlice",
    "Non4DLpNorm",
    "StandaloneReduceSum",
    "Gather",
    "GatherElements",
    "Flatten",
    "RemoveIntermediarySqueezeAndUnsqueeze",
]


def axes_of(model: onnx.ModelProto, item: onnx.NodeProto) -> list[int] | None:
    return constant_axes(model.graph, item)


@pytest.mark.parametrize("name", FOUR_D)
def test_absent_pattern_is_a_no_op_with_a_notice(name: str) -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 2, 3, 4]}, {"y": [1, 2, 3, 4]})
    outcome = surgeons()[name]().apply(model)
    assert not outcome.changed
    assert "nothing" in outcome.notice
    assert outcome.model.SerializeToString() == model.SerializeToString()


def two_inputs(opset: int = 17) -> onnx.ModelProto:
    """The document's Non4DModelInputs example, with a Mul by a scalar standing in for its Conv (a Conv
    cannot read 2D; a [64] factor would broadcast against the new trailing axis)."""
    rng = np.random.default_rng(1)
    return make_model(
        [
            helper.make_node("Mul", ["input1", "weight1"], ["conv1_out"]),
            helper.make_node("Add", ["input2", "bias"], ["add_out"]),
        ],
        {"input1": [32, 64], "input2": [8, 16, 32]},
        {"conv1_out": [32, 64], "add_out": [8, 16, 32]},
        {"weight1": np.float32(rng.normal()), "bias": rng.normal(size=32).astype(np.float32)},
        opset=opset,
    )


@pytest.mark.parametrize("opset", [11, 17])
def test_model_inputs_document_example(opset: int) -> None:
    model = two_inputs(opset)
    result = applied(four_d.Non4DModelInputs(), model).model
    unsqueezes = {item.input[0]: item for item in result.graph.node if item.op_type == "Unsqueeze"}
    assert axes_of(result, unsqueezes["input1"]) == [0, -1]
    assert axes_of(result, unsqueezes["input2"]) == [1]
    assert node(result, "Mul").input[0] == "input1_unsqueeze_input"
    assert node(result, "Add").input[0] == "input2_unsqueeze_input"
    assert [len(item.type.tensor_type.shape.dim) for item in result.graph.input] == [2, 3]
    out1, out2 = assert_same_values(model, result, same_shape=False)
    assert out1.shape == (1, 32, 64, 1) and out2.shape == (8, 1, 16, 32)


def test_model_inputs_then_outputs_round_trip_exactly() -> None:
    model = two_inputs()
    lifted = four_d.Non4DModelInputs().apply(model).model
    result = applied(four_d.Non4DModelOutputs(), lifted).model
    squeezes = {item.output[0]: item for item in result.graph.node if item.op_type == "Squeeze"}
    assert axes_of(result, squeezes["conv1_out"]) == [0, 3]
    assert axes_of(result, squeezes["add_out"]) == [1]
    assert_same_values(model, result)


def test_model_inputs_retargets_an_existing_unsqueeze() -> None:
    model = make_model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]), helper.make_node("Relu", ["u"], ["y"])],
        {"x": [5, 6]},
        {"y": [1, 5, 6]},
        {"axes": np.array([0], dtype=np.int64)},
    )
    result = applied(four_d.Non4DModelInputs(), model).model
    assert op_types(result) == ["Unsqueeze", "Relu"]
    assert axes_of(result, node(result, "Unsqueeze")) == [0, -1]


def test_model_outputs_retargets_a_squeeze_before_a_clip() -> None:
    model = make_model(
        [
            helper.make_node("Squeeze", ["x", "axes"], ["s"]),
            helper.make_node("Clip", ["s", "low", "high"], ["y"]),
        ],
        {"x": [1, 8, 16, 1]},
        {"y": None},
        {"axes": np.array([3], dtype=np.int64), "low": np.float32(-0.5), "high": np.float32(0.5)},
    )
    del model.graph.output[0].type.tensor_type.shape.dim[0]  # declared [8, 16]: the mid-4D-ization state
    outcome = four_d.Non4DModelOutputs().apply(model)
    assert outcome.changed
    result = outcome.model
    assert axes_of(result, node(result, "Squeeze")) == [0, 3]
    (value,) = run(result, feeds(model))
    np.testing.assert_array_equal(value, np.clip(feeds(model)["x"].reshape(8, 16), -0.5, 0.5))


def test_initializers_document_example() -> None:
    rng = np.random.default_rng(2)
    scale, weight = rng.normal(size=64).astype(np.float32), rng.normal(size=(128, 64)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["input", "scale"], ["scaled"]),
            helper.make_node("Conv", ["scaled", "weight"], ["output"]),
        ],
        "doc",
        [helper.make_tensor_value_info("input", 1, [1, 128, 4, 64])],
        [helper.make_tensor_value_info("output", 1, None)],
        [onnx.numpy_helper.from_array(scale, "scale"), onnx.numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # 2D Conv weight
    result = applied(four_d.Non4DInitializers(), model).model
    assert initializer(result, "scale").shape == (1, 1, 1, 64)
    assert initializer(result, "weight").shape == (64, 128, 1, 1)
    x = feeds(result)["input"]
    (out,) = run(result, {"input": x})
    np.testing.assert_allclose(out, np.einsum("nchw,ck->nkhw", x * scale, weight), rtol=1e-4, atol=1e-4)


def test_initializers_leave_matmul_and_gemm_inputs_alone_and_keep_elementwise_values() -> None:
    rng = np.random.default_rng(3)
    model = make_model(
        [
            helper.make_node("Sub", ["x", "bias3d"], ["s"]),
            helper.make_node("MatMul", ["s", "w"], ["m"]),
            helper.make_node("Div", ["m", "d"], ["y"]),
        ],
        {"x": [2, 3, 4]},
        {"y": None},
        {
            "bias3d": rng.normal(size=(2, 3, 4)).astype(np.float32),
            "w": rng.normal(size=(4, 5)).astype(np.float32),
            "d": rng.uniform(1, 2, size=5).astype(np.float32),
        },
    )
    result = applied(four_d.Non4DInitializers(), model).model
    assert initializer(result, "bias3d").shape == (1, 2, 3, 4)
    assert initializer(result, "w").shape == (4, 5)
    assert initializer(result, "d").shape == (1, 1, 1, 5)
    (out,) = assert_same_values(model, result, same_shape=False)
    assert out.shape == (1, 2, 3, 5)


@pytest.mark.parametrize(("target", "expected"), [([-1, 4, 6], [1, -1, 4, 6]), ([0, 0, -1], [0, 0, 1, -1])])
def test_reshape_targets_4d_and_keeps_the_values(target: list[int], expected: list[int]) -> None:
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
        {"x": [2, 3, 8]},
        {"y": None},
        {"shape": np.array(target, dtype=np.int64)},
    )
    result = applied(four_d.Non4DReshape(), model).model
    assert op_types(result) == ["Reshape", "Squeeze", "Relu"]
    assert initializer(result, node(result, "Reshape").input[1]).tolist() == expected
    assert_same_values(model, result)


def test_expand_targets_4d_and_keeps_the_values() -> None:
    model = make_model(
        [helper.make_node("Expand", ["x", "shape"], ["y"])],
        {"x": [3, 1]},
        {"y": [2, 3, 4]},
        {"shape": np.array([2, 3, 4], dtype=np.int64)},
    )
    result = applied(four_d.Non4DExpand(), model).model
    assert initializer(result, node(result, "Expand").input[1]).tolist() == [1, 2, 3, 4]
    assert_same_values(model, result)


def transposes(opset: int) -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
            helper.make_node("Transpose", ["t"], ["y"], perm=[2, 1, 0]),
        ],
        {"x": [2, 3, 5]},
        {"y": [3, 5, 2]},
        opset=opset,
    )


@pytest.mark.parametrize("opset", [11, 17])
def test_transpose_in_4d_then_the_glue_between_two_cancels(opset: int) -> None:
    model = transposes(opset)
    four = applied(four_d.Non4DTranspose(), model).model
    perms = [attribute(item, "perm") for item in four.graph.node if item.op_type == "Transpose"]
    assert perms == [[0, 1, 3, 2], [0, 3, 2, 1]]
    assert op_types(four) == ["Unsqueeze", "Transpose", "Squeeze", "Unsqueeze", "Transpose", "Squeeze"]
    assert_same_values(model, four)
    result = applied(four_d.RemoveIntermediarySqueezeAndUnsqueeze(), four).model
    assert op_types(result) == ["Unsqueeze", "Transpose", "Transpose", "Squeeze"]
    assert_same_values(model, result)


def squeeze_chain(first: str) -> onnx.ModelProto:
    """first(x) -> Squeeze(0) -> Unsqueeze(0) -> Squeeze(-1) -> Relu."""
    return make_model(
        [
            helper.make_node(first, ["x"], ["a"]),
            helper.make_node("Squeeze", ["a", "zero"], ["s"]),
            helper.make_node("Unsqueeze", ["s", "zero"], ["u"]),
            helper.make_node("Squeeze", ["u", "last"], ["w"]),
            helper.make_node("Relu", ["w"], ["y"]),
        ],
        {"x": [1, 4, 1]},
        {"y": None},
        {"zero": np.array([0], dtype=np.int64), "last": np.array([-1], dtype=np.int64)},
    )


def test_intermediary_removal_cancels_only_inverse_pairs() -> None:
    model = squeeze_chain("Relu")
    result = applied(four_d.RemoveIntermediarySqueezeAndUnsqueeze(), model).model
    assert op_types(result) == ["Relu", "Squeeze", "Relu"]
    assert axes_of(result, node(result, "Squeeze")) == [-1]
    assert_same_values(model, result)


def test_intermediary_removal_keeps_the_squeeze_reading_a_graph_input() -> None:
    model = squeeze_chain("Identity")
    model.graph.node[1].input[0] = "x"
    del model.graph.node[0]
    assert not four_d.RemoveIntermediarySqueezeAndUnsqueeze().apply(model).changed


def test_slice_on_the_last_axis_uses_minus_one_and_others_stay() -> None:
    ints = {name: np.array(value, dtype=np.int64) for name, value in
            {"start": [1], "end": [3], "last": [2], "middle": [1]}.items()}  # fmt: skip
    model = make_model(
        [
            helper.make_node("Slice", ["x", "start", "end", "last"], ["a"]),
            helper.make_node("Slice", ["a", "start", "end", "middle"], ["y"]),
        ],
        {"x": [2, 4, 5]},
        {"y": None},
        ints,
    )
    result = applied(four_d.Non4DSlice(), model).model
    first, second = [item for item in result.graph.node if item.op_type == "Slice"]
    assert initializer(result, first.input[3]).tolist() == [-1]
    assert second.input[3] == "middle"
    assert_same_values(model, result)


def test_lpnorm_on_the_last_axis_uses_minus_one() -> None:
    model = make_model(
        [
            helper.make_node("LpNormalization", ["x"], ["a"], axis=2, p=2),
            helper.make_node("LpNormalization", ["a"], ["y"], axis=1, p=1),
        ],
        {"x": [2, 3, 4]},
        {"y": [2, 3, 4]},
    )
    result = applied(four_d.Non4DLpNorm(), model).model
    assert [attribute(item, "axis") for item in result.graph.node] == [-1, 1]
    assert_same_values(model, result)


@pytest.mark.parametrize("opset", [11, 13])
def test_standalone_reducesum_reduces_axis_2_of_the_4d_input(opset: int) -> None:
    axes = np.array([1], dtype=np.int64)
    reduce = (
        helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
        if opset >= 13
        else helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)
    )
    model = make_model([reduce], {"x": [2, 3, 4]}, {"y": [2, 4]}, {"axes": axes} if opset >= 13 else {}, opset=opset)
    result = applied(four_d.StandaloneReduceSum(), model).model
    summed = node(result, "ReduceSum")
    assert axes_of(result, summed) == [2] and attribute(summed, "keepdims") == 1
    (out,) = assert_same_values(model, result, same_shape=False)
    assert out.shape == (2, 1, 1, 4)


def test_gather_scalar_index_becomes_a_vector_on_axis_2() -> None:
    model = make_model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
        {"x": [2, 5, 3]},
        {"y": None},
        {"i": np.array(3, dtype=np.int64)},
    )
    result = applied(four_d.Gather(), model).model
    gather = node(result, "Gather")
    assert attribute(gather, "axis") == 2
    assert initializer(result, gather.input[1]).tolist() == [3]
    (out,) = assert_same_values(model, result, same_shape=False)
    assert out.shape == (2, 1, 1, 3)


def test_gatherelements_3d_indices_get_a_leading_dim() -> None:
    indices = np.random.default_rng(4).integers(0, 4, size=(2, 3, 4)).astype(np.int64)
    model = make_model(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=2)],
        {"x": [2, 3, 4]},
        {"y": None},
        {"i": indices},
    )
    result = applied(four_d.GatherElements(), model).model
    gather = node(result, "GatherElements")
    assert attribute(gather, "axis") == 3
    assert initializer(result, gather.input[1]).shape == (1, 2, 3, 4)
    (out,) = assert_same_values(model, result, same_shape=False)
    assert out.shape == (1, 2, 3, 4)


def test_flatten_document_example() -> None:
    model = make_model(
        [helper.make_node("Flatten", ["input"], ["flattened"], name="flatten", axis=1)],
        {"input": [2, 3, 4]},
        {"flattened": None},
    )
    result = applied(four_d.Flatten(), model).model
    reshape = node(result, "Reshape")
    assert (reshape.name, list(reshape.output)) == ("flatten_reshape", ["flattened"])
    assert initializer(result, reshape.input[1]).tolist() == [1, 1, 1, -1]
    (out,) = assert_same_values(model, result, same_shape=False)
    assert out.shape == (1, 1, 1, 24)
