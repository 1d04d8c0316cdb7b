"""Weights stored as ``sparse_initializer`` (``sparsify --sparse-initializers`` writes them): the passes that
rewrite weights (sparsify, prune, quantize, compress) get them dense, as ONNX Runtime reads them; optimize
keeps them sparse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.normal_form import densify_sparse_initializers
from onnxsat.sparsity.storage import to_sparse_initializers

NOTE = "normal form: 2 weights stored as sparse_initializer read as dense initializers"


def dense_weights() -> dict[str, np.ndarray]:
    """Two 32x32 weights, 70% zeros (so COO storage is the smaller)."""
    rng = np.random.default_rng(3)
    weights = {}
    for name in ("w1", "w2"):
        value = rng.normal(size=(32, 32)).astype(np.float32)
        value.reshape(-1)[rng.permutation(value.size)[: round(0.7 * value.size)]] = 0.0
        weights[name] = value
    return weights


def sparse_mlp(path: Path | None = None) -> onnx.ModelProto:
    """x[4,32] -> MatMul w1 -> Relu -> MatMul w2 -> y, both weights stored as sparse initializers."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "sparse_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(value, name) for name, value in dense_weights().items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert to_sparse_initializers(model, ["w1", "w2"], min_sparsity=0.5).moved == ["w1", "w2"]
    if path is not None:
        onnx.save(model, path)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_densified_weights_hold_the_same_values_and_compute_the_same() -> None:
    model = sparse_mlp()
    dense = onnx.ModelProto()
    dense.CopyFrom(model)
    notes = densify_sparse_initializers(dense)
    assert notes and notes[0].startswith("2 weights stored as sparse_initializer read as dense initializers")
    assert not dense.graph.sparse_initializer
    values = {t.name: numpy_helper.to_array(t) for t in dense.graph.initializer}
    for name, value in dense_weights().items():
        np.testing.assert_array_equal(values[name], value)
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_array_equal(_run(dense, x), _run(model, x))
    assert densify_sparse_initializers(dense) == []  # nothing sparse: nothing changes


def test_per_dimension_indices_are_densified_too() -> None:
    """COO indices may be [NNZ] flat positions or [NNZ, rank] coordinates."""
    values = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "w")
    indices = numpy_helper.from_array(np.array([[0, 1], [2, 0]], np.int64))
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2])])
    graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [3, 2]))
    model = helper.make_model(graph, ir_version=9)
    assert densify_sparse_initializers(model) == [
        "1 weight stored as sparse_initializer read as dense initializers, as ONNX Runtime reads them (the result "
        "stores them dense: sparsify --sparse-initializers stores sparse weights in COO form again)"
    ]
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]), [[0, 1.5], [0, 0], [-2.0, 0]])


def test_sparsify_sees_weights_stored_sparse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, out = tmp_path / "m.onnx", tmp_path / "s.onnx"
    sparse_mlp(source)
    assert main(["sparsify", str(source), "-o", str(out), "--sparsity", "0.8"]) == 0
    printed = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in printed.splitlines() if line.startswith(("w1 ", "w2 "))}
    assert set(rows) == {"w1", "w2"} and NOTE in printed
    result = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    assert all(np.mean(result[name] == 0) >= 0.79 for name in ("w1", "w2"))


def test_prune_sees_weights_stored_sparse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sparse_mlp(tmp_path / "m.onnx")
    out = tmp_path / "p.onnx"
    assert main(["prune", str(tmp_path / "m.onnx"), "-o", str(out), "--rate", "0.5"]) == 0
    assert NOTE in capsys.readouterr().out
    result = {t.name: list(t.dims) for t in onnx.load(out).graph.initializer}
    assert result["w1"] == [32, 16] and result["w2"] == [16, 32]  # the 32 hidden channels halved
    assert main(["prune", str(tmp_path / "m.onnx"), "--show-trees"]) == 0  # the trees prune walks
    assert "no channel group" not in capsys.readouterr().out


def test_quantize_sees_weights_stored_sparse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sparse_mlp(tmp_path / "m.onnx")
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(tmp_path / "m.onnx"), "-o", str(out), "--mode", "dynamic", "--no-node-timing"]) == 0
    printed = capsys.readouterr().out
    assert "nothing to quantize" not in printed and NOTE in printed
    assert "MatMulInteger" in {node.op_type for node in onnx.load(out).graph.node}


def test_optimize_keeps_weights_stored_sparse(tmp_path: Path) -> None:
    model = sparse_mlp(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(out)]) == 0
    result = onnx.load(out)
    assert {s.values.name for s in result.graph.sparse_initializer} == {"w1", "w2"}
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(result, x), _run(model, x), rtol=1e-5, atol=1e-5)
