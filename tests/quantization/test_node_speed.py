"""node_speed: which nodes it picks, what it returns, that equal signatures are timed once, the disk cache,
and that a node ORT cannot quantize is left out. Structure only: no assertion depends on which is faster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.costs import disk_cache
from onnxsat.quantization import node_speed
from onnxsat.quantization.node_speed import CACHE_VERSION, NodeSpeed, node_speeds, quantizable_nodes


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache of the test's own, and a few short rounds: the tests check structure, not speed."""
    monkeypatch.setenv(disk_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(node_speed, "PLAN", node_speed.TimingPlan(warmup=1, min_rounds=2, max_rounds=3, budget_s=0.01))


def _weight(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _model(nodes: list[onnx.NodeProto], weights: list[onnx.TensorProto], opset: int = 17) -> onnx.ModelProto:
    """Inputs x [N,3,32,32] (symbolic batch) and m [1,64]; every node output not read by another is an output."""
    read = {name for node in nodes for name in node.input}
    outputs = [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for n in nodes for o in n.output if o not in read
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32]),
        helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 64]),
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


WEIGHTS = [("wc", (16, 3, 3, 3)), ("bc", (16,)), ("wm", (64, 64)), ("wg", (64, 32)), ("bg", (32,))]


def _conv_matmul_gemm() -> onnx.ModelProto:
    """A Conv 3->16 on 1x3x32x32, a MatMul by 64x64 and a Gemm 64->32 with bias."""
    return _model(
        [
            helper.make_node("Conv", ["x", "wc", "bc"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("MatMul", ["m", "wm"], ["mm"], name="matmul"),
            helper.make_node("Gemm", ["mm", "wg", "bg"], ["g"], name="gemm"),
        ],
        [_weight(name, shape) for name, shape in WEIGHTS],
    )


def test_quantizable_nodes_want_an_initializer_weight() -> None:
    model = _model(
        [
            helper.make_node("Conv", ["x", "wc"], ["c"], name="conv", kernel_shape=[3, 3]),
            helper.make_node("MatMul", ["m", "wm"], ["mm"], name="matmul"),
            helper.make_node("Gemm", ["mm", "wg"], ["g"], name="gemm"),
            helper.make_node("Transpose", ["wm"], ["wt"], name="transpose"),
            helper.make_node("MatMul", ["mm", "wt"], ["computed"], name="computed_weight"),
            helper.make_node("MatMul", ["wm", "mm"], ["weight_first"], name="weight_first"),
            helper.make_node("Relu", ["mm"], ["r"], name="relu"),
        ],
        [_weight("wc", (16, 3, 3, 3)), _weight("wm", (64, 64)), _weight("wg", (64, 32))],
    )
    found = quantizable_nodes(model)
    assert [(n.name, n.op_type) for n in found] == [("conv", "Conv"), ("matmul", "MatMul"), ("gemm", "Gemm")]


def test_node_speeds_time_each_node_in_fp32_and_int8() -> None:
    speeds = node_speeds(_conv_matmul_gemm(), cache=False)
    assert set(speeds) == {"conv", "matmul", "gemm"}
    assert {name: s.op_type for name, s in speeds.items()} == {"conv": "Conv", "matmul": "MatMul", "gemm": "Gemm"}
    for name, speed in speeds.items():
        assert isinstance(speed, NodeSpeed)
        assert speed.node == name
        assert speed.fp32_us > 0 and speed.int8_us > 0
        assert speed.int8_core_us is not None and speed.int8_core_us > 0  # static QDQ has a boundary to cut
        assert speed.ratio == pytest.approx(speed.fp32_us / speed.int8_us)
    assert "1[1,3,32,32]" in speeds["conv"].signature  # the symbolic batch was taken as 1


def test_dynamic_mode_and_a_node_subset() -> None:
    speeds = node_speeds(_conv_matmul_gemm(), ["matmul", "gemm"], mode="dynamic", cache=False)
    assert set(speeds) == {"matmul", "gemm"}
    assert all(s.int8_us > 0 and s.int8_core_us is None and s.core_ratio is None for s in speeds.values())
    with pytest.raises(ValueError, match="mode"):
        node_speeds(_conv_matmul_gemm(), mode="qat")


def test_input_shapes_given() -> None:
    speeds = node_speeds(_conv_matmul_gemm(), ["conv"], shapes={"x": [2, 3, 16, 16]}, cache=False)
    assert "1[2,3,16,16]" in speeds["conv"].signature


def test_equal_signatures_are_timed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two MatMuls by different 64x64 weights on inputs of one shape share a signature."""
    model = _model(
        [
            helper.make_node("MatMul", ["m", "w1"], ["a"], name="first"),
            helper.make_node("MatMul", ["a", "w2"], ["b"], name="second"),
            helper.make_node("MatMul", ["b", "w3"], ["c"], name="wider"),
        ],
        [_weight("w1", (64, 64), 1), _weight("w2", (64, 64), 2), _weight("w3", (64, 128), 3)],
    )
    measured = []
    measure = node_speed.measure

    def counting(job: node_speed.OneNode, *args: object, **kwargs: object) -> object:
        measured.append(job.signature)
        return measure(job, *args, **kwargs)

    monkeypatch.setattr(node_speed, "measure", counting)
    speeds = node_speeds(model, cache=False)
    assert set(speeds) == {"first", "second", "wider"}
    assert len(measured) == 2
    assert speeds["first"].signature == speeds["second"].signature != speeds["wider"].signature
    assert (speeds["first"].fp32_us, speeds["first"].int8_us) == (speeds["second"].fp32_us, speeds["second"].int8_us)


def test_the_cache_is_written_then_read_without_timing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = node_speeds(_conv_matmul_gemm())
    path = tmp_path / "cache" / "quant_speed" / f"{disk_cache.machine_key()}.json"
    entries = json.loads(path.read_text())["entries"]
    assert len(entries) == 3
    assert all(key.endswith(f"|static|t1|v{CACHE_VERSION}") and entry["int8_us"] > 0 for key, entry in entries.items())

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("timed a node the cache holds")

    monkeypatch.setattr(node_speed, "measure", refuse)
    assert node_speeds(_conv_matmul_gemm()) == first
    with pytest.raises(AssertionError, match="cache holds"):  # another mode or thread count is another entry
        node_speeds(_conv_matmul_gemm(), mode="dynamic")


def test_cache_false_writes_nothing(tmp_path: Path) -> None:
    node_speeds(_conv_matmul_gemm(), ["matmul"], cache=False)
    assert not (tmp_path / "cache").exists()


def test_a_node_the_quantizer_fails_on_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    quantize = node_speed.quantize

    def fail_on_matmul(job: node_speed.OneNode, mode: str) -> object:
        if job.model.graph.node[0].op_type == "MatMul":
            raise KeyError("the quantizer's own failure")
        return quantize(job, mode)

    monkeypatch.setattr(node_speed, "quantize", fail_on_matmul)
    assert set(node_speeds(_conv_matmul_gemm())) == {"conv", "gemm"}


def test_a_node_the_quantizer_leaves_unchanged_is_left_out() -> None:
    """quantize_dynamic has no integer ConvTranspose: the INT8 model would be the FP32 one."""
    model = _model(
        [
            helper.make_node("ConvTranspose", ["x", "wt"], ["t"], name="deconv", strides=[2, 2]),
            helper.make_node("MatMul", ["m", "wm"], ["mm"], name="matmul"),
        ],
        [_weight("wt", (3, 8, 2, 2)), _weight("wm", (64, 64))],
    )
    assert [n.name for n in quantizable_nodes(model)] == ["deconv", "matmul"]
    assert set(node_speeds(model, mode="dynamic", cache=False)) == {"matmul"}


def test_opset_12_is_raised_to_13_for_per_channel_weights() -> None:
    """Per-channel DequantizeLinear needs opset 13; ORT's quantizer no longer upgrades the model itself."""
    model = _conv_matmul_gemm()
    model.opset_import[0].version = 12
    speeds = node_speeds(model, ["conv"], cache=False)
    assert set(speeds) == {"conv"}
    assert speeds["conv"].signature.startswith("ai.onnx:Conv:13|")
