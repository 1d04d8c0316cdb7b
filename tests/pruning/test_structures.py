"""Each tree structure pruned for real: valid model, channels gone from every tensor, rate 0 changes nothing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, assert_rate_zero_is_identity, kept, prune, run, shape_of, status

from onnxsat.errors import SettingsError
from onnxsat.pruning.graph import attr
from onnxsat.pruning.layout import flatten_axis
from onnxsat.pruning.prune import PruneOptions, association_trees, prune_model


def groups_by_root(model: onnx.ModelProto) -> dict[str, object]:
    _, _, forest = association_trees(model)
    return {root.node: group for group in forest.groups for root in group.roots}


def one_to_one() -> onnx.ModelProto:
    b = Builder()
    b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    return b.model([b.conv("c2", "r1", 8, 4)])


def test_one_to_one_conv_relu_conv() -> None:
    model = one_to_one()
    assert groups_by_root(model)["c1"].structure == "one-to-one"
    pruned, report = prune(model, rate=0.5)
    assert shape_of(pruned, "c1_w") == [4, 3, 3, 3]
    assert shape_of(pruned, "c1_b") == [4]
    assert shape_of(pruned, "c2_w") == [4, 4, 3, 3]
    assert status(report, "c2").startswith("unprunable: reaches graph output")
    assert run(pruned)[0].shape == (2, 4, 8, 8)
    assert_rate_zero_is_identity(model)


def test_one_to_many_conv_feeding_two_convs() -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    b.node("Relu", [b.conv("a", r, 8, 6)], "ra")
    b.node("Relu", [b.conv("b", r, 8, 6, k=1)], "rb")
    model = b.model([b.conv("ya", "ra", 6, 2), b.conv("yb", "rb", 6, 2)])
    assert groups_by_root(model)["c1"].structure == "one-to-many"
    pruned, _ = prune(model, rate=0.25)
    assert shape_of(pruned, "c1_w")[0] == 6
    assert shape_of(pruned, "a_w")[1] == 6 and shape_of(pruned, "b_w")[1] == 6
    assert shape_of(pruned, "a_w")[0] == 5 and shape_of(pruned, "ya_w")[1] == 5
    assert_rate_zero_is_identity(model)


def test_many_to_one_residual_add_of_two_convs() -> None:
    b = Builder()
    s = b.node("Add", [b.conv("a", "x", 3, 8), b.conv("b", "x", 3, 8, k=1)], "sum")
    model = b.model([b.conv("y", b.node("Relu", [s], "r"), 8, 2)])
    group = groups_by_root(model)["a"]
    assert group is groups_by_root(model)["b"] or group.roots == groups_by_root(model)["b"].roots
    assert group.structure == "many-to-one" and group.prunable
    pruned, report = prune(model, rate=0.5)
    assert shape_of(pruned, "a_w")[0] == shape_of(pruned, "b_w")[0] == shape_of(pruned, "y_w")[1] == 4
    assert kept(report, "a") == 4
    assert_rate_zero_is_identity(model)


def residual_block(from_input: bool) -> onnx.ModelProto:
    """x -> [c0 -> relu] = block input -> c1 -> relu -> c2 -> Add(block input) -> relu -> c3 -> y."""
    b = Builder()
    block_input = "x" if from_input else b.node("Relu", [b.conv("c0", "x", 3, 8)], "r0")
    channels = 3 if from_input else 8
    r1 = b.node("Relu", [b.conv("c1", block_input, channels, 6)], "r1")
    s = b.node("Add", [b.conv("c2", r1, 6, channels), block_input], "add")
    return b.model([b.conv("c3", b.node("Relu", [s], "r2"), channels, 2)])


def test_residual_add_with_the_block_input_couples_to_its_producer() -> None:
    model = residual_block(from_input=False)
    group = groups_by_root(model)["c2"]
    assert [r.node for r in group.roots] == ["c0", "c2"] and group.structure == "many-to-many"
    pruned, report = prune(model, rate=0.5)
    assert shape_of(pruned, "c0_w")[0] == shape_of(pruned, "c2_w")[0] == 4
    assert shape_of(pruned, "c1_w")[1] == shape_of(pruned, "c3_w")[1] == 4
    assert kept(report, "c1") == 3
    assert_rate_zero_is_identity(model)


def test_residual_add_with_the_graph_input_is_unprunable() -> None:
    model = residual_block(from_input=True)
    pruned, report = prune(model, rate=0.5)
    assert "no root produces" in status(report, "c2")
    assert shape_of(pruned, "c2_w")[0] == 3
    assert shape_of(pruned, "c1_w")[0] == 3  # its own group is still pruned


def test_many_to_many_two_roots_two_leaves() -> None:
    b = Builder()
    s = b.node("Relu", [b.node("Add", [b.conv("a", "x", 3, 8), b.conv("b", "x", 3, 8)], "sum")], "r")
    model = b.model([b.node("Add", [b.conv("la", s, 8, 2), b.conv("lb", s, 8, 2, k=1)], "y")])
    assert groups_by_root(model)["a"].structure == "many-to-many"
    pruned, _ = prune(model, rate=0.5)
    assert [shape_of(pruned, f"{n}_w")[1] for n in ("la", "lb")] == [4, 4]
    assert_rate_zero_is_identity(model)


def fire(e3_weight: np.ndarray | None = None) -> onnx.ModelProto:
    """SqueezeNet fire: squeeze 1x1 -> relu -> (expand 1x1, expand 3x3) -> relu -> Concat -> Conv."""
    b = Builder()
    s = b.node("Relu", [b.conv("squeeze", "x", 3, 4, k=1)], "rs")
    e1 = b.node("Relu", [b.conv("e1", s, 4, 6, k=1)], "r1")
    e3 = b.node("Relu", [b.conv("e3", s, 4, 8, weight=e3_weight)], "r3")
    cat = b.node("Concat", [e1, e3], "cat", axis=1)
    return b.model([b.conv("final", cat, 14, 2)])


def test_concat_maps_each_root_to_its_offset() -> None:
    model = fire()
    groups = groups_by_root(model)
    leaf = [s for s in groups["e3"].slices if s.role == "leaf"]
    assert [(s.initializer, s.axis, s.offset, s.block) for s in leaf] == [("final_w", 1, 6, 1)]
    pruned, report = prune(model, rate=0.5)
    assert kept(report, "e1") == 3 and kept(report, "e3") == 4 and kept(report, "squeeze") == 2
    assert shape_of(pruned, "final_w")[1] == 7
    assert_rate_zero_is_identity(model)


def test_pruning_zero_filters_behind_a_concat_changes_no_output() -> None:
    """Channels whose filters and biases are all zero are pruned (they score 0) and nothing else moves:
    the slices of e3, its bias and the final Conv's input columns at offset 6 agree."""
    weight = np.random.default_rng(3).normal(size=(8, 4, 3, 3)).astype(np.float32)
    dead = [0, 2, 5, 7]
    weight[dead] = 0.0
    model = fire(weight)
    for tensor in model.graph.initializer:
        if tensor.name == "e3_b":
            bias = onnx.numpy_helper.to_array(tensor).copy()
            bias[dead] = 0.0
            tensor.CopyFrom(onnx.numpy_helper.from_array(bias, "e3_b"))
    pruned, _ = prune(model, rate=0.5, exclude=["e1", "squeeze"])
    assert shape_of(pruned, "e3_w")[0] == 4 and shape_of(pruned, "final_w")[1] == 10
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)


def mobilenet_block() -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> depthwise Conv -> Relu -> Conv (MobileNet's pattern)."""
    b = Builder()
    c = 8
    bn_inputs = [b.conv("expand", "x", 3, c, bias=False)]
    for part, low in (("scale", 0.5), ("shift", -0.5), ("mean", -0.5), ("var", 0.5)):
        values = b.rng.uniform(low, low + 1.0, size=c).astype(np.float32)
        bn_inputs.append(b.const(f"bn_{part}", values))
    r = b.node("Relu", [b.node("BatchNormalization", bn_inputs, "bn")], "r1")
    d = b.node("Relu", [b.conv("dw", r, c, c, group=c)], "r2")
    return b.model([b.conv("project", d, c, 2, k=1)])


def test_depthwise_conv_follows_its_input_channels() -> None:
    model = mobilenet_block()
    group = groups_by_root(model)["expand"]
    assert sorted({s.role for s in group.slices}) == ["gain", "leaf", "offset", "root", "statistic"]
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "expand_w")[0] == 4
    assert [shape_of(pruned, f"bn_{p}") for p in ("scale", "shift", "mean", "var")] == [[4]] * 4
    assert shape_of(pruned, "dw_w") == [4, 1, 3, 3] and shape_of(pruned, "dw_b") == [4]
    assert attr(next(n for n in pruned.graph.node if n.name == "dw"), "group") == 4
    assert shape_of(pruned, "project_w")[1] == 4
    assert_rate_zero_is_identity(model)


def test_grouped_conv_that_is_not_depthwise_is_unprunable() -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    model = b.model([b.conv("g", r, 8, 4, group=2)])
    assert "grouped Conv 'g' (group=2)" in groups_by_root(model)["c1"].reasons[0]


def test_flatten_then_gemm_prunes_blocks_of_rows() -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 6)], "r1")
    p = b.node("MaxPool", [r], "pool", kernel_shape=[2, 2], strides=[2, 2])
    f = b.node("Flatten", [p], "flat", axis=1)
    model = b.model([b.node("Gemm", [f, b.random("fc_w", 5, 6 * 16), b.random("fc_b", 5)], "fc", transB=1)])
    leaf = next(s for s in groups_by_root(model)["c1"].slices if s.role == "leaf")
    assert (leaf.axis, leaf.offset, leaf.block) == (1, 0, 16)
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "fc_w") == [5, 3 * 16]
    assert_rate_zero_is_identity(model)


def test_global_pool_and_reshape_target_are_updated() -> None:
    """GlobalAveragePool -> Reshape to [N, C] (a literal C in the target) -> Gemm, as torchvision exports."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    g = b.node("GlobalAveragePool", [r], "gap")
    v = b.node("Reshape", [g, b.const("target", np.array([2, 8], dtype=np.int64))], "view")
    model = b.model([b.node("Gemm", [v, b.random("fc_w", 8, 5), b.random("fc_b", 5)], "fc")])
    pruned, _ = prune(model, rate=0.25)
    assert shape_of(pruned, "fc_w") == [6, 5]
    target = next(t for t in pruned.graph.initializer if t.name == "target")
    assert onnx.numpy_helper.to_array(target).tolist() == [2, 6]
    assert_rate_zero_is_identity(model)


def test_channels_followed_through_transpose_to_a_matmul() -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 6)], "r1")
    t = b.node("Transpose", [r], "nhwc", perm=[0, 2, 3, 1])
    model = b.model([b.node("MatMul", [t, b.random("mm_w", 6, 4)], "mm")])
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "mm_w") == [3, 4]
    assert_rate_zero_is_identity(model)


def test_a_group_reaching_a_graph_output_is_unprunable() -> None:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    model = b.model([r, b.conv("c2", r, 8, 2)])
    _, _, forest = association_trees(model)
    assert all(not g.prunable for g in forest.groups)
    assert "reaches graph output 'r1'" in forest.groups[0].reasons


def test_per_channel_mul_constant_is_sliced() -> None:
    b = Builder()
    scale = b.const("scale", np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(1, 8, 1, 1))
    m = b.node("Mul", [b.conv("c1", "x", 3, 8), scale], "scaled")
    model = b.model([b.conv("c2", b.node("Relu", [m], "r"), 8, 2)])
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "scale") == [1, 4, 1, 1]
    assert_rate_zero_is_identity(model)


def composite() -> onnx.ModelProto:
    """BN, depthwise, residual Add with the block input, a fire-style Concat, MaxPool, Flatten -> Gemm."""
    b = Builder()
    bn = [b.conv("c0", "x", 3, 8, bias=False)]
    bn += [b.const(f"bn_{p}", b.rng.uniform(0.5, 1.5, size=8).astype(np.float32)) for p in ("s", "b", "m", "v")]
    r0 = b.node("Relu", [b.node("BatchNormalization", bn, "bn")], "r0")
    d = b.node("Relu", [b.conv("dw", r0, 8, 8, group=8)], "rd")
    s = b.node("Relu", [b.node("Add", [b.conv("c1", d, 8, 8, k=1), r0], "add")], "rs")
    e1 = b.node("Relu", [b.conv("e1", s, 8, 4, k=1)], "re1")
    e3 = b.node("Relu", [b.conv("e3", s, 8, 6)], "re3")
    cat = b.node("Concat", [e1, e3], "cat", axis=1)
    flat = b.node("Flatten", [b.node("MaxPool", [cat], "pool", kernel_shape=[2, 2], strides=[2, 2])], "flat")
    return b.model([b.node("Gemm", [flat, b.random("fc_w", 160, 5), b.random("fc_b", 5)], "fc")])


def test_pruning_dead_channels_of_every_group_changes_no_output() -> None:
    """Zero the chosen channels' producers (filters, biases, BN scale and shift, depthwise filters) in
    every group, prune exactly those: the outputs stay equal, so every slice of every tree agrees."""
    from onnxsat.pruning.apply import positions
    from onnxsat.pruning.importance import channels_to_prune

    model = composite()
    _, _, forest = association_trees(model)
    assert sorted(g.structure for g in forest.groups if g.prunable) == ["many-to-many", "one-to-one", "one-to-one"]
    values = {t.name: onnx.numpy_helper.to_array(t).copy() for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    for group in forest.groups:
        if group.prunable:
            dead = np.sort(rng.choice(group.channels, channels_to_prune(group.channels, 0.5), replace=False))
            for piece in group.slices:
                if piece.role in ("root", "root bias", "gain", "offset"):
                    np.moveaxis(values[piece.initializer], piece.axis, 0)[positions(piece, dead)] = 0.0
    for tensor in model.graph.initializer:
        tensor.CopyFrom(onnx.numpy_helper.from_array(values[tensor.name], tensor.name))
    pruned, report = prune(model, rate=0.5)
    assert shape_of(pruned, "fc_w") == [2 * 16 + 3 * 16, 5]
    assert report.params["pruned"] < 0.5 * report.params["original"]
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(composite())


def test_a_bias_computed_from_constants_is_unprunable_with_the_fix_named() -> None:
    """Paddle2ONNX's Conv bias: Add of a Reshape of a constant. Not sliceable until folded."""
    b = Builder()
    bias = b.node("Reshape", [b.random("bias", 8), b.const("to_nchw", np.array([1, 8, 1, 1], np.int64))], "bias_4d")
    model = b.model([b.conv("c2", b.node("Add", [b.conv("c1", "x", 3, 8, bias=False), bias], "add"), 8, 2)])
    assert groups_by_root(model)["c1"].reasons == [
        "Add 'add' ties them to 'bias_4d', which no root produces (computed from constants: fold them first "
        "with onnxsat optimize)"
    ]


def test_a_shared_weight_copied_for_one_reader_is_a_graph_input_in_ir3() -> None:
    """IR versions before 4 list every initializer as a graph input; the copy made when two Convs share a
    bias must be listed too, or the checker refuses the pruned model."""
    rng = np.random.default_rng(0)
    weights = {
        "w0": rng.standard_normal((8, 3, 3, 3)),
        "w1": rng.standard_normal((8, 8, 3, 3)),
        "w1b": rng.standard_normal((8, 8, 3, 3)),
        "b": rng.standard_normal(8),
        "w2": rng.standard_normal((4, 8, 3, 3)),
    }
    nodes = [
        onnx.helper.make_node("Conv", ["x", "w0", "b"], ["c0"], "c0", pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Relu", ["c0"], ["r0"]),
        onnx.helper.make_node("Conv", ["r0", "w1"], ["c1"], "c1", pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Relu", ["c1"], ["r1"]),
        onnx.helper.make_node("Conv", ["r1", "w1b", "b"], ["c2"], "c2", pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Relu", ["c2"], ["r2"]),
        onnx.helper.make_node("Conv", ["r2", "w2"], ["y"], "c3", pads=[1, 1, 1, 1]),
    ]
    initializers = [onnx.numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()]
    inputs = [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])]
    inputs += [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in initializers]
    output = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])
    graph = onnx.helper.make_graph(nodes, "ir3", inputs, [output], initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 8)], ir_version=3)
    pruned, _ = prune(model, rate=0.5)  # checks the result with the full checker and runs it
    assert {t.name for t in pruned.graph.initializer} <= {v.name for v in pruned.graph.input}
    assert any("__pruned_" in t.name for t in pruned.graph.initializer)


def test_a_weight_applied_twice_keeps_its_groups_whole() -> None:
    """ALBERT runs one layer's weights in every layer. Pruning one application would write a sliced copy beside
    the weight, and the "pruned" model had more parameters than the original (1.7x on an ALBERT export)."""
    b = Builder()
    first = b.conv("first", "x", 3, 8)
    mid = b.conv("mid", b.node("Relu", [first], "r0"), 8, 8)
    shared = b.random("shared_w", 8, 8, 3, 3)
    a = b.node("Conv", [b.node("Relu", [mid], "r1"), shared], "a", pads=[1] * 4)
    c = b.node("Conv", [b.node("Relu", [a], "r2"), shared], "c", pads=[1] * 4)
    model = b.model([b.conv("last", b.node("Relu", [c], "r3"), 8, 4)])
    pruned, report = prune(model, rate=0.5)
    assert kept(report, "first") == 4  # a group no shared weight touches is pruned
    for root in ("mid", "a", "c"):
        assert "shared_w" in status(report, root) and "pruning would copy it" in status(report, root)
    assert report.params["pruned"] <= report.params["original"]
    assert sum(t.name.startswith("shared_w") for t in pruned.graph.initializer) == 1


def test_one_weight_sliced_on_two_axes_in_one_group_stays_whole() -> None:
    """y = Relu(x @ W) @ W: W is the root's (columns) and the leaf's (rows) weight in one group."""
    b = Builder()
    flat = b.node("Flatten", ["x"], "flat")
    w = b.random("w", 192, 192)
    hidden = b.node("Relu", [b.node("MatMul", [flat, w], "m1")], "h")
    model = b.model([b.node("MatMul", [hidden, w], "m2")])
    with pytest.raises(SettingsError, match=r"no channel group that can be pruned.*different axes"):
        prune(model, rate=0.5)


def linear_norm() -> onnx.ModelProto:
    """timm's LinearNorm under a dynamic batch: ``bn(x.flatten(0, 1)).reshape_as(x)`` exports as MatMul ->
    Flatten(axis=2) -> BatchNormalization -> Reshape(Shape(x)). Neither the flattened leading dims nor the
    run-time target can be compared symbolically; both keep the channels in place."""
    b = Builder()
    matmul = b.node("MatMul", ["x", b.random("w1", 32, 64)], "m1")
    flat = b.node("Flatten", [matmul], "flat", axis=2)
    stats = [b.random("g", 64), b.random("beta", 64), b.random("mu", 64), b.const("var", np.ones(64, np.float32))]
    norm = b.node("BatchNormalization", [flat, *stats], "bn")
    back = b.node("Reshape", [norm, b.node("Shape", [matmul], "size")], "back")
    out = b.node("MatMul", [b.node("Relu", [back], "act"), b.random("w2", 64, 16)], "m2")
    return b.model([out], input_shape=["batch", 49, 32])


def test_flatten_and_reshape_as_follow_channels_under_a_dynamic_batch() -> None:
    model = linear_norm()
    assert groups_by_root(model)["m1"].prunable
    pruned, report = prune_model(model, PruneOptions(rate=0.5, normalize=False))
    assert report.verification is not None and report.verification.ok
    assert shape_of(pruned, "w1") == [32, 32] and shape_of(pruned, "w2") == [32, 16]
    x = np.random.default_rng(0).normal(size=(3, 49, 32)).astype(np.float32)
    assert run(pruned, {"x": x})[0].shape == (3, 49, 16)


@pytest.mark.parametrize(
    ("in_shape", "flatten_at", "axis", "expected"),
    [
        (["batch", "tokens", 64], 2, 2, (1, 1)),  # the channels lead the flattened dim
        (["batch", 64, 7, 7], 1, 1, (1, 49)),  # a CNN's Flatten before its classifier
        (["batch", 1, 64, 7], 1, 2, (1, 7)),  # only a dim of 1 before them
        (["batch", 8, 64], 1, 2, None),  # merged with dims before them: their channels interleave
        ([1, 64, 4, 4], 3, 1, (0, 4)),  # into dim 0, after only a dim of 1
        ([2, 64, 4], 2, 1, None),  # into dim 0 after a batch of 2
        (["batch", 64, "h"], 1, 1, None),  # a dynamic dim merged after them
    ],
)
def test_flatten_axis(in_shape: list, flatten_at: int, axis: int, expected: tuple[int, int] | None) -> None:
    assert flatten_axis(in_shape, flatten_at, axis) == expected
