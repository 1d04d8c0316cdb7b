"""Scaled dot-product attention offered as com.microsoft MultiHeadAttention (``rules/attention.py``).

Hand-built graphs in the forms PyTorch's exporter writes (heads split by Reshape and Transpose, K
transposed through Reshape/Transpose/Reshape, the scale as a square root on Q and K or one Div on the
scores, an optional additive or causal mask, the NaN guard after Softmax, the heads merged again):
the fused node is extracted when the cost model prices it below the chain, never for ``portable``, and
ONNX Runtime computes the same outputs as on the original (rtol 1e-4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from eqsat_helpers import check_and_compare, make_model, op_types, random_feeds
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat import decode as decode_module
from onnxsat.eqsat.attention_sites import attention_sites
from onnxsat.eqsat.costs import AnalyticCost, CostModel, MeasuredCost, NodeSignature, TensorInfo
from onnxsat.eqsat.decode import decode
from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.extract import extract
from onnxsat.eqsat.facts import collect_facts
from onnxsat.eqsat.frozen import freeze
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import applicable, rulesets_for
from onnxsat.eqsat.saturate import SaturationLimits, saturate

MHA = "com.microsoft::MultiHeadAttention"
ATTENTION = "com.microsoft::Attention"
B, S, N, D = 2, 8, 2, 4
H = N * D
FLOAT32_MIN = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class Form:
    """Which export variant of attention to build."""

    mask: str = "none"  # none | additive | causal | padding ([B, 1, 1, S], broadcast over the queries)
    scale: str = "sqrt_both"  # sqrt_both | div_scores | none
    key_chain: str = "reshape"  # reshape (the dynamo exporter's chain) | transpose | heads_transposed (TorchScript)
    nan_guard: bool = True
    flatten: bool = False  # merge the heads into [B*S, H] (GPT-2) rather than [B, S, H]
    softmax_axis: int = -1
    biased: bool = True  # Q, K, V = x @ W + b (else x @ W, which the Attention op cannot take)
    grouped: bool = False  # Llama's form: one K/V head repeated for N query heads, rotary-like Mul after the split


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def attention_model(form: Form = Form(), seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits = [
        _const("split_shape", np.array([B, S, -1, D], np.int64)),
        _const("flat_keys", np.array([-1, S, D], np.int64)),
        _const("keys_t", np.array([B, N, D, S], np.int64)),
        _const("merged_shape", np.array([B * S, H] if form.flatten else [B, S, -1], np.int64)),
        _const("root_scale", np.array(D**-0.25, np.float32)),
        _const("sqrt_d", np.array(np.sqrt(D), np.float32)),
        _const("zero", np.array(0.0, np.float32)),
        _const("lowest", np.array(FLOAT32_MIN, np.float32)),
        _const("causal", np.tril(np.ones((S, S), bool))[None, None]),
        _const("rotary", rng.standard_normal((1, 1, S, D)).astype(np.float32)),
        _const("group_axis", np.array([2], np.int64)),
        _const("repeat", np.array([B, 1, N, S, D], np.int64)),
        _const("head_shape", np.array([B, N, S, D], np.int64)),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, H])]
    for part in "qkv":
        width = D if form.grouped and part != "q" else H
        inits += [_const(f"w{part}", rng.standard_normal((H, width)).astype(np.float32) * 0.3)]
        inits += [_const(f"b{part}", rng.standard_normal(width).astype(np.float32) * 0.1)]
        product = f"{part}_mm" if form.biased else f"{part}3"
        nodes.append(helper.make_node("MatMul", ["x", f"w{part}"], [product]))
        if form.biased:
            nodes.append(helper.make_node("Add", [product, f"b{part}"], [f"{part}3"]))
        nodes += [
            helper.make_node("Reshape", [f"{part}3", "split_shape"], [f"{part}_split"]),
            helper.make_node("Transpose", [f"{part}_split"], [f"{part}4"], perm=[0, 2, 1, 3]),
        ]
    q4, k4, v4 = "q4", "k4", "v4"
    if form.grouped:  # rotary-like products after the split, then the K/V head repeated N times
        nodes += [
            helper.make_node("Mul", ["q4", "rotary"], ["q_rotated"]),
            helper.make_node("Mul", ["k4", "rotary"], ["k_rotated"]),
        ]
        for name, source in (("k", "k_rotated"), ("v", "v4")):
            nodes += [
                helper.make_node("Unsqueeze", [source, "group_axis"], [f"{name}_grouped"]),
                helper.make_node("Expand", [f"{name}_grouped", "repeat"], [f"{name}_repeated"]),
            ]
        nodes.append(helper.make_node("Reshape", ["v_repeated", "head_shape"], ["v_heads"]))
        q4, k4, v4 = "q_rotated", "k_repeated", "v_heads"
    if form.key_chain == "reshape":
        nodes += [
            helper.make_node("Reshape", [k4, "flat_keys"], ["k_flat"]),
            helper.make_node("Transpose", ["k_flat"], ["k_flat_t"], perm=[0, 2, 1]),
            helper.make_node("Reshape", ["k_flat_t", "keys_t"], ["kT"]),
        ]
    elif form.key_chain == "heads_transposed":  # K^T in one Transpose of the head split, as TorchScript writes SDPA
        nodes.append(helper.make_node("Transpose", ["k_split"], ["kT"], perm=[0, 2, 3, 1]))
    else:
        nodes.append(helper.make_node("Transpose", [k4], ["kT"], perm=[0, 1, 3, 2]))
    q, k = q4, "kT"
    if form.scale == "sqrt_both":
        nodes += [
            helper.make_node("Mul", [q4, "root_scale"], ["q_scaled"]),
            helper.make_node("Mul", ["kT", "root_scale"], ["k_scaled"]),
        ]
        q, k = "q_scaled", "k_scaled"
    nodes.append(helper.make_node("MatMul", [q, k], ["scores"]))
    scores = "scores"
    if form.scale == "div_scores":
        nodes.append(helper.make_node("Div", ["scores", "sqrt_d"], ["scores_scaled"]))
        scores = "scores_scaled"
    if form.mask in ("additive", "padding"):
        mask_shape = [B, 1, S, S] if form.mask == "additive" else [B, 1, 1, S]
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, mask_shape))
        nodes.append(helper.make_node("Add", [scores, "mask"], ["masked"]))
        scores = "masked"
    elif form.mask == "causal":
        nodes += [
            helper.make_node("Where", ["causal", "zero", "lowest"], ["causal_bias"]),
            helper.make_node("Add", [scores, "causal_bias"], ["masked"]),
        ]
        scores = "masked"
    nodes.append(helper.make_node("Softmax", [scores], ["probs"], axis=form.softmax_axis))
    probs = "probs"
    if form.nan_guard:
        nodes += [
            helper.make_node("IsNaN", ["probs"], ["probs_nan"]),
            helper.make_node("Where", ["probs_nan", "zero", "probs"], ["probs_safe"]),
        ]
        probs = "probs_safe"
    nodes += [
        helper.make_node("MatMul", [probs, v4], ["context"]),
        helper.make_node("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_t", "merged_shape"], ["merged"]),
        helper.make_node("Relu", ["merged"], ["y"]),
    ]
    out_shape = [B * S, H] if form.flatten else [B, S, H]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
    return make_model(nodes, inputs, outputs, inits, opset=17)


class _Priced(CostModel):
    """The analytic model, with some ops at fixed prices (microseconds)."""

    name = "priced"

    def __init__(self, **prices: float) -> None:
        self.analytic = AnalyticCost()
        self.prices = prices

    def node_cost(self, node: NodeSignature) -> float:
        return self.prices.get(node.op_type, self.analytic.node_cost(node))


def optimized(model: onnx.ModelProto, target: str = "ort", cost: CostModel | None = None) -> onnx.ModelProto:
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    encoded = encode(model, typed)
    schedule = applicable(rulesets_for(target), model.graph, bool(encoded.facts.parallel_pairs))
    saturate(encoded.egraph, schedule, SaturationLimits())
    snapshot = freeze(encoded.egraph)
    choice = extract(snapshot, cost or AnalyticCost(), encoded, ort_lookahead=target == "ort").choice
    return decode(encoded, snapshot, choice).model


def _fused_node(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type in ("MultiHeadAttention", "Attention")]
    return node


FORMS = {
    "plain": Form(),
    "additive mask": Form(mask="additive", nan_guard=False),
    "causal Where mask": Form(mask="causal"),
    "Div on the scores, transposed key, no guard": Form(scale="div_scores", key_chain="transpose", nan_guard=False),
    "unscaled, flattened heads": Form(scale="none", flatten=True, mask="causal"),
    "unbiased projections": Form(mask="causal", biased=False),
    "grouped, rotated after the split": Form(mask="causal", grouped=True),
    "TorchScript's SDPA: one Transpose for K, padding mask": Form(
        key_chain="heads_transposed", mask="padding", nan_guard=False
    ),
}


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_attention_is_fused_and_computes_the_same(form: Form) -> None:
    model = attention_model(form)
    result = optimized(model)
    ops = op_types(result)
    projected = form.biased and not form.grouped
    assert (ops[ATTENTION], ops[MHA]) == ((1, 0) if projected else (0, 1))
    assert ops["Softmax"] == 0 and ops["MatMul"] == (0 if projected else 3)
    if form.grouped:  # the head splits and V's repeat stay; Q is merged back, K's repeated heads regrouped
        assert (ops["Transpose"], ops["Reshape"]) == (3 + 1, 3 + 1 + 2)
    else:
        assert (ops["Transpose"], ops["Reshape"]) == (0, 1 if form.flatten else 0)
    attrs = {a.name: helper.get_attribute_value(a) for a in _fused_node(result).attribute}
    assert attrs["num_heads"] == N
    assert attrs["scale"] == pytest.approx(1.0 if form.scale == "none" else D**-0.5, rel=1e-6)
    assert any(o.domain == "com.microsoft" for o in result.opset_import)
    feeds = random_feeds(model)
    if "mask" in feeds:  # a padding mask: 0 where attended, the float32 minimum where not
        feeds["mask"] = np.where(feeds["mask"] > 0, 0.0, FLOAT32_MIN).astype(np.float32)
    check_and_compare(model, result, feeds)


def test_causal_mask_is_the_fused_nodes_attention_bias() -> None:
    for cost in (AnalyticCost(), _Priced(Attention=1e6)):
        result = optimized(attention_model(Form(mask="causal")), cost=cost)
        inputs = list(_fused_node(result).input)
        assert len(inputs) == 6 and inputs[3:5] == ["", ""] and inputs[5]


def test_attention_takes_the_projection_weights_side_by_side() -> None:
    model = attention_model()
    result = optimized(model)
    x, weight, bias = _fused_node(result).input
    values = {t.name: numpy_helper.to_array(t) for t in result.graph.initializer}
    originals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert x == "x"
    np.testing.assert_array_equal(values[weight], np.concatenate([originals[f"w{p}"] for p in "qkv"], axis=-1))
    np.testing.assert_array_equal(values[bias], np.concatenate([originals[f"b{p}"] for p in "qkv"]))


@pytest.mark.parametrize("form", [FORMS["plain"], FORMS["grouped, rotated after the split"]], ids=["plain", "grouped"])
def test_values_decoding_does_not_keep_are_computed_again_the_same(form: Form, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding keeps no large weight it read or made (ViT-base: 250 MB): with every value forgotten once used,
    weights read twice and values derived from derived ones come out the same."""
    model = attention_model(form)
    kept = optimized(model)
    monkeypatch.setattr(decode_module, "UNCACHED_WEIGHT_BYTES", 0)
    forgotten = optimized(model)
    assert forgotten.SerializeToString() == kept.SerializeToString()


def test_portable_target_keeps_standard_ops() -> None:
    model = attention_model(Form(mask="causal"))
    result = optimized(model, target="portable")
    assert all(n.domain in ("", "ai.onnx") for n in result.graph.node)
    assert op_types(result)["Softmax"] == 1
    check_and_compare(model, result)


def test_the_cost_model_chooses_among_the_forms() -> None:
    model = attention_model()
    mha = optimized(model, cost=_Priced(Attention=1e6, MultiHeadAttention=0.5))
    assert (op_types(mha)[MHA], op_types(mha)[ATTENTION], op_types(mha)["MatMul"]) == (1, 0, 3)
    check_and_compare(model, mha)
    result = optimized(model, cost=_Priced(Attention=1e6, MultiHeadAttention=1e6))
    assert op_types(result)[MHA] == op_types(result)[ATTENTION] == 0 and op_types(result)["Softmax"] == 1
    check_and_compare(model, result)


def _sites(model: onnx.ModelProto) -> list[object]:
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    facts = collect_facts(model, typed)
    return facts.attention_sites


def test_sites_name_the_projections_heads_and_scale() -> None:
    (site,) = _sites(attention_model(Form(mask="additive", nan_guard=False)))
    assert (site.query, site.key, site.value, site.bias) == ("q3", "k3", "v3", "mask")
    assert (site.num_heads, site.fused_shape, site.output_shape) == (N, (B, S, H), (B, S, H))
    assert site.projections == ("x", "wq", "wk", "wv", "bq", "bk", "bv")
    (unbiased,) = _sites(attention_model(Form(biased=False)))
    assert unbiased.projections == ()


def test_grouped_sites_read_query_and_repeated_keys_in_heads_layout() -> None:
    (site,) = _sites(attention_model(Form(grouped=True)))
    assert (site.query, site.key, site.value) == ("q_rotated", "k_repeated", "v_heads")
    assert (site.query_merge, site.kv_heads, site.key_regroup, site.projections) == (True, True, (B, N, S, D), ())


def test_softmax_over_another_axis_is_not_attention() -> None:
    model = attention_model(Form(softmax_axis=2))
    assert _sites(model) == []
    assert op_types(optimized(model))[MHA] == 0


def test_nan_guard_stays_with_a_mask_that_may_be_infinite() -> None:
    """A whole row masked by -inf is NaN after Softmax; the guard makes it zeros, the fused op would not."""
    assert _sites(attention_model(Form(mask="additive", nan_guard=True))) == []
    assert len(_sites(attention_model(Form(mask="causal", nan_guard=True)))) == 1


def test_a_mask_of_another_rank_is_not_taken_as_attention_bias() -> None:
    model = attention_model(Form(mask="additive", nan_guard=False))
    for value in model.graph.input:
        if value.name == "mask":
            value.CopyFrom(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [S, S]))
    assert _sites(model) == []


def test_graph_without_softmax_has_no_sites() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    assert attention_sites(graph, collect_facts(helper.make_model(graph), None), lambda name: None, set()) == []


def _signature(op: str, inputs: tuple[TensorInfo | None, ...]) -> NodeSignature:
    attributes = (helper.make_attribute("num_heads", N), helper.make_attribute("scale", 0.5))
    return NodeSignature(op, "com.microsoft", attributes, inputs, (TensorInfo((B, S, H), TensorProto.FLOAT),), 1)


def test_both_cost_models_price_the_fused_ops() -> None:
    """ORT runs each fused signature the rules write, so ``measured`` times it rather than estimating it."""
    x, bias = TensorInfo((B, S, H), TensorProto.FLOAT), TensorInfo((1, 1, S, S), TensorProto.FLOAT, True)
    heads = TensorInfo((B, N, S, D), TensorProto.FLOAT)
    signatures = [
        _signature("MultiHeadAttention", (x, x, x, None, None, bias)),
        _signature("MultiHeadAttention", (x, heads, heads)),
        _signature(
            "Attention",
            (x, TensorInfo((H, 3 * H), TensorProto.FLOAT, True), TensorInfo((3 * H,), TensorProto.FLOAT, True)),
        ),
    ]
    measured = MeasuredCost(persist=False, warmup=1, min_runs=2, max_runs=3, budget_ms=1.0)
    for signature in signatures:
        assert measured.figure(signature).source == "measured"
        assert AnalyticCost().flops(signature) >= 4 * B * S * S * H  # at least Q @ K^T and P @ V


@pytest.mark.parametrize("target", ["ort", "portable"])
def test_optimize_verifies_the_fused_model(target: str) -> None:
    """The whole pass: the fused model passes ONNXSat's own verification against the original."""
    model = attention_model(Form(mask="causal"))
    optimized, report = optimize_model(model, OptimizeOptions(target=target))
    assert report.verification is not None and report.verification.ok
    fused = {label: count for label, count in report.fusions.items() if "Attention" in label}
    assert fused == ({"Softmax -> com.microsoft::Attention": 1} if target == "ort" else {})
    assert all(node.domain in ("", "ai.onnx") for node in optimized.graph.node) == (target == "portable")
