"""Ops of the node attribute library beyond the paper's, each pruned through the real code path.

Each model is run before and after: the pruned one must run in ONNX Runtime with fewer channels, and
where the op passes channels through, the channels kept must compute what they did (the original's
tensor restricted to them), or, for a leaf, channels whose producer is dead (zero filters and bias,
scored lowest and so pruned) must leave the outputs unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from pruning_helpers import Builder, assert_rate_zero_is_identity, kept, prune, run, shape_of, status

from onnxsat.pruning.prune import association_trees
from onnxsat.pruning.trees import einsum_axes
from onnxsat.verification import with_outputs

DEAD = [1, 2, 5, 6]
"""Channels of the root ``c1`` (8 channels) given zero filters and bias: rate 0.5 prunes exactly these."""


def dead_conv(b: Builder, x: str, c_in: int = 3, k: int = 3) -> str:
    """``c1``: 8 output channels, those in DEAD all zero."""
    weight = b.rng.normal(size=(8, c_in, k, k)).astype(np.float32) * 0.5
    bias = b.rng.normal(size=8).astype(np.float32) * 0.1
    weight[DEAD], bias[DEAD] = 0.0, 0.0
    return b.node("Conv", [x, b.const("c1_w", weight), b.const("c1_b", bias)], "c1", pads=[k // 2] * 4)


def kept_channels_agree(
    model: onnx.ModelProto, pruned: onnx.ModelProto, tensor: str, axis: int, inputs: dict[str, np.ndarray] | None = None
) -> None:
    """``tensor`` of the pruned model is the original's on the channels kept (those not in DEAD)."""
    before = run(with_outputs(model, [tensor]), inputs)[-1]
    after = run(with_outputs(pruned, [tensor]), inputs)[-1]
    kept = [c for c in range(before.shape[axis]) if c not in DEAD]
    assert after.shape[axis] == len(kept) < before.shape[axis]
    np.testing.assert_allclose(after, np.take(before, kept, axis=axis), rtol=1e-5, atol=1e-5)


def declared_model(b: Builder, output: str, shape: list[int], opset: int = 17) -> onnx.ModelProto:
    """``b``'s nodes with ``output`` declared (ONNX shape inference cannot tell it), not checked."""
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 8, 8])]
    outputs = [helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, shape)]
    graph = helper.make_graph(b.nodes, "declared", inputs, outputs, b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


# ------------------------------------------------------------------------------------ LSTM, GRU, RNN


def recurrent_model(op: str, path: str, layout: int, constant_weight: bool) -> onnx.ModelProto:
    """Conv -> Relu to [N, 8, 1, W], then to a sequence of 8 features (Squeeze + Transpose, or Reshape +
    Transpose), into a bidirectional ``op`` of hidden size 5: a CRNN text recognizer's head."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    b = Builder()
    r = b.node("Relu", [dead_conv(b, "x")], "r1")
    if path == "squeeze":
        seq = b.node("Squeeze", [r, b.const("h_axis", np.array([2], np.int64))], "squeeze")
    else:
        seq = b.node("Reshape", [r, b.const("to_ncw", np.array([2, 8, 6], np.int64))], "reshape")
    perm = [2, 0, 1] if layout == 0 else [0, 2, 1]
    x = b.node("Transpose", [seq], "to_sequence", perm=perm)
    w = b.rng.normal(size=(2, gates * 5, 8)).astype(np.float32) * 0.5
    if constant_weight:
        b.nodes.append(helper.make_node("Constant", [], ["rnn_w"], value=numpy_helper.from_array(w, "rnn_w")))
    else:
        b.const("rnn_w", w)
    recurrence = b.random("rnn_r", 2, gates * 5, 5)
    inputs = [x, "rnn_w", recurrence, b.random("rnn_b", 2, 2 * gates * 5, scale=0.1)]
    b.nodes.append(
        helper.make_node(op, inputs, ["y"], name="rnn", hidden_size=5, direction="bidirectional", layout=layout)
    )
    return b.model(["y"], input_shape=[2, 3, 1, 6])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize(
    ("path", "layout", "constant_weight"),
    [("squeeze", 0, False), ("reshape", 0, True)],
    ids=["squeeze-initializer", "reshape-constant"],
)
def test_a_recurrent_node_is_a_leaf_whose_input_columns_are_sliced(
    op: str, path: str, layout: int, constant_weight: bool
) -> None:
    model = recurrent_model(op, path, layout, constant_weight)
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned"
    assert shape_of(pruned, "c1_w")[0] == 4 and shape_of(pruned, "rnn_w")[2] == 4
    assert shape_of(pruned, "rnn_r") == shape_of(model, "rnn_r")  # Y is a graph output: the hidden size stays
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


def test_a_batch_first_recurrent_node_reads_the_features_on_axis_2_too() -> None:
    """``layout=1`` (X is [batch, seq, features]): ONNX Runtime does not run it, the trees are checked."""
    _, _, forest = association_trees(recurrent_model("LSTM", "squeeze", 1, False))
    group, rnn = forest.groups  # the LSTM's own hidden units: a root whose Y is a graph output
    assert rnn.reasons == ["reaches graph output 'y'"]
    leaf = next(s for s in group.slices if s.role == "leaf")
    assert group.prunable and (leaf.node, leaf.initializer, leaf.axis) == ("rnn", "rnn_w", 2)


def test_a_recurrent_node_reading_channels_as_its_sequence_is_unprunable() -> None:
    """Channels on X's sequence axis (no Transpose): W does not read them, the group stays whole."""
    b = Builder()
    seq = b.node("Squeeze", [b.conv("c1", "x", 3, 8), b.const("h_axis", np.array([2], np.int64))], "squeeze")
    inputs = [seq, b.random("rnn_w", 1, 5, 6), b.random("rnn_r", 1, 5, 5)]
    b.nodes.append(helper.make_node("RNN", inputs, ["y"], name="rnn", hidden_size=5))
    _, _, forest = association_trees(b.model(["y"], input_shape=[2, 3, 1, 6]))
    assert forest.groups[0].reasons == ["RNN 'rnn' reads them on axis 1, not its input features"]


# ------------------------------------------------------------------------------------------ Einsum


def einsum_model(equation: str, second: str = "scale") -> onnx.ModelProto:
    """Conv -> Relu -> Einsum(equation) with a second operand -> Conv (or MatMul for NHWC outputs)."""
    b = Builder()
    r = b.node("Relu", [dead_conv(b, "x")], "r1")
    operands = {
        "scale": lambda: b.const("scale", np.linspace(0.5, 2.0, 8, dtype=np.float32)),
        "branch": lambda: b.node("Relu", [b.conv("c2", "x", 3, 8)], "r2"),
        "matrix": lambda: b.random("mix", 8, 8),
        "none": lambda: None,
    }
    other = operands[second]()
    e = b.node("Einsum", [r] + ([other] if other else []), "einsum", equation=equation)
    if equation.endswith("nhwc"):
        return b.model([b.node("MatMul", [e, b.random("mm_w", 8, 2)], "mm")])
    if len(equation.split("->")[1]) == 3:  # shape inference has no rule for a diagonal: the output is declared
        return declared_model(b, e, [2, 8, 8])
    return b.model([b.conv("leaf", e, 8, 2)])


@pytest.mark.parametrize(
    ("equation", "second", "sliced"),
    [("nchw,c->nchw", "scale", ["scale"]), ("nchw->nhwc", "none", []), ("nchw,nchw->nchw", "branch", [])],
    ids=["per-channel-scale", "transpose", "tie"],
)
def test_einsum_elementwise_in_the_channel_letter_passes_them(equation: str, second: str, sliced: list[str]) -> None:
    model = einsum_model(equation, second)
    pruned, report = prune(model, rate=0.5, channel_multiple=1)
    assert status(report, "c1") == "pruned"
    assert all(shape_of(pruned, name) == [4] for name in sliced)
    if second == "branch":
        assert kept(report, "c1") == 4 and "c2" in next(g.roots for g in report.groups if "c1" in g.roots)
    else:
        kept_channels_agree(model, pruned, "einsum", 3 if equation.endswith("nhwc") else 1)
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize(
    ("equation", "second", "reason"),
    [
        ("nchw,cd->ndhw", "matrix", "sums over the channels ('c' is contracted)"),
        ("nccw->ncw", "none", "takes a diagonal of the channels ('c')"),
        ("nchw->nhw", "none", "sums over the channels"),
    ],
)
def test_einsum_mixing_the_channels_keeps_the_group_whole(equation: str, second: str, reason: str) -> None:
    _, _, forest = association_trees(einsum_model(equation, second))
    (reasons,) = [g.reasons for g in forest.groups if g.roots[0].node == "c1"]
    assert f"Einsum 'einsum' {reason}" in reasons[0]


def test_einsum_equations_are_read_per_axis() -> None:
    assert einsum_axes("nchw", [4]) == ([list("nchw")], list("chnw"))  # implicit output: sorted letters
    assert einsum_axes("...c, c -> ...c", [3, 1]) == ([[".1", ".0", "c"], ["c"]], [".1", ".0", "c"])
    assert einsum_axes("nc,cd->nd", [2, None]) == "equation 'nc,cd->nd' or its operands' ranks cannot be read"
    assert einsum_axes("nchw->nhwc", [3]) == "term 'nchw' does not fit rank 3"


# ------------------------------------------------------------------------------------ Resize, Upsample


def resize_model(op: str, scales: list[float] | None, sizes: list[int] | None = None) -> onnx.ModelProto:
    """Conv -> Relu -> Resize (scales or sizes) or Upsample (opset 9) -> Conv."""
    b = Builder()
    r = b.node("Relu", [dead_conv(b, "x")], "r1")
    if op == "Upsample":
        resized = b.node("Upsample", [r, b.const("scales", np.array(scales, np.float32))], "resize", mode="nearest")
    else:
        inputs = [r, "", b.const("scales", np.array(scales, np.float32)) if scales else ""]
        inputs += [b.const("sizes", np.array(sizes, np.int64))] if sizes else []
        resized = b.node("Resize", inputs, "resize", mode="nearest")
    return b.model([b.conv("leaf", resized, 8, 2)], opset=9 if op == "Upsample" else 17)


@pytest.mark.parametrize(
    ("op", "scales", "sizes"),
    [("Resize", [1, 1, 2, 2], None), ("Resize", None, [2, 8, 16, 12]), ("Upsample", [1, 1, 2, 2], None)],
    ids=["resize-scales", "resize-sizes", "upsample"],
)
def test_resize_and_upsample_pass_the_channels_when_the_channel_axis_keeps_its_size(
    op: str, scales: list[float] | None, sizes: list[int] | None
) -> None:
    model = resize_model(op, scales, sizes)
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned" and shape_of(pruned, "leaf_w")[1] == 4
    if sizes:
        target = next(t for t in pruned.graph.initializer if t.name == "sizes")
        assert numpy_helper.to_array(target).tolist() == [2, 4, 16, 12]
    kept_channels_agree(model, pruned, "resize", 1)
    assert_rate_zero_is_identity(model)


def test_resize_to_sizes_read_off_its_input_at_run_time_passes_the_channels() -> None:
    """``F.interpolate(r, size=x.shape[-2:])``: sizes ``Concat(Slice(Shape(r), 0, 2), Slice(Shape(x), 2, 4))``;
    the channel entry is read off the Resize's own input, so it follows the pruning by itself."""
    b = Builder()
    r = b.node("Relu", [b.node("MaxPool", [dead_conv(b, "x")], "down", kernel_shape=[2, 2], strides=[2, 2])], "r1")
    zero, two, four = (b.const(n, np.array([v])) for n, v in (("zero", 0), ("two", 2), ("four", 4)))
    lead = b.node("Slice", [b.node("Shape", [r], "r_shape"), zero, two], "lead")
    height_width = b.node("Slice", [b.node("Shape", ["x"], "x_shape"), two, four], "hw")
    sizes = b.node("Concat", [lead, height_width], "sizes", axis=0)
    resized = b.node("Resize", [r, "", "", sizes], "resize", mode="nearest")
    model = b.model([b.conv("leaf", resized, 8, 2)])
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned" and shape_of(pruned, "leaf_w")[1] == 4
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize(
    ("scales", "sizes", "reason"),
    [([1, 2, 2, 2], None, "scales the channel axis"), (None, [2, 16, 16, 16], "resizes the channel axis")],
)
def test_resize_of_the_channel_axis_keeps_the_group_whole(
    scales: list[float] | None, sizes: list[int] | None, reason: str
) -> None:
    b = Builder()
    inputs = [b.conv("c1", "x", 3, 8), "", b.const("scales", np.array(scales, np.float32)) if scales else ""]
    inputs += [b.const("sizes", np.array(sizes, np.int64))] if sizes else []
    resized = b.node("Resize", inputs, "resize", mode="nearest")
    _, _, forest = association_trees(b.model([b.conv("leaf", resized, 16, 2)]))
    assert forest.groups[0].reasons == [f"Resize 'resize': {reason}"]


# ------------------------------------------------------------------------------- normalizations


def test_instance_normalization_slices_its_scale_and_bias() -> None:
    b = Builder()
    scale = b.const("in_scale", b.rng.uniform(0.5, 1.5, size=8).astype(np.float32))
    bias = b.const("in_bias", b.rng.uniform(-0.5, 0.5, size=8).astype(np.float32))
    norm = b.node("InstanceNormalization", [dead_conv(b, "x"), scale, bias], "norm")
    model = b.model([b.conv("leaf", b.node("Relu", [norm], "r1"), 8, 2)])
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "in_scale") == shape_of(pruned, "in_bias") == [4]
    kept_channels_agree(model, pruned, "norm", 1)
    assert_rate_zero_is_identity(model)


def test_layer_normalization_over_the_last_axis_passes_the_channels_of_nchw() -> None:
    """axis=-1 on [N, C, H, W] normalizes each row over W alone: channels pass, scale and bias ([W]) stay."""
    b = Builder()
    scale = b.const("ln_scale", b.rng.uniform(0.5, 1.5, size=8).astype(np.float32))
    bias = b.const("ln_bias", b.rng.uniform(-0.5, 0.5, size=8).astype(np.float32))
    norm = b.node("LayerNormalization", [dead_conv(b, "x"), scale, bias], "norm", axis=-1)
    model = b.model([b.conv("leaf", norm, 8, 2)])
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned" and shape_of(pruned, "ln_scale") == [8]
    kept_channels_agree(model, pruned, "norm", 1)
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize("axis", [1, -3])
def test_layer_normalization_over_the_channels_keeps_the_group_whole(axis: int) -> None:
    b = Builder()
    scale = b.const("ln_scale", np.ones((8, 8, 8), np.float32))
    norm = b.node("LayerNormalization", [b.conv("c1", "x", 3, 8), scale], "norm", axis=axis)
    _, _, forest = association_trees(b.model([b.conv("leaf", norm, 8, 2)]))
    assert forest.groups[0].reasons == ["LayerNormalization 'norm' normalizes over the channels"]


@pytest.mark.parametrize(("axis", "pruned"), [(-1, True), (1, False)])
def test_rms_normalization_is_followed_as_layer_normalization(axis: int, pruned: bool) -> None:
    """Opset 23's RMSNormalization (no mean, no bias) was unknown to the library, and the hint it gave
    (next-no-process) wrote a model ONNX Runtime refused: over the last axis the channels pass, over them the
    group stays whole."""
    b = Builder()
    scale = b.const("rms_scale", np.ones([8] if axis == -1 else [8, 8, 8], np.float32))
    norm = b.node("RMSNormalization", [b.conv("c1", "x", 3, 8), scale], "norm", axis=axis)
    _, _, forest = association_trees(declared_model(b, b.conv("leaf", norm, 8, 2), [2, 2, 8, 8], 23))
    group = next(g for g in forest.groups if g.roots[0].node == "c1")
    assert group.prunable is pruned
    if not pruned:
        assert group.reasons == ["RMSNormalization 'norm' normalizes over the channels"]


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_keeps_the_group_whole(opset: int) -> None:
    b = Builder()
    params = 8 if opset == 21 else 4
    scale, bias = b.const("gn_scale", np.ones(params, np.float32)), b.const("gn_bias", np.zeros(params, np.float32))
    norm = b.node("GroupNormalization", [b.conv("c1", "x", 3, 8), scale, bias], "norm", num_groups=4)
    _, _, forest = association_trees(declared_model(b, b.conv("leaf", norm, 8, 2), [2, 2, 8, 8], opset))
    (reason,) = forest.groups[0].reasons
    assert reason.startswith("GroupNormalization 'norm' normalizes groups of channels together")


# ------------------------------------------------------------------------------------- activations


@pytest.mark.parametrize("op", ["HardSwish", "HardSigmoid", "Mish"])
def test_elementwise_activations_pass_the_channels(op: str) -> None:
    b = Builder()
    act = b.node(op, [dead_conv(b, "x")], "act")
    model = b.model([b.conv("leaf", act, 8, 2)], opset=18)
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned" and shape_of(pruned, "leaf_w")[1] == 4
    kept_channels_agree(model, pruned, "act", 1)
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize(
    ("slope_shape", "sliced"), [((8, 1, 1), [4, 1, 1]), ((1,), [1]), ((), [])], ids=["per-channel", "one", "scalar"]
)
def test_prelu_slices_a_per_channel_slope_and_passes_a_shared_one(
    slope_shape: tuple[int, ...], sliced: list[int]
) -> None:
    b = Builder()
    slope = b.const("slope", np.linspace(0.05, 0.4, int(np.prod(slope_shape)), dtype=np.float32).reshape(slope_shape))
    act = b.node("PRelu", [dead_conv(b, "x"), slope], "act")
    model = b.model([b.conv("leaf", act, 8, 2)])
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "slope") == sliced
    kept_channels_agree(model, pruned, "act", 1)
    assert_rate_zero_is_identity(model)


def test_prelu_slope_on_the_last_axis_follows_channels_moved_there() -> None:
    """NHWC channels (after a Transpose) and a [C] slope broadcast on the last axis: the slope is sliced."""
    b = Builder()
    nhwc = b.node("Transpose", [dead_conv(b, "x")], "nhwc", perm=[0, 2, 3, 1])
    act = b.node("PRelu", [nhwc, b.const("slope", np.linspace(0.05, 0.4, 8, dtype=np.float32))], "act")
    model = b.model([b.node("MatMul", [act, b.random("mm_w", 8, 2)], "mm")])
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "slope") == [4] and shape_of(pruned, "mm_w") == [4, 2]
    kept_channels_agree(model, pruned, "act", 3)
    assert_rate_zero_is_identity(model)


def test_a_weight_read_by_several_leaves_of_one_group_is_sliced_once() -> None:
    """An unrolled LSTM reads its input weight from one Gemm per time step, all in the pruned group: each took
    its own identical slice (a captcha reader went 19 MB -> 200 MB). One slice now serves them all."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    shared = b.random("shared_w", 2, 8, 3, 3)
    steps = [b.node("Conv", [r, shared], f"step{i}", pads=[1, 1, 1, 1]) for i in range(4)]
    total = b.node("Sum", steps, "sum")
    model = b.model([total])
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned"
    readers = {n.input[1] for n in pruned.graph.node if n.name.startswith("step")}
    assert len(readers) == 1 and shape_of(pruned, readers.pop()) == [2, 4, 3, 3]
    assert report.params["pruned"] < report.params["original"]
    assert_rate_zero_is_identity(model)


def group_norm(b: Builder, x: str, groups: int, channels: int) -> str:
    """GroupNorm as PyTorch exports it: Reshape [N, G, -1], InstanceNormalization (unit scale, zero bias), a
    Reshape back to x's own shape, then the per-channel scale and bias."""
    grouped = b.node("Reshape", [x, b.const("gn_groups", np.array([0, groups, -1], np.int64))], "gn_reshape")
    ones, zeros = b.const("gn_one", np.ones(groups, np.float32)), b.const("gn_zero", np.zeros(groups, np.float32))
    normed = b.node("InstanceNormalization", [grouped, ones, zeros], "gn_norm", epsilon=1e-5)
    back = b.node("Reshape", [normed, b.node("Shape", [x], "gn_shape")], "gn_back")
    gamma = b.const("gn_gamma", b.rng.uniform(0.5, 1.5, size=(channels, 1, 1)).astype(np.float32))
    beta = b.const("gn_beta", b.rng.uniform(-0.5, 0.5, size=(channels, 1, 1)).astype(np.float32))
    return b.node("Add", [b.node("Mul", [back, gamma], "gn_scale"), beta], "gn")


def test_group_norm_prunes_whole_groups() -> None:
    """A diffusion UNet's every ResNet Conv feeds a GroupNorm, and none could be pruned. Whole groups are: the
    group count in the Reshape shrinks with them, and the groups kept are normalized exactly as before."""
    b = Builder()
    weight = b.rng.normal(size=(8, 3, 3, 3)).astype(np.float32)
    weight[4:] *= 0.01  # the last two groups of two channels are the least important by L1
    conv = b.node("Conv", ["x", b.const("c1_w", weight)], "c1", pads=[1, 1, 1, 1])
    model = b.model([b.conv("leaf", b.node("Relu", [group_norm(b, conv, groups=4, channels=8)], "r1"), 8, 2)])
    _, _, forest = association_trees(model)
    group = next(g for g in forest.groups if [r.node for r in g.roots] == ["c1"])
    assert group.prunable and group.channels == 4 and group.unit == 2  # 4 groups of 2 channels
    pruned, report = prune(model, rate=0.5)
    assert status(report, "c1") == "pruned" and shape_of(pruned, "c1_w")[0] == 4
    target = next(t for t in pruned.graph.initializer if t.name == "gn_groups")
    assert numpy_helper.to_array(target).tolist() == [0, 2, -1]
    before = run(with_outputs(model, ["r1"]))[-1]
    after = run(with_outputs(pruned, ["r1"]))[-1]
    np.testing.assert_allclose(after, before[:, :4], rtol=1e-4, atol=1e-5)  # the kept groups, as they were
    assert_rate_zero_is_identity(model)
