"""Weights stored as int8 behind a Cast and a scale stay so where quantization leaves them in float: a sentence
encoder storing its 38 weights so (its embedding table among them) came out of quantize 2.5x its file's size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.quantization.narrow_storage import NarrowWeights, narrow_chains


def embedding_model() -> onnx.ModelProto:
    """ids -> Gather(table) -> MatMul(w), the table [1000, 64] and w [64, 64] stored in int8 times a scale."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.integers(-127, 128, (1000, 64)).astype(np.int8), "table8"),
        numpy_helper.from_array(np.float32(0.01), "s1"),
        numpy_helper.from_array(rng.integers(-127, 128, (64, 64)).astype(np.int8), "w8"),
        numpy_helper.from_array(np.float32(0.02), "s2"),
    ]
    nodes = [
        helper.make_node("Cast", ["table8"], ["table_wide"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["table_wide", "s1"], ["table"]),
        helper.make_node("Cast", ["w8"], ["w_wide"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["w_wide", "s2"], ["w"]),
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("MatMul", ["e", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_stored",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 64])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_table_left_in_float_is_stored_in_int8_again_and_computes_the_same(tmp_path: Path) -> None:
    source, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(embedding_model(), source)
    argv = ["quantize", str(source), "-o", str(out), "--mode", "dynamic", "--no-node-timing", "--max-drop", "5%"]
    assert main(argv) == 0
    result = onnx.load(out)
    stored = {t.name: t.data_type for t in result.graph.initializer}
    assert stored.get("table8") == TensorProto.INT8 and "table" not in stored  # 64 KB, not 256 KB of float32
    assert out.stat().st_size < 1.2 * source.stat().st_size
    ids = np.random.default_rng(1).integers(0, 1000, (2, 8))
    run = [ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]) for path in (source, out)]
    want, got = (session.run(None, {"ids": ids})[0] for session in run)
    cosine = float(np.sum(got * want) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cosine > 0.97  # the MatMul is int8 now; the table computes what it did


def test_a_chain_goes_back_only_where_it_computes_the_very_values() -> None:
    """A float32 weight of the chain's name but other values (a result that changed it) keeps its values."""
    model = embedding_model()
    chains = narrow_chains(model)
    assert set(chains) >= {"table", "w"} and [n.op_type for n in chains["table"].nodes] == ["Cast", "Mul"]
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    table = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float32) * np.float32(0.01)
    del folded.graph.node[:2]
    del folded.graph.initializer[:2]
    folded.graph.initializer.append(numpy_helper.from_array(table, "table"))
    changed = onnx.ModelProto()
    changed.CopyFrom(folded)
    changed.graph.initializer[-1].CopyFrom(numpy_helper.from_array(table + np.float32(1e-3), "table"))
    narrow = NarrowWeights(chains=chains)
    assert narrow.restore(folded) > 0 and "table8" in {t.name for t in folded.graph.initializer}
    assert narrow.restore(changed) == 0 and "table8" not in {t.name for t in changed.graph.initializer}


def test_chains_sharing_a_scale_and_a_first_step_all_go_back_once() -> None:
    """Two tables scaled by one shared scale, one of them also transposed after its scaling: each goes back,
    the scale and the shared steps once."""
    rng = np.random.default_rng(2)
    a8, b8 = (rng.integers(-127, 128, (128, 64)).astype(np.int8) for _ in range(2))
    weights = [
        numpy_helper.from_array(a8, "a8"),
        numpy_helper.from_array(b8, "b8"),
        numpy_helper.from_array(np.float32(0.05), "s"),
    ]
    nodes = [
        helper.make_node("Cast", ["a8"], ["a_wide"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["a_wide", "s"], ["a"]),
        helper.make_node("Transpose", ["a"], ["a_t"], perm=[1, 0]),
        helper.make_node("Cast", ["b8"], ["b_wide"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["b_wide", "s"], ["b"]),
    ]
    graph = helper.make_graph(nodes, "shared", [], [], weights)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = helper.make_model(
        helper.make_graph(
            [helper.make_node("Gather", [table, "i"], [out]) for table, out in (("a", "x"), ("a_t", "y"), ("b", "z"))],
            "folded",
            [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
            [
                helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, size])
                for n, size in zip("xyz", (64, 128, 64), strict=True)
            ],
            [
                numpy_helper.from_array(a8.astype(np.float32) * np.float32(0.05), "a"),
                numpy_helper.from_array((a8.astype(np.float32) * np.float32(0.05)).T.copy(), "a_t"),
                numpy_helper.from_array(b8.astype(np.float32) * np.float32(0.05), "b"),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    folded.ir_version = 8
    assert NarrowWeights(chains=narrow_chains(original)).restore(folded) > 0
    names = [t.name for t in folded.graph.initializer]
    assert sorted(names) == ["a8", "b8", "s"]
    outputs = [o for node in folded.graph.node for o in node.output]
    assert len(outputs) == len(set(outputs))  # every step once
    onnx.checker.check_model(folded)
    session = ort.InferenceSession(folded.SerializeToString(), providers=["CPUExecutionProvider"])
    x, y, z = session.run(None, {"i": np.array([3, 5])})
    np.testing.assert_array_equal(x, a8[[3, 5]].astype(np.float32) * np.float32(0.05))
    np.testing.assert_array_equal(z, b8[[3, 5]].astype(np.float32) * np.float32(0.05))
    assert y.shape == (2, 128)
