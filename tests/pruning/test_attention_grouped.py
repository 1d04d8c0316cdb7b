"""Grouped-query attention written out as PyTorch exports it below opset 23: each K/V head repeated ``G`` times
(``Unsqueeze -> Expand [B, kv, G, S, D] -> Reshape [B, kv*G, S, D]``) before the products with the ``kv*G`` Q
heads, and softmax's NaN guard (``Where(IsNaN(p), 0, p)``) of a boolean mask.

A channel is one K/V head and the ``G`` Q heads reading it. The exactness tests zero those weights for some K/V
heads (and the output rows of their Q heads): rate 0.5 prunes exactly them and nothing computed changes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of, status

from onnxsat.pruning.prune import association_trees

B, S, E, D = 2, 5, 32, 4
KV = 2


def grouped_model(group: int = 4, expand: str = "sizes", dead: tuple[int, ...] = ()) -> onnx.ModelProto:
    """x ``[B, S, E]`` -> Q (``KV * group`` heads), K and V (``KV`` heads, repeated ``group`` times) ->
    softmax with a NaN guard -> output projection. ``expand``: the Expand shape holds the K/V head count
    (``sizes``, an edit) or 1 there (``broadcast``)."""
    heads = KV * group
    b = Builder()

    def split(name: str, count: int, per_head: int) -> str:
        projected = b.node("MatMul", ["x", b.heads(f"w{name}", E, count, D, dead, per_head)], name)
        target = b.const(f"{name}_split", np.array([B, S, count, D], np.int64))
        return b.node(
            "Transpose", [b.node("Reshape", [projected, target], f"{name}_heads")], f"{name}_t", perm=[0, 2, 1, 3]
        )

    q, k, v = split("q", heads, group), split("k", KV, 1), split("v", KV, 1)
    axis = b.const("axis_2", np.array([2], np.int64))
    sizes = [B, KV, group, S, D] if expand == "sizes" else [1, 1, group, 1, 1]
    shape = b.const("expand_shape", np.array(sizes, np.int64))
    merge = b.const("merge_kv", np.array([B, heads, S, D], np.int64))
    k, v = (
        b.node(
            "Reshape",
            [b.node("Expand", [b.node("Unsqueeze", [t, axis], f"{n}_1"), shape], f"{n}_rep"), merge],
            f"{n}_all",
        )
        for n, t in (("k", k), ("v", v))
    )
    k_t = b.node("Transpose", [k], "k_tt", perm=[0, 1, 3, 2])
    scores = b.node(
        "Mul", [b.node("MatMul", [q, k_t], "qk"), b.const("scale", np.array(D**-0.5, np.float32))], "scores"
    )
    probs = b.node("Softmax", [scores], "probs", axis=-1)
    guarded = b.node(
        "Where", [b.node("IsNaN", [probs], "nan"), b.const("zero", np.array(0.0, np.float32)), probs], "guarded"
    )
    context = b.node("Transpose", [b.node("MatMul", [guarded, v], "pv")], "pv_t", perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [context, b.const("merge", np.array([B, S, heads * D], np.int64))], "context")
    out = b.node("MatMul", [merged, b.heads("wo", E, heads, D, dead, group, axis=0)], "out")
    return b.model([b.node("Add", [out, "x"], "y")], input_shape=[B, S, E])


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("expand", ["sizes", "broadcast"])
def test_pruning_key_value_heads_with_their_query_heads_changes_no_output(group: int, expand: str) -> None:
    model = grouped_model(group, expand, dead=(1,))
    pruned, report = prune(model, rate=0.5)
    assert status(report, "q") == "pruned" and next(g.roots for g in report.groups if "q" in g.roots) == ["q", "k", "v"]
    assert shape_of(pruned, "wq") == [E, group * D] and shape_of(pruned, "wk") == [E, D]
    assert shape_of(pruned, "wo") == [group * D, E]
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


def test_an_expand_over_the_channel_axis_keeps_the_group_whole() -> None:
    """Broadcasting the K/V heads themselves (one head to several) is not a repeat the walk can follow."""
    b = Builder()
    k = b.node("MatMul", ["x", b.random("wk", E, 1)], "k")  # one channel, broadcast to E
    wide = b.node("Expand", [k, b.const("wide_shape", np.array([B, S, E], np.int64))], "wide")
    y = b.node("Add", [b.node("MatMul", [wide, b.random("wo", E, E)], "out"), "x"], "y")
    _, _, forest = association_trees(b.model([y], input_shape=[B, S, E]))
    reasons = next(g.reasons for g in forest.groups if g.roots[0].node == "k")
    assert reasons == ["Expand 'wide' broadcasts the channel axis"]
