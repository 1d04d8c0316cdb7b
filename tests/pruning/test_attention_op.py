"""Heads pruned through ONNX's own ``Attention`` and ``RotaryEmbedding`` ops (opset 23), which PyTorch's
exporter writes for ``scaled_dot_product_attention`` at opset 23 and above.

The exactness tests zero every weight of some K/V heads and of the Q heads reading them (grouped-query
attention: ``G`` Q heads per K/V head), and the output projection's rows of those Q heads: they compute 0 and
score 0, so rate 0.5 prunes exactly them, and the pruned model must compute what the zeroed original does.
That holds only if Q, K, V, the output projection and the head-count attributes agree on the heads.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of, status

from onnxsat.pruning.prune import association_trees

B, S, E, D = 2, 6, 16, 4
"""Batch, sequence, model width, head size."""


def attention_op_model(
    form: str = "3d",
    q_heads: int = 4,
    kv_heads: int = 4,
    mask: str = "",
    rotary: bool = False,
    cache: bool = False,
    dead: tuple[int, ...] = (),
) -> onnx.ModelProto:
    """x -> Q, K, V projections -> (RotaryEmbedding on Q and K) -> Attention -> output projection + x.

    ``form="3d"``: Q/K/V ``[B, S, heads * D]`` and the head counts as attributes; ``"4d"``: reshaped and
    transposed to ``[B, heads, S, D]`` as PyTorch exports them. ``mask``: "" none, ``shared`` one
    ``[S, S]`` plane, ``per-head`` a ``[1, q_heads, S, S]`` mask. ``dead``: K/V heads whose weights (and
    their Q heads' and output rows) are zero.
    """
    group = q_heads // kv_heads
    b = Builder()

    projections = {
        "q": b.node("MatMul", ["x", b.heads("wq", E, q_heads, D, dead, group)], "q"),
        "k": b.node("MatMul", ["x", b.heads("wk", E, kv_heads, D, dead, 1)], "k"),
        "v": b.node("MatMul", ["x", b.heads("wv", E, kv_heads, D, dead, 1)], "v"),
    }
    counts = {"q": q_heads, "k": kv_heads, "v": kv_heads}
    if form == "4d":
        for n, t in projections.items():
            target = b.const(f"{n}_split", np.array([B, S, counts[n], D], np.int64))
            projections[n] = b.node(
                "Transpose", [b.node("Reshape", [t, target], f"{n}_heads")], f"{n}_t", perm=[0, 2, 1, 3]
            )
    if rotary:
        positions = b.const("positions", np.tile(np.arange(S, dtype=np.int64), (B, 1)))
        angles = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(D // 2) / (D // 2))).astype(np.float32)
        cos, sin = b.const("cos", np.cos(angles)), b.const("sin", np.sin(angles))
        for n in "qk":
            attrs = {"num_heads": counts[n]} if form == "3d" else {}
            projections[n] = b.node("RotaryEmbedding", [projections[n], cos, sin, positions], f"{n}_rot", **attrs)
    inputs = [projections["q"], projections["k"], projections["v"]]
    if mask == "shared":
        inputs.append(b.const("mask", np.triu(np.full((S, S), -1e4, np.float32), 1)))
    elif mask == "per-head":
        inputs.append(b.const("mask", b.rng.normal(size=(1, q_heads, S, S)).astype(np.float32)))
    if cache:  # a cache of two earlier steps (constant here: the walk looks at the node alone)
        past = [b.random(name, B, kv_heads, 2, D) for name in ("past_key", "past_value")]
        inputs = [*inputs[:3], inputs[3] if mask else "", *past]
    attrs = {"q_num_heads": q_heads, "kv_num_heads": kv_heads} if form == "3d" else {}
    outputs = ["y", "present_key", "present_value"] if cache else ["y"]
    b.nodes.append(helper.make_node("Attention", inputs, outputs, name="attention", **attrs))
    context = "y"
    if form == "4d":
        merged = b.const("merge", np.array([B, S, q_heads * D], np.int64))
        context = b.node("Reshape", [b.node("Transpose", ["y"], "y_t", perm=[0, 2, 1, 3]), merged], "context")
    out = b.node("MatMul", [context, b.heads("wo", E, q_heads, D, dead, group, axis=0)], "out")
    residual = b.node("Add", [out, "x"], "residual")
    return b.model([residual], input_shape=[B, S, E], opset=23)


def attribute(model: onnx.ModelProto, node: str, name: str) -> int:
    found = next(n for n in model.graph.node if n.name == node)
    return next(helper.get_attribute_value(a) for a in found.attribute if a.name == name)


@pytest.mark.parametrize("form", ["3d", "4d"])
@pytest.mark.parametrize(("q_heads", "kv_heads"), [(4, 4), (4, 2)])
def test_q_k_v_and_the_output_projection_form_one_group_of_key_value_heads(
    form: str, q_heads: int, kv_heads: int
) -> None:
    _, _, forest = association_trees(attention_op_model(form, q_heads, kv_heads))
    (group,) = [g for g in forest.groups if "q" in {r.node for r in g.roots}]
    assert [r.node for r in group.roots] == ["q", "k", "v"] and group.leaves == ["out"]
    assert (group.channels, group.heads, group.prunable) == (kv_heads, True, True)


@pytest.mark.parametrize("form", ["3d", "4d"])
@pytest.mark.parametrize(("q_heads", "kv_heads"), [(4, 4), (4, 2), (8, 2)])
@pytest.mark.parametrize("rotary", [False, True])
def test_pruning_heads_that_compute_nothing_changes_no_output(
    form: str, q_heads: int, kv_heads: int, rotary: bool
) -> None:
    dead = tuple(range(1, 1 + kv_heads // 2))
    model = attention_op_model(form, q_heads, kv_heads, rotary=rotary, dead=dead)
    pruned, report = prune(model, rate=0.5)
    assert status(report, "q") == "pruned"
    kept_kv, kept_q = kv_heads - len(dead), q_heads - len(dead) * (q_heads // kv_heads)
    assert shape_of(pruned, "wq") == [E, kept_q * D] and shape_of(pruned, "wk") == [E, kept_kv * D]
    assert shape_of(pruned, "wv") == [E, kept_kv * D] and shape_of(pruned, "wo") == [kept_q * D, E]
    if form == "3d":
        assert (attribute(pruned, "attention", "q_num_heads"), attribute(pruned, "attention", "kv_num_heads")) == (
            kept_q,
            kept_kv,
        )
        if rotary:
            assert attribute(pruned, "q_rot", "num_heads") == kept_q
            assert attribute(pruned, "k_rot", "num_heads") == kept_kv
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


def test_a_mask_shared_by_every_head_keeps_the_heads_prunable() -> None:
    model = attention_op_model("3d", 4, 2, mask="shared", dead=(0,))
    pruned, report = prune(model, rate=0.5)
    assert status(report, "q") == "pruned"
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)


def head_reasons(model: onnx.ModelProto) -> list[str]:
    _, _, forest = association_trees(model)
    return next(g.reasons for g in forest.groups if "q" in {r.node for r in g.roots})


def test_a_mask_with_a_plane_per_head_keeps_the_group_whole() -> None:
    reasons = head_reasons(attention_op_model("4d", 4, 4, mask="per-head"))
    assert reasons == ["Attention 'attention' has a mask 'mask' with a plane per head"]


def test_a_key_value_cache_keeps_the_group_whole() -> None:
    model = attention_op_model("4d", 4, 4, cache=True)
    assert "reads a key/value cache of every head" in head_reasons(model)[0]
    assert run(model)[0].shape == (B, S, E)


def test_rotary_embedding_alone_passes_whole_heads() -> None:
    """A Q projection through RotaryEmbedding (3-D, ``num_heads``) to a MatMul: heads of ``D`` features."""
    b = Builder()
    positions = b.const("positions", np.tile(np.arange(S, dtype=np.int64), (B, 1)))
    angles = np.outer(np.arange(S), [1.0, 0.01]).astype(np.float32)
    q = b.node("MatMul", ["x", b.random("wq", E, 4 * D)], "q")
    rotated = b.node(
        "RotaryEmbedding",
        [q, b.const("cos", np.cos(angles)), b.const("sin", np.sin(angles)), positions],
        "rot",
        num_heads=4,
    )
    y = b.node("MatMul", [rotated, b.random("wo", 4 * D, E)], "out")
    model = b.model([y], input_shape=[B, S, E], opset=23)
    pruned, report = prune(model, rate=0.5)
    group = next(g for g in report.groups if g.roots == ["q"])
    assert (group.unit, group.channels, group.kept) == (f"head/{D}", 4, 2)
    assert attribute(pruned, "rot", "num_heads") == 2
    assert shape_of(pruned, "wq") == [E, 2 * D]
