"""A key padding mask repeated for every head, as ``nn.MultiheadAttention`` (so every ``nn.TransformerEncoder``
given ``src_key_padding_mask``) exports it with PyTorch's dynamo exporter: the mask ``[B, S]`` is reshaped to
``[B, 1, 1, S]``, an Expand repeats it to ``[B, H, 1, S]``, and each layer adds those copies to its scores
``[B, H, S, S]``. The copies are alike, so pruning heads takes as many fewer of them (an edit of the Expand's
shape); the layers reading the same copies must then keep as many heads, so their groups are tied.

The exactness test zeroes the V columns and output-projection rows of two heads in each layer: they score
lowest and rate 0.5 prunes them, and the pruned model must compute what the original does, padding masked.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of, status

from onnxsat.pruning.prune import association_trees

B, S, E, H = 2, 6, 16, 4
D = E // H


def padded_encoder(
    layers: int = 2, dead: tuple[int, ...] = (), mask_axis_size: int = H, via_batch: bool = False
) -> onnx.ModelProto:
    """x ``[B, S, E]`` -> ``layers`` attention blocks with a residual, all reading one repeated padding mask.

    The mask marks as padding the positions whose first feature is above 1 (a mask computed from the input, as
    a graph input would be). ``mask_axis_size``: the Expand's entry on the head axis (1: no repeat needed).
    ``via_batch``: each layer repeats the mask itself and merges the copies into the batch dim ``[B*H, 1, S]``
    and splits them back before adding them, as TorchScript's export of ``nn.MultiheadAttention`` does.
    """
    b = Builder()
    padding = b.node("Greater", [b.node("Gather", ["x", b.const("first", np.array(0, np.int64))], "f0", axis=2),
                                 b.const("one", np.array(1.0, np.float32))], "padding")  # fmt: skip
    additive = b.node(
        "Where", [padding, b.const("minus", np.array(-1e4, np.float32)), b.const("zero", np.array(0.0, np.float32))],
        "additive",
    )  # fmt: skip
    planes = b.node("Reshape", [additive, b.const("planes_shape", np.array([-1, 1, 1, S], np.int64))], "planes")
    copies = b.node("Expand", [planes, b.const("repeat", np.array([1, mask_axis_size, 1, 1], np.int64))], "copies")
    split = b.const("split", np.array([B, S, H, D], np.int64))
    merge = b.const("merge", np.array([B, S, E], np.int64))
    scale = b.const("scale", np.array(1 / np.sqrt(D), np.float32))
    hidden = "x"

    def heads_of(name: str, source: str, zero: bool) -> str:
        weight = b.heads(f"w{name}", E, H, D, dead if zero else ())
        viewed = b.node("Reshape", [b.node("MatMul", [source, weight], name), split], f"{name}_view")
        return b.node("Transpose", [viewed], f"{name}_t", perm=[0, 2, 1, 3])

    for layer in range(layers):
        q, k, v = (heads_of(f"{n}{layer}", hidden, n == "v") for n in "qkv")
        k_t = b.node("Transpose", [k], f"k{layer}_tt", perm=[0, 1, 3, 2])
        scores = b.node("Mul", [b.node("MatMul", [q, k_t], f"qk{layer}"), scale], f"scaled{layer}")
        added = copies
        if via_batch:
            repeated = b.node("Expand", [planes, "repeat"], f"copies{layer}")
            flat = b.const(f"flat{layer}", np.array([B * H, 1, S], np.int64))
            back = b.const(f"back{layer}", np.array([B, H, 1, S], np.int64))
            added = b.node("Reshape", [b.node("Reshape", [repeated, flat], f"merged{layer}"), back], f"split{layer}")
        masked = b.node("Add", [scores, added], f"masked{layer}")
        weights = b.node("Softmax", [masked], f"softmax{layer}", axis=-1)
        context = b.node("MatMul", [weights, v], f"pv{layer}")
        context = b.node("Transpose", [context], f"ctx{layer}_t", perm=[0, 2, 1, 3])
        merged = b.node("Reshape", [context, merge], f"ctx{layer}")
        out = b.node("MatMul", [merged, b.heads(f"wo{layer}", E, H, D, dead, axis=0)], f"out{layer}")
        hidden = b.node("Add", [out, hidden], f"residual{layer}")
    return b.model([hidden], input_shape=[B, S, E])


def test_layers_reading_one_repeated_mask_are_one_group_of_heads() -> None:
    _, _, forest = association_trees(padded_encoder())
    (group,) = [g for g in forest.groups if "q0" in {r.node for r in g.roots}]
    assert {"q1", "k1", "v1"} <= {r.node for r in group.roots}  # tied through the copies both layers add
    assert (group.channels, group.heads, group.prunable) == (H, True, True)


@pytest.mark.parametrize("via_batch", [False, True])
def test_pruning_heads_that_compute_nothing_changes_no_output_and_repeats_the_mask_less(via_batch: bool) -> None:
    model = padded_encoder(dead=(1, 3), via_batch=via_batch)
    inputs = {"x": np.random.default_rng(3).normal(size=(B, S, E)).astype(np.float32)}
    inputs["x"][1, 4:, 0] = 2.0  # the last two positions of the second sample are padding
    pruned, report = prune(model, rate=0.5)
    assert status(report, "q0") == "pruned"
    assert shape_of(pruned, "wq0") == [E, 2 * D] and shape_of(pruned, "wo1") == [2 * D, E]
    values = {t.name: onnx.numpy_helper.to_array(t).tolist() for t in pruned.graph.initializer}
    assert [1, 2, 1, 1] in [v for name, v in values.items() if name.startswith("repeat")]
    if via_batch:  # the copies' targets edited as any tensor of these heads
        assert [B * 2, 1, S] in [v for name, v in values.items() if name.startswith("flat0")]
        assert [B, 2, 1, S] in [v for name, v in values.items() if name.startswith("back0")]
    np.testing.assert_allclose(run(pruned, inputs)[0], run(model, inputs)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


def test_copies_merged_into_the_batch_and_split_back_are_followed_per_layer() -> None:
    _, _, forest = association_trees(padded_encoder(via_batch=True))
    heads = [g for g in forest.groups if {"q0", "q1"} & {r.node for r in g.roots}]
    assert len(heads) == 2 and all(g.prunable and g.heads for g in heads)  # each layer's copies are its own


def test_a_mask_broadcast_without_copies_needs_no_edit() -> None:
    """An Expand whose head entry is 1 leaves the head axis at 1: it broadcasts, and the layers stay apart."""
    _, _, forest = association_trees(padded_encoder(mask_axis_size=1))
    groups = [g for g in forest.groups if {"q0", "q1"} & {r.node for r in g.roots}]
    assert len(groups) == 2 and all(g.prunable for g in groups)
