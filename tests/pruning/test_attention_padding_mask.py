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
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of, status

from onnxsat.pruning.prune import association_trees

B, S, E, H = 2, 6, 16, 4
D = E // H


def padded_encoder(layers: int = 2, dead: tuple[int, ...] = (), mask_axis_size: int = H) -> onnx.ModelProto:
    """x ``[B, S, E]`` -> ``layers`` attention blocks with a residual, all reading one repeated padding mask.

    The mask marks as padding the positions whose first feature is above 1 (a mask computed from the input, as
    a graph input would be). ``mask_axis_size``: the Expand's entry on the head axis (1: no repeat needed).
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
        masked = b.node("Add", [scores, copies], f"masked{layer}")
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


def test_pruning_heads_that_compute_nothing_changes_no_output_and_repeats_the_mask_less() -> None:
    model = padded_encoder(dead=(1, 3))
    inputs = {"x": np.random.default_rng(3).normal(size=(B, S, E)).astype(np.float32)}
    inputs["x"][1, 4:, 0] = 2.0  # the last two positions of the second sample are padding
    pruned, report = prune(model, rate=0.5)
    assert status(report, "q0") == "pruned"
    assert shape_of(pruned, "wq0") == [E, 2 * D] and shape_of(pruned, "wo1") == [2 * D, E]
    assert shape_of(pruned, "repeat") == [4]
    repeat = next(t for t in pruned.graph.initializer if t.name.startswith("repeat"))
    assert onnx.numpy_helper.to_array(repeat).tolist() == [1, 2, 1, 1]
    np.testing.assert_allclose(run(pruned, inputs)[0], run(model, inputs)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


def test_a_mask_broadcast_without_copies_needs_no_edit() -> None:
    """An Expand whose head entry is 1 leaves the head axis at 1: it broadcasts, and the layers stay apart."""
    _, _, forest = association_trees(padded_encoder(mask_axis_size=1))
    groups = [g for g in forest.groups if {"q0", "q1"} & {r.node for r in g.roots}]
    assert len(groups) == 2 and all(g.prunable for g in groups)
