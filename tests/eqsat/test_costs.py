"""Cost models of ``onnxsat.eqsat.costs``: hand-counted FLOPs and bytes, robustness to unknown shapes,
and the measured model's disk cache (no assertion depends on how fast anything ran)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from onnxsat.eqsat.costs import (
    COST_MODELS,
    AnalyticCost,
    CostModel,
    MeasuredCost,
    NodeSignature,
    TensorInfo,
    UniformCost,
    disk_cache,
    get_cost_model,
)
from onnxsat.eqsat.costs.analytic import PER_NODE_OVERHEAD_US
from onnxsat.eqsat.costs.flops import GROUPED_CONV_PENALTY
from onnxsat.eqsat.costs.microbench import build_model
from onnxsat.errors import SettingsError

FLOAT = TensorProto.FLOAT


def t(shape: tuple | None, constant: bool = False, elem_type: int | None = FLOAT) -> TensorInfo:
    return TensorInfo(shape, elem_type, constant)


def sig(op: str, inputs: tuple, outputs: tuple, domain: str = "", opset: int = 17, **attrs: object) -> NodeSignature:
    attributes = tuple(helper.make_attribute(name, value) for name, value in sorted(attrs.items()))
    return NodeSignature(op, domain, attributes, inputs, outputs, opset)


def conv(bias: bool = True, **attrs: object) -> NodeSignature:
    inputs = (t((1, 3, 8, 8)), t((4, 3, 3, 3), True)) + ((t((4,), True),) if bias else ())
    return sig("Conv", inputs, (t((1, 4, 6, 6)),), **attrs)


# --- analytic: FLOPs and bytes by hand -------------------------------------------------------------


def test_conv_flops_by_hand() -> None:
    model = AnalyticCost()
    # 144 outputs, each 3 input channels x 3x3 taps = 27 multiply-adds; plus one bias add per output.
    assert model.flops(conv(bias=False)) == 2 * 144 * 27
    assert model.flops(conv(bias=True)) == 2 * 144 * 27 + 144
    # Bytes: input, weight, bias read; output written (float32).
    assert model.bytes_moved(conv()) == 4 * (3 * 64 + 4 * 27 + 4 + 144)


def test_grouped_conv_flops_by_hand() -> None:
    model = AnalyticCost()
    dense_groups = sig("Conv", (t((1, 64, 8, 8)), t((64, 32, 1, 1), True)), (t((1, 64, 8, 8)),), group=2)
    assert model.flops(dense_groups) == 2 * 64 * 64 * 32  # 32 input channels per group: no penalty
    depthwise = sig("Conv", (t((1, 8, 8, 8)), t((8, 1, 3, 3), True)), (t((1, 8, 6, 6)),), group=8)
    assert model.flops(depthwise) == 2 * 8 * 36 * 9 * GROUPED_CONV_PENALTY


def test_conv_transpose_flops_by_hand() -> None:
    node = sig("ConvTranspose", (t((1, 4, 5, 5)), t((4, 2, 3, 3), True)), (t((1, 2, 7, 7)),))
    assert AnalyticCost().flops(node) == 2 * 100 * 2 * 9  # every input element scatters into 2x3x3 outputs


@pytest.mark.parametrize("output_shape", [(2, 5, 3, 6), None])
def test_batched_broadcast_matmul_flops_by_hand(output_shape: tuple | None) -> None:
    # (2, 1, 3, 4) x (5, 4, 6) -> (2, 5, 3, 6): 180 outputs, K = 4; derived by broadcasting if the output is unknown.
    node = sig("MatMul", (t((2, 1, 3, 4)), t((5, 4, 6))), (t(output_shape),))
    assert AnalyticCost().flops(node) == 2 * 180 * 4


def test_gemm_flops_by_hand() -> None:
    # A is (K=4, M=3) with transA; B is (N=5, K=4) with transB; C adds once per output.
    node = sig("Gemm", (t((4, 3)), t((5, 4), True), t((5,), True)), (t((3, 5)),), transA=1, transB=1)
    assert AnalyticCost().flops(node) == 2 * 15 * 4 + 15
    without_output_shape = sig("Gemm", (t((4, 3)), t((5, 4), True)), (t(None),), transA=1, transB=1)
    assert AnalyticCost().flops(without_output_shape) == 2 * 15 * 4


def test_cost_is_the_roofline_sum() -> None:
    model = AnalyticCost(flops_per_us=1000.0, bytes_per_us=100.0, overhead_us=0.5)
    node = conv()
    expected = model.flops(node) / 1000.0 + model.bytes_moved(node) / 100.0 + 0.5
    assert model.node_cost(node) == pytest.approx(expected)
    peak = AnalyticCost(flops_per_us=1000.0, bytes_per_us=100.0, overhead_us=0.5, roofline="max")
    assert peak.node_cost(node) == pytest.approx(max(model.flops(node) / 1000.0, model.bytes_moved(node) / 100.0) + 0.5)


def test_transcendental_costs_more_than_relu() -> None:
    model = AnalyticCost()
    shape = (1, 64, 56, 56)
    costs = {op: model.node_cost(sig(op, (t(shape),), (t(shape),))) for op in ("Relu", "Tanh", "Erf", "Exp")}
    assert costs["Relu"] < costs["Exp"] < costs["Tanh"] < costs["Erf"]


def test_view_ops_cost_only_the_overhead_and_gather_reads_rows() -> None:
    model = AnalyticCost()
    reshape = sig("Reshape", (t((1, 64, 56, 56)), t((2,), True, TensorProto.INT64)), (t((64, 3136)),))
    assert model.node_cost(reshape) == pytest.approx(PER_NODE_OVERHEAD_US)
    lookup = sig("Gather", (t((30000, 768), True), t((1, 8), False, TensorProto.INT64)), (t((1, 8, 768)),))
    assert model.bytes_moved(lookup) == 4 * 8 * 768 + 8 * 8 + 4 * 8 * 768  # rows read, indices, output


# --- analytic: fusion pays ------------------------------------------------------------------------


def test_fused_conv_relu_costs_less_than_conv_then_relu() -> None:
    model = AnalyticCost()
    x, w, b, y = t((1, 64, 56, 56)), t((64, 64, 3, 3), True), t((64,), True), t((1, 64, 56, 56))
    plain = sig("Conv", (x, w, b), (y,), pads=[1, 1, 1, 1])
    relu = sig("Relu", (y,), (y,))
    fused = sig("FusedConv", (x, w, b), (y,), domain="com.microsoft", opset=1, pads=[1, 1, 1, 1], activation="Relu")
    assert model.node_cost(fused) < model.node_cost(plain) + model.node_cost(relu)
    # The saving is the intermediate written and read back, plus one node's overhead (Relu's 1 flop/element stays).
    saving = model.node_cost(plain) + model.node_cost(relu) - model.node_cost(fused)
    assert saving == pytest.approx(2 * 4 * 64 * 56 * 56 / model.bytes_per_us + model.overhead_us)


def test_fused_matmul_add_gelu_chain() -> None:
    model = AnalyticCost()
    x, w, h = t((1, 128, 768)), t((768, 3072), True), t((1, 128, 3072))
    bias = t((3072,), True)
    chain = [sig("MatMul", (x, w), (h,)), sig("Add", (h, bias), (h,)), sig("Gelu", (h,), (h,), opset=20)]
    fused = [sig("MatMul", (x, w), (h,)), sig("BiasGelu", (h, bias), (h,), domain="com.microsoft", opset=1)]
    assert sum(map(model.node_cost, fused)) < sum(map(model.node_cost, chain))


# --- analytic: unknowns never crash ------------------------------------------------------------------

UNKNOWN_SIGNATURES = [
    sig("Conv", (t(None), t(None, True)), (t(None),)),
    sig("Conv", (t(("N", 3, None, None)), t((8, 3, 3, 3), True)), (t(("N", 8, None, None)),), group=1),
    sig("MatMul", (t(("batch", "seq", 64)), t((64, 64), True)), (t(None, elem_type=None),)),
    sig("MatMul", (t((64,)), t((64,))), (t(()),)),
    sig("Gemm", (t(None), t(None)), (t((None, None)),)),
    sig("Attention", (t(None), t(None, True)), (t(None),), domain="com.microsoft", opset=1, num_heads=4),
    sig("MultiHeadAttention", (t((1, "S", 64)), None, None), (t((1, "S", 64)),), domain="com.microsoft", num_heads=2),
    sig("LSTM", (t(None), t(None), t(None)), (t(None),)),
    sig("Einsum", (t(("a", 3)), t((3, 5))), (t(None),), equation="ij,jk->ik"),
    sig("Einsum", (t((2, 3)), t(None)), (t(None),), equation="...j,jk->...k"),
    sig("MaxPool", (t(None),), (t(None),)),
    sig("FusedConv", (t(None), t(None, True), None), (t(None),), domain="com.microsoft", activation="NoSuchAct"),
    sig("Resize", (t(None), None, None, t((4,), True, TensorProto.INT64)), (t(None),), mode="cubic"),
    sig("SomeCustomOp", (None, t(None, elem_type=None)), (t(None, elem_type=None),), domain="my.domain", opset=3),
    sig("Cast", (t((4, -1)),), (t((4, "n"), elem_type=TensorProto.INT4),), to=TensorProto.INT4),
    sig("Equal", (t((8,), elem_type=TensorProto.STRING), t((8,), elem_type=TensorProto.STRING)), (t((8,), False, 9),)),
    sig("If", (t((), elem_type=TensorProto.BOOL),), (t(None),)),
    sig("Constant", (), (t((3,), True),)),
    sig("NoOutputs", (t((3,)),), ()),
]


@pytest.mark.parametrize("node", UNKNOWN_SIGNATURES, ids=lambda node: node.op_type)
def test_unknown_shapes_and_types_do_not_crash(node: NodeSignature) -> None:
    for model in (AnalyticCost(), AnalyticCost(default_dim=8, default_numel=10), UniformCost()):
        cost = model.node_cost(node)
        assert cost > 0 and math.isfinite(cost)


def test_default_dim_prices_symbolic_dims() -> None:
    node = sig("Relu", (t(("N", 256)),), (t(("N", 256)),))
    assert AnalyticCost(default_dim=16).node_cost(node) > AnalyticCost().node_cost(node)
    assert AnalyticCost().bytes_moved(node) == 2 * 4 * 256  # a symbolic dim counts as 1 by default


def test_bad_analytic_options_are_settings_errors() -> None:
    with pytest.raises(SettingsError, match="default_dim"):
        AnalyticCost(default_dim=0)
    with pytest.raises(SettingsError, match="roofline"):
        AnalyticCost(roofline="min")


# --- signatures, registry, uniform ----------------------------------------------------------------


def test_signature_key_is_stable_and_tells_signatures_apart() -> None:
    base = conv()
    assert base.key() == conv().key() and base == conv() and hash(base) == hash(conv())
    variants = [
        conv(pads=[1, 1, 1, 1]),
        conv(bias=False),
        sig("Conv", (t((1, 3, 8, 8)), t((4, 3, 3, 3), False), t((4,), True)), (t((1, 4, 6, 6)),)),
        sig("Conv", (t(("N", 3, 8, 8)), t((4, 3, 3, 3), True), t((4,), True)), (t((1, 4, 6, 6)),)),
        NodeSignature("Conv", "", (), base.inputs, base.outputs, opset=11),
        NodeSignature("Conv", "", (), base.inputs, (t((1, 4, 6, 6), elem_type=TensorProto.FLOAT16),)),
    ]
    keys = {base.key(), *(v.key() for v in variants)}
    assert len(keys) == len(variants) + 1
    assert len({base, *variants}) == len(variants) + 1  # usable as dict keys despite AttributeProto fields


def test_uniform_costs_one() -> None:
    model = get_cost_model("uniform")
    assert isinstance(model, UniformCost) and isinstance(model, CostModel)
    assert model.node_cost(conv()) == 1.0
    assert model.node_cost(UNKNOWN_SIGNATURES[-1]) == 1.0


def test_registry_names_and_errors() -> None:
    assert set(COST_MODELS) == {"uniform", "analytic", "measured"}
    assert isinstance(get_cost_model(), AnalyticCost)
    assert get_cost_model("analytic", default_dim=4).default_dim == 4
    with pytest.raises(SettingsError, match="analytic, measured, uniform"):
        get_cost_model("fastest")
    with pytest.raises(SettingsError, match="no option threads"):
        get_cost_model("analytic", threads=2)
    with pytest.raises(SettingsError, match="min_runs"):
        get_cost_model("measured", min_runs=0)


# --- measured ---------------------------------------------------------------------------------------

FAST = {"warmup": 1, "min_runs": 2, "max_runs": 3, "budget_ms": 1.0}
MATMUL = sig("MatMul", (t(("N", 16)), t((16, 8), True)), (t(("N", 8)),))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(disk_cache.CACHE_ENV, str(tmp_path))
    return tmp_path


def cache_file(root: Path) -> Path:
    files = list((root / "costs").glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def test_measured_times_once_then_reuses_the_disk_cache(cache_dir: Path) -> None:
    first = get_cost_model("measured", default_dim=2, **FAST)
    assert isinstance(first, MeasuredCost) and isinstance(first, CostModel)
    figure = first.figure(MATMUL)
    assert figure.source == "measured" and figure.us > 0 and math.isfinite(figure.us)
    assert first.node_cost(MATMUL) == figure.us  # the second lookup comes from memory
    assert (first.stats.measured, first.stats.from_cache, first.stats.estimated, first.stats.memory_hits) == (
        1,
        0,
        0,
        1,
    )

    path = cache_file(cache_dir)
    assert path == first.path and path.name.endswith(f"ort{onnxruntime.__version__}.json")
    data = json.loads(path.read_text())
    assert data["machine"] == disk_cache.machine_key() and data["baseline_us"] > 0
    assert list(data["entries"]) == [first.resolve(MATMUL).key()]  # keyed with N resolved to default_dim
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]  # the atomic write left no temp file

    second = MeasuredCost(default_dim=2, **FAST)
    assert second.node_cost(MATMUL) == pytest.approx(figure.us)
    assert second.figure(MATMUL).source == "cache"
    assert (second.stats.measured, second.stats.from_cache) == (0, 1)

    other_batch = MeasuredCost(default_dim=3, **FAST)  # a different resolved shape is a different signature
    other_batch.node_cost(MATMUL)
    assert other_batch.stats.measured == 1
    assert len(json.loads(path.read_text())["entries"]) == 2  # merged, not overwritten


@pytest.mark.parametrize("garbage", ["{not json", '{"format": 1, "machine": "elsewhere", "entries": {}}', "[]"])
def test_measured_tolerates_a_corrupt_cache_file(cache_dir: Path, garbage: str) -> None:
    path = disk_cache.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(garbage)
    with pytest.warns(RuntimeWarning, match="cost cache"):
        model = MeasuredCost(**FAST)
    assert model.node_cost(MATMUL) > 0
    assert model.stats.measured == 1
    assert MeasuredCost(**FAST).figure(MATMUL).source == "cache"  # the next save replaced the bad file


def test_measured_drops_bad_entries_but_keeps_good_ones(cache_dir: Path) -> None:
    model = MeasuredCost(**FAST)
    model.node_cost(MATMUL)
    path = cache_file(cache_dir)
    data = json.loads(path.read_text())
    data["entries"]["bogus"] = {"us": "fast"}
    path.write_text(json.dumps(data))
    again = MeasuredCost(**FAST)
    assert again.figure(MATMUL).source == "cache"


def test_measured_falls_back_to_the_estimate(cache_dir: Path) -> None:
    model = MeasuredCost(**FAST)
    analytic = AnalyticCost()
    not_an_op = sig("NoSuchOperator", (t((4, 4)),), (t((4, 4)),))
    subgraph = NodeSignature(
        "If",
        "",
        (helper.make_attribute("then_branch", helper.make_graph([], "g", [], [])),),
        (t((), elem_type=TensorProto.BOOL),),
        (t((4,)),),
    )
    unknown_rank = sig("Relu", (t(None),), (t(None),))
    too_large = sig("Relu", (t((2**20, 2**10)),), (t((2**20, 2**10)),))
    for node in (not_an_op, subgraph, unknown_rank, too_large):
        figure = model.figure(node)
        assert figure.source == "estimated" and figure.reason
        assert figure.us == pytest.approx(analytic.node_cost(model.resolve(node)))
    assert "ONNX Runtime" in model.figure(not_an_op).reason
    assert (model.stats.measured, model.stats.estimated) == (0, 4)
    assert not (cache_dir / "costs").exists()  # nothing was timed, so nothing was written


def test_measured_without_persistence_writes_nothing(cache_dir: Path) -> None:
    model = MeasuredCost(persist=False, **FAST)
    assert model.node_cost(MATMUL) > 0
    assert not (cache_dir / "costs").exists()


def test_measured_times_ops_whose_inputs_shape_the_output(cache_dir: Path) -> None:
    """Reshape's shape and Expand's shape are filled from the output shape, so ORT accepts the one-node model."""
    model = MeasuredCost(**FAST)
    reshape = sig("Reshape", (t((2, 3, 4)), t((2,), True, TensorProto.INT64)), (t((6, 4)),))
    expand = sig("Expand", (t((1, 4)), t((2,), False, TensorProto.INT64)), (t((3, 4)),))
    for node in (reshape, expand):
        assert model.figure(node).source == "measured"


def test_one_node_model_is_valid_onnx() -> None:
    model, feeds = build_model(MeasuredCost(persist=False).resolve(MATMUL))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version >= 9 and list(feeds) == ["x0"] and [i.name for i in model.graph.initializer] == ["w1"]


def test_measured_survives_an_unwritable_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv(disk_cache.CACHE_ENV, str(blocker))
    with pytest.warns(RuntimeWarning, match="unreadable cost cache"):
        model = MeasuredCost(**FAST)
    with pytest.warns(RuntimeWarning, match="cannot write cost cache"):
        assert model.node_cost(MATMUL) > 0
    assert model.node_cost(sig("Relu", (t((4,)),), (t((4,)),))) > 0  # no second warning, still measured
    assert model.stats.measured == 2


def test_numpy_dims_count_as_static() -> None:
    import numpy as np

    node = sig("Relu", (t((np.int64(3), 4)),), (t((3, 4)),))
    assert AnalyticCost(default_dim=100).bytes_moved(node) == 2 * 4 * 12
