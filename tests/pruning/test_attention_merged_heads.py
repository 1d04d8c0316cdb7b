"""Heads merged into the batch dim, as ``nn.MultiheadAttention`` (and so ``nn.TransformerEncoder``) exports:
``[S, B, E] -> [S, B*H, D] -> [B*H, S, D]``, batched products there (``need_weights=True``) or split back to
``[B, H, S, D]`` for scaled dot-product attention, K transposed through ``[B*H, S, D]`` with a target read off
its own shape, and merged back by ``[S, B*H, D] -> [S*B, E]`` before the output projection.

The exactness tests zero the V columns and output-projection rows of two heads: they score lowest and rate
0.5 prunes them, and the pruned model must compute what the original does at every batch size.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of, status

from onnxsat.pruning.prune import association_trees

S, E, H = 5, 16, 4
D = E // H
INT64_MIN = np.iinfo(np.int64).min


def merged_heads_model(
    path: str = "products", batch: int | str = "batch", dead: tuple[int, ...] = ()
) -> onnx.ModelProto:
    """x ``[S, B, E]`` -> Q, K, V projections -> heads merged into the batch dim -> attention -> out projection.

    ``path="products"``: the products on ``[B*H, S, D]`` (``need_weights=True``); ``"split"``: split back to
    ``[B, H, S, D]``, K transposed through ``[B*H, S, D]`` with a run-time target read off its own shape
    (PyTorch's dynamo export of scaled dot-product attention). ``batch``: a symbol (``-1`` targets), an
    int (literal targets, edited) or ``computed`` (symbolic, the merge's target ``batch * H`` computed at run
    time as TorchScript writes it: the Mul's factor is edited).
    """
    b = Builder()
    merged = -1 if isinstance(batch, str) else batch * H
    input_batch = "batch" if batch == "computed" else batch
    ones = np.ones(E, bool)
    for head in dead:
        ones[head * D : (head + 1) * D] = False

    def project(name: str, zero: bool = False) -> str:
        weight = (b.rng.normal(size=(E, E)) * 0.5).astype(np.float32)
        if zero:
            weight[:, ~ones] = 0.0
        return b.node("MatMul", ["x", b.const(f"w{name}", weight)], name)

    split = b.const("split", np.array([S, merged, D], np.int64))
    if batch == "computed":  # TorchScript: view(S, bsz * num_heads, D), bsz read off the input at run time
        size = b.node("Gather", [b.node("Shape", ["x"], "x_shape"), b.const("one", np.array(1, np.int64))], "bsz")
        times = b.node("Mul", [size, b.const("num_heads", np.array(H, np.int64))], "bsz_heads")
        axes = b.const("axes_0", np.array([0], np.int64))
        pieces = [b.const("s_entry", np.array([S], np.int64)), b.node("Unsqueeze", [times, axes], "bh_entry")]
        split = b.node("Concat", [*pieces, b.const("d_entry", np.array([D], np.int64))], "split_target", axis=0)
    q, k, v = (
        b.node("Transpose", [b.node("Reshape", [project(n, n == "v"), split], f"{n}_view")], f"{n}_t", perm=[1, 0, 2])
        for n in "qkv"
    )
    scale = b.const("scale", np.array(1 / np.sqrt(D), np.float32))
    if path == "products":
        k_t = b.node("Transpose", ["k_view"], "k_tt", perm=[1, 2, 0])
        scores = b.node("MatMul", [b.node("Mul", [q, scale], "q_scaled"), k_t], "scores")
        context = b.node("MatMul", [b.node("Softmax", [scores], "probs", axis=-1), v], "context")
        merged_back = b.node("Transpose", [context], "context_t", perm=[1, 0, 2])
    else:
        four = b.const("four", np.array([-1 if isinstance(batch, str) else batch, H, S, D], np.int64))
        q4, k4, v4 = (b.node("Reshape", [t, four], f"{n}4") for n, t in zip("qkv", (q, k, v), strict=True))
        shape = b.node("Shape", [k4], "k_shape")
        flat = b.node("Reshape", [k4, b.const("flat", np.array([-1, S, D], np.int64))], "k_flat")
        flat_t = b.node("Transpose", [flat], "k_flat_t", perm=[0, 2, 1])
        first_two = b.node(
            "Slice", [shape, b.const("from_start", np.array([INT64_MIN])), b.const("minus_two", np.array([-2]))], "bh"
        )
        target = b.node("Concat", [first_two, b.const("d_s", np.array([D, S], np.int64))], "k_target", axis=0)
        k_t = b.node("Reshape", [flat_t, target], "k_t4")
        scores = b.node("MatMul", [b.node("Mul", [q4, scale], "q_scaled"), k_t], "scores")
        context = b.node("MatMul", [b.node("Softmax", [scores], "probs", axis=-1), v4], "context")
        merged_back = b.node("Transpose", [context], "context_t", perm=[2, 0, 1, 3])
    rows = b.node("Reshape", [merged_back, b.const("rows_target", np.array([-1, E], np.int64))], "rows")
    wo = (b.rng.normal(size=(E, E)) * 0.5).astype(np.float32)
    wo[~ones] = 0.0
    out = b.node("Gemm", [rows, b.const("wo", wo), b.random("bo", E)], "out")
    back = b.node("Reshape", [out, b.const("back_target", np.array([S, -1, E], np.int64))], "out_view")
    y = b.node("Add", [back, "x"], "y")
    return b.model([y], input_shape=[S, input_batch, E])


def head_group_status(model: onnx.ModelProto) -> tuple[int, bool, list[str]]:
    _, _, forest = association_trees(model)
    (group,) = [g for g in forest.groups if "q" in {r.node for r in g.roots}]
    return group.channels, group.heads, group.reasons


@pytest.mark.parametrize("path", ["products", "split"])
@pytest.mark.parametrize("batch", ["batch", 2, "computed"])
def test_heads_merged_into_the_batch_dim_form_one_group(path: str, batch: int | str) -> None:
    channels, heads, reasons = head_group_status(merged_heads_model(path, batch))
    assert (channels, heads, reasons) == (H, True, [])


@pytest.mark.parametrize("path", ["products", "split"])
@pytest.mark.parametrize("batch", ["batch", 2, "computed"])
def test_pruning_heads_that_contribute_nothing_changes_no_output(path: str, batch: int | str) -> None:
    model = merged_heads_model(path, batch, dead=(1, 2))
    pruned, report = prune(model, rate=0.5)
    assert status(report, "q") == "pruned"
    for name in ("wq", "wk", "wv"):
        assert shape_of(pruned, name) == [E, 2 * D]
    assert shape_of(pruned, "wo") == [2 * D, E]
    sizes = [1, 3] if isinstance(batch, str) else [batch]
    for size in sizes:
        x = {"x": np.random.default_rng(size).normal(size=(S, size, E)).astype(np.float32)}
        np.testing.assert_allclose(run(pruned, x)[0], run(model, x)[0], rtol=1e-5, atol=1e-5)
    assert_rate_zero_is_identity(model)


def test_a_concat_on_the_merged_dim_keeps_the_group_whole() -> None:
    """A Concat along ``B*H`` would shift heads of every batch entry: not followed."""
    model = merged_heads_model("products")
    graph = model.graph
    node = next(n for n in graph.node if n.name == "context")
    concat = onnx.helper.make_node("Concat", ["context", "context"], ["twice"], name="twice", axis=0)
    graph.node.insert(list(graph.node).index(node) + 1, concat)
    graph.output.append(onnx.helper.make_tensor_value_info("twice", onnx.TensorProto.FLOAT, None))
    _, _, reasons = head_group_status(model)
    assert "Concat 'twice' reads heads merged into the dims before them" in reasons
