"""Attention heads pruned as whole units, through the Reshape/Transpose pattern PyTorch exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of

from onnxsat.pruning.prune import PruneOptions, association_trees, prune_model
from onnxsat.pruning.trees import ChannelGroup, format_trees

B, S, E = 2, 5, 16
"""Batch, sequence length, embedding width of the built attention blocks."""
ZOO = Path("/tmp/zoo")


def attention_model(heads: int = 4, qkv: str = "separate", target: str = "literal") -> onnx.ModelProto:
    """One transformer layer as PyTorch exports it: Q, K, V projections (MatMul + bias Add) -> Reshape
    [B, S, H, D] (one literal target shared by Q, K and V) -> Transpose (K to [B, H, D, S]) -> Q @ K^T ->
    Div by sqrt(D) -> + causal mask -> Softmax -> @ V -> Transpose -> Reshape [B, S, E] -> output
    projection -> residual Add -> LayerNormalization -> MLP.

    ``qkv``: ``separate`` projections (BERT), one fused projection cut by a ``split`` on the channel axis
    (GPT-2), or reshaped to [B, S, 3, E] and picked by ``gather`` (ViT). ``target="computed"`` builds
    Q's Reshape target at run time (Shape -> Slice -> Concat); ``"computed -1"`` writes its head count as -1
    (``view(*q.shape[:2], -1, D)``, as recent transformers models write it).
    """
    d = E // heads
    b = Builder()
    split_heads = b.const("split_heads", np.array([B, S, heads, d], dtype=np.int64))
    if qkv == "separate":
        q, k, v = (
            b.node("Add", [b.node("MatMul", ["x", b.random(f"w{n}", E, E)], n), b.random(f"b{n}", E)], f"{n}_bias")
            for n in "qkv"
        )
    else:
        fused = b.node(
            "Add", [b.node("MatMul", ["x", b.random("wqkv", E, 3 * E)], "qkv"), b.random("bqkv", 3 * E)], "qkv_bias"
        )
        if qkv == "split":
            q, k, v = "q_bias", "k_bias", "v_bias"
            b.nodes.append(helper.make_node("Split", [fused], [q, k, v], name="split_qkv", axis=2))
        else:
            three = b.node("Reshape", [fused, b.const("three", np.array([B, S, 3, E], dtype=np.int64))], "sections")
            first = b.node("Transpose", [three], "sections_first", perm=[2, 0, 1, 3])
            q, k, v = (
                b.node("Gather", [first, b.const(f"index_{n}", np.array(i, dtype=np.int64))], f"{n}_bias", axis=0)
                for i, n in enumerate("qkv")
            )
    q_target = split_heads
    if target in ("computed", "computed -1"):
        shape = b.node("Shape", [q], "q_shape")
        starts, ends = b.const("zero", np.array([0], dtype=np.int64)), b.const("two", np.array([2], dtype=np.int64))
        batch_seq = b.node("Slice", [shape, starts, ends], "q_batch_seq")
        heads_d = np.array([heads if target == "computed" else -1, d], dtype=np.int64)
        q_target = b.node("Concat", [batch_seq, b.const("heads_d", heads_d)], "q_target", axis=0)
    q = b.node("Transpose", [b.node("Reshape", [q, q_target], "q_heads")], "q_t", perm=[0, 2, 1, 3])
    k = b.node("Transpose", [b.node("Reshape", [k, split_heads], "k_heads")], "k_t", perm=[0, 2, 3, 1])
    v = b.node("Transpose", [b.node("Reshape", [v, split_heads], "v_heads")], "v_t", perm=[0, 2, 1, 3])
    scores = b.node(
        "Div", [b.node("MatMul", [q, k], "qk"), b.const("sqrt_d", np.array(np.sqrt(d), np.float32))], "scaled"
    )
    mask = b.const("mask", np.triu(np.full((S, S), -1e4, dtype=np.float32), 1))
    probs = b.node("Softmax", [b.node("Add", [scores, mask], "masked")], "probs", axis=-1)
    context = b.node("Transpose", [b.node("MatMul", [probs, v], "pv")], "context_t", perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [context, b.const("merge_heads", np.array([B, S, E], dtype=np.int64))], "merge")
    out = b.node("Add", [b.node("MatMul", [merged, b.random("wo", E, E)], "out"), b.random("bo", E)], "out_bias")
    norm_params = [b.const("ln_scale", np.ones(E, np.float32)), b.const("ln_bias", np.zeros(E, np.float32))]
    norm = b.node("LayerNormalization", [b.node("Add", [out, "x"], "residual"), *norm_params], "norm", axis=-1)
    hidden = b.node(
        "Relu",
        [b.node("Add", [b.node("MatMul", [norm, b.random("w1", E, 32)], "fc1"), b.random("b1", 32)], "fc1_bias")],
        "act",
    )
    y = b.node("Add", [b.node("MatMul", [hidden, b.random("w2", 32, E)], "fc2"), b.random("b2", E)], "y")
    return b.model([y], input_shape=[B, S, E])


def head_group(model: onnx.ModelProto) -> ChannelGroup:
    _, _, forest = association_trees(model)
    (group,) = [g for g in forest.groups if "q" in {r.node for r in g.roots} or "qkv" in {r.node for r in g.roots}]
    return group


def reshape_target(model: onnx.ModelProto, node_name: str) -> list[int]:
    node = next(n for n in model.graph.node if n.name == node_name)
    tensor = next(t for t in model.graph.initializer if t.name == node.input[1])
    return numpy_helper.to_array(tensor).tolist()


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


@pytest.mark.parametrize("heads", [2, 4])
def test_q_k_v_and_the_output_projection_form_one_head_group(heads: int) -> None:
    model = attention_model(heads)
    group = head_group(model)
    assert [r.node for r in group.roots] == ["q", "k", "v"] and group.leaves == ["out"]
    assert (group.channels, group.unit, group.heads, group.prunable) == (heads, E // heads, True, True)
    _, _, forest = association_trees(model)
    text = format_trees(forest.groups)
    assert f"[many-to-one] {heads} heads of {E // heads} features, prunable" in text
    assert "qk (MatMul, tie)" in text and "out (MatMul, leaf)" in text


@pytest.mark.parametrize("heads", [2, 4])
def test_half_the_heads_are_removed_from_weights_and_reshape_targets(heads: int) -> None:
    model = attention_model(heads)
    d, kept = E // heads, heads - heads // 2
    pruned, report = prune(model, rate=0.5)
    for name in ("wq", "wk", "wv"):
        assert shape_of(pruned, name) == [E, kept * d]
    assert [shape_of(pruned, name) for name in ("bq", "bk", "bv")] == [[kept * d]] * 3
    assert shape_of(pruned, "wo") == [kept * d, E]
    for node in ("q_heads", "k_heads", "v_heads"):  # one shared literal target, now a copy per Reshape
        assert reshape_target(pruned, node) == [B, S, kept, d]
    assert reshape_target(pruned, "merge") == [B, S, kept * d]
    group = next(g for g in report.groups if g.roots == ["q", "k", "v"])
    assert (group.unit, group.channels, group.kept, group.status) == (f"head/{d}", heads, kept, "pruned")
    assert f"attention heads: {heads - kept} of {heads} removed in 1 attention blocks" in report.to_table()
    assert run(pruned)[0].shape == (B, S, E)
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize("qkv", ["separate", "split", "gather"])
def test_pruning_heads_that_contribute_nothing_changes_no_output(qkv: str) -> None:
    """Zero the V columns and output-projection rows of two heads (zeroing Q and K would not silence a
    head: softmax of zeros is uniform): they score zero, are pruned, and the outputs stay equal, so every
    slice (Q, K, V columns and biases, fused or not, output rows) and shape edit agree on the heads."""
    model = attention_model(4, qkv)
    d, dead = E // 4, [1, 2]
    v_weight, v_offset = ("wv", 0) if qkv == "separate" else ("wqkv", 2 * E)
    for tensor in model.graph.initializer:
        value = numpy_helper.to_array(tensor).copy()
        for head in dead:
            if tensor.name == v_weight:
                value[:, v_offset + head * d : v_offset + (head + 1) * d] = 0.0
            if tensor.name == "wo":
                value[head * d : (head + 1) * d] = 0.0
        tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    pruned, report = prune(model, rate=0.5, exclude=["fc1"])  # the MLP's hidden units stay
    if qkv == "separate":
        assert shape_of(pruned, "wq") == [E, 2 * d]
    else:
        assert shape_of(pruned, "wqkv") == [E, 3 * 2 * d] and shape_of(pruned, "bqkv") == [3 * 2 * d]
        assert [g.roots for g in report.groups if g.unit.startswith("head")] == [["qkv"]]
    if qkv == "gather":
        assert reshape_target(pruned, "sections") == [B, S, 3, 2 * d]
    kept = initializer(pruned, "wo")
    np.testing.assert_array_equal(kept, np.delete(initializer(model, "wo"), np.s_[d : 3 * d], axis=0))
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize("criterion", ["l1", "l2", "fpgm", "hrank"])
@pytest.mark.parametrize("single_node", [False, True])
def test_every_criterion_scores_heads(criterion: str, single_node: bool) -> None:
    _, report = prune(attention_model(4), rate=0.5, criterion=criterion, single_node=single_node)
    assert next(g.kept for g in report.groups if g.roots == ["q", "k", "v"]) == 2


def test_reconstruction_refits_the_output_projection() -> None:
    pruned, report = prune(attention_model(4), rate=0.5, reconstruct=True)
    assert "out" in [fit.node for fit in report.reconstruction]
    assert run(pruned)[0].shape == (B, S, E)


@pytest.mark.parametrize(("target", "heads_d"), [("computed", [2, E // 4]), ("computed -1", [-1, E // 4])])
def test_a_reshape_target_computed_at_run_time_prunes_whole_heads(target: str, heads_d: list[int]) -> None:
    """PyTorch's ``q.view(*q.shape[:2], H, D)`` under dynamic sizes: the target is a Concat of sizes read off a
    Shape and a constant [H, D]; the head count is edited in that constant, in a Concat of Q's own. Written
    ``view(*q.shape[:2], -1, D)``, inference cannot size the heads: the -1 is the channel dim over D, and stays
    -1 in the pruned model, where it now makes fewer heads."""
    model = attention_model(4, target=target)
    group = head_group(model)
    assert group.prunable and group.heads and group.channels == 4
    pruned, _ = prune(model, rate=0.5)
    q_target = next(n for n in pruned.graph.node if n.name == "q_heads").input[1]
    concat = next(n for n in pruned.graph.node if q_target in n.output)
    values = {t.name: numpy_helper.to_array(t).tolist() for t in pruned.graph.initializer}
    assert concat.op_type == "Concat" and values[concat.input[1]] == heads_d
    assert reshape_target(pruned, "k_heads") == [B, S, 2, E // 4]
    assert run(pruned)[0].shape == (B, S, E)


def test_a_run_time_target_shared_by_several_reshapes_gets_one_copy_each() -> None:
    """The normal form merges equal run-time targets into one Concat; each Reshape pruned by its own group
    must get a target of its own (here Q's heads and an unrelated MLP reshape read the same Concat)."""
    from onnxsat.pruning.apply import apply_pruning
    from onnxsat.pruning.trees import Forest, ShapeEdit

    b = Builder()
    shape = b.node("Shape", ["x"], "x_shape")
    batch_seq = b.node("Slice", [shape, b.const("zero", np.array([0])), b.const("two", np.array([2]))], "lead")
    target = b.node("Concat", [batch_seq, b.const("heads_d", np.array([4, E // 4]))], "target", axis=0)
    first = b.node("Reshape", ["x", target], "first")
    second = b.node("Reshape", ["x", target], "second")
    model = b.model([first, second], input_shape=[B, S, E])
    edit = ShapeEdit("concat-piece", 3, 0, ((0, 1),), slot=1)  # "first": 4 heads -> 3
    applied = apply_pruning(model, Forest([], [edit]), {})
    assert applied.model.graph.node[3].input[1] == "target"  # nothing pruned: nothing copied
    forest = Forest([_one_group()], [edit])
    result = apply_pruning(model, forest, {0: np.array([0, 1, 2])}).model
    readers = {n.name: n.input[1] for n in result.graph.node if n.op_type == "Reshape"}
    assert readers["second"] == "target" and readers["first"] != "target"
    values = {t.name: numpy_helper.to_array(t).tolist() for t in result.graph.initializer}
    own = next(n for n in result.graph.node if readers["first"] in n.output)
    assert values[own.input[1]] == [3, E // 4] and values["heads_d"] == [4, E // 4]
    order = [n.name for n in result.graph.node]
    assert order.index(own.name) < order.index("first")  # the copy is placed before its reader
    onnx.checker.check_model(result)


def _one_group() -> ChannelGroup:
    """A bare group of four channels with no slices: only the shape edit names it."""
    return ChannelGroup(index=0, roots=[], channels=4)


def test_a_computed_reshape_target_folded_by_onnxsat_optimize_is_handled() -> None:
    """With static shapes, ONNXSat's constant folding turns Shape -> Slice -> Concat into a literal target."""
    from onnxsat.eqsat.optimizer import optimize_model

    folded, _ = optimize_model(attention_model(4, target="computed"))
    group = head_group(folded)
    assert group.prunable and group.heads and group.channels == 4
    pruned, _ = prune(folded, rate=0.5)
    targets = {t.name: numpy_helper.to_array(t).tolist() for t in pruned.graph.initializer}
    splits = [
        targets[n.input[1]] for n in pruned.graph.node if n.op_type == "Reshape" and len(targets[n.input[1]]) == 4
    ]
    assert splits == [[B, S, 2, E // 4]] * 3


def test_a_channel_split_by_reshape_and_merged_back_prunes_whole_blocks() -> None:
    """[N, 8, H, W] -> [N, 2, 4, H*W] -> [N, 8, H, W]: channels go in blocks of 4 (not attention heads)."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    v = b.node("Reshape", [r, b.const("target", np.array([2, 2, 4, 64], dtype=np.int64))], "blocks")
    t = b.node("Reshape", [v, b.const("back", np.array([2, 8, 8, 8], dtype=np.int64))], "back_view")
    model = b.model([b.conv("c2", t, 8, 2)])
    _, _, forest = association_trees(model)
    group = forest.groups[0]
    assert (group.channels, group.unit, group.heads, group.prunable) == (2, 4, False, True)
    assert "2 blocks of 4 features" in format_trees(forest.groups)
    pruned, report = prune(model, rate=0.5)
    assert shape_of(pruned, "c1_w") == [4, 3, 3, 3] and shape_of(pruned, "c2_w") == [2, 4, 3, 3]
    assert reshape_target(pruned, "blocks") == [2, 1, 4, 64] and reshape_target(pruned, "back_view") == [2, 4, 8, 8]
    assert report.groups[0].unit == "block/4"
    assert_rate_zero_is_identity(model)


def test_a_split_no_op_decides_still_has_its_target_rewritten() -> None:
    """A split Reshape whose output nothing reads (a dead end) runs all the same: heads by default."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    v = b.node("Reshape", [r, b.const("target", np.array([2, 2, 4, 64], dtype=np.int64))], "blocks")
    b.node("Transpose", [v], "unread", perm=[0, 2, 1, 3])
    model = b.model([b.conv("c2", r, 8, 2)])
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "c1_w")[0] == 4 and reshape_target(pruned, "blocks") == [2, 1, 4, 64]


def test_a_split_that_cuts_a_channel_space_apart_is_unprunable() -> None:
    """3 + 5 concatenated channels split into 4 blocks of 2: a block would hold channels of both roots."""
    b = Builder()
    cat = b.node("Concat", [b.conv("a", "x", 3, 3), b.conv("b", "x", 3, 5)], "cat", axis=1)
    v = b.node("Reshape", [cat, b.const("target", np.array([2, 4, 2, 64], dtype=np.int64))], "blocks")
    t = b.node("Reshape", [v, b.const("back", np.array([2, 8, 8, 8], dtype=np.int64))], "back_view")
    model = b.model([b.conv("c", t, 8, 2)])
    _, _, forest = association_trees(model)
    a = next(g for g in forest.groups if [r.node for r in g.roots] == ["a"])
    assert a.channels == 3 and "3 channels do not divide into blocks of 2" in a.reasons[0]


def test_a_split_along_channels_cuts_the_root_and_rewrites_the_sizes() -> None:
    """Split [3, 5] of a Conv's 8 channels: two groups (3 and 5 channels) of one root, sizes edited."""
    b = Builder()
    c1 = b.conv("c1", "x", 3, 8)
    sizes = b.const("sizes", np.array([3, 5], dtype=np.int64))
    b.nodes.append(helper.make_node("Split", [c1, sizes], ["s0", "s1"], name="split", axis=1))
    left = b.conv("a", b.node("Relu", ["s0"], "r0"), 3, 2)
    model = b.model([b.node("Add", [left, b.conv("b", b.node("Relu", ["s1"], "r1"), 5, 2)], "y")])
    weight = initializer(model, "c1_w").copy()
    bias = initializer(model, "c1_b").copy()
    dead = [0, 4, 6]  # one of the first part, two of the second: what rate 0.5 prunes in 3 and 5
    weight[dead], bias[dead] = 0.0, 0.0
    for tensor in model.graph.initializer:
        if tensor.name in ("c1_w", "c1_b"):
            tensor.CopyFrom(numpy_helper.from_array(weight if tensor.name == "c1_w" else bias, tensor.name))
    _, _, forest = association_trees(model)
    assert sorted(g.channels for g in forest.groups if [r.node for r in g.roots] == ["c1"]) == [3, 5]
    pruned, _ = prune(model, rate=0.5)
    assert shape_of(pruned, "c1_w")[0] == 5 and initializer(pruned, "sizes").tolist() == [2, 3]
    assert shape_of(pruned, "a_w")[1] == 2 and shape_of(pruned, "b_w")[1] == 3
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


@pytest.mark.parametrize("name", ["bert_tiny", "vit_tiny", "gpt2_tiny"])
def test_transformer_exports_lose_half_their_heads(name: str) -> None:
    """BERT (separate Q, K, V), ViT (fused, Reshape + Gather), GPT-2 (fused, Split), as torch exports them."""
    path = ZOO / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not present")
    model = onnx.load(str(path))
    pruned, report = prune_model(model, PruneOptions(rate=0.5))
    assert report.verification is not None and report.verification.ok, report.verification
    assert report.params["pruned"] < report.params["original"]
    heads = [g for g in report.groups if g.unit.startswith("head/")]
    assert heads and all(g.status == "pruned" and g.kept == g.channels - g.channels // 2 for g in heads)
    assert "attention heads:" in report.to_table()
    onnx.checker.check_model(pruned)


def test_heads_are_pruned_under_a_dynamic_batch_and_the_result_keeps_it() -> None:
    """A target computed from a dynamic input size cannot be folded; the heads are pruned through it all the
    same, and the pruned model still takes any batch."""
    model = attention_model(4, target="computed")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    for tensor in model.graph.initializer:  # K's, V's and the merge's literal targets copy the batch (0)
        if tensor.name in ("split_heads", "merge_heads"):
            value = numpy_helper.to_array(tensor).copy()
            value[0] = 0
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    group = head_group(model)
    assert group.prunable and group.heads and group.channels == 4
    pruned, report = prune_model(model, PruneOptions(rate=0.5))
    assert report.verification is not None and report.verification.ok
    assert pruned.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    x = np.random.default_rng(0).normal(size=(3, S, E)).astype(np.float32)
    session = ort.InferenceSession(pruned.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": x})[0].shape == (3, S, E)


def test_a_dim_inference_leaves_symbolic_is_read_as_a_broadcast_one_from_two_runs() -> None:
    """An attention mask expanded at run time to ``[batch, 1, S]``: inference cannot tell its dim 1 is a 1;
    two runs at different dynamic sizes can, and tell it from the batch, which changes with them."""
    from onnxsat.pruning.graph import GraphIndex

    b = Builder()
    batch = b.node(
        "Slice", [b.node("Shape", ["x"], "x_shape"), b.const("z", np.array([0])), b.const("o", np.array([1]))], "n"
    )
    one = b.node("Max", [b.const("one", np.array([1])), b.const("zero", np.array([0]))], "one_at_run_time")
    size = b.node("Concat", [batch, one, b.const("s", np.array([S]))], "mask_size", axis=0)
    mask = b.node("Expand", [b.const("row", np.zeros((1, 1, S), np.float32)), size], "mask")
    model = b.model([b.node("Add", ["x", mask], "masked")], input_shape=[B, S, S])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    index = GraphIndex(model)
    assert not isinstance(index.shape(mask)[1], int)  # inference does not follow Max
    assert index.broadcast_dim(mask, 1) and index.broadcast_dim(mask, 2) is False and not index.broadcast_dim(mask, 0)
