"""Pruned weights written back dense or as COO sparse initializers (sparsity/storage.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.sparsity.storage import coo_bytes, to_sparse_initializers, with_masks


def two_matmuls(sparsities: tuple[float, float]) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = []
    for name, level in zip(("w1", "w2"), sparsities, strict=True):
        value = rng.normal(size=(32, 32)).astype(np.float32)
        value.reshape(-1)[rng.permutation(value.size)[: round(level * value.size)]] = 0.0
        inits.append(numpy_helper.from_array(value, name))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_masks_zero_exactly_the_masked_elements_and_keep_the_input() -> None:
    model = two_matmuls((0.0, 0.0))
    before = model.SerializeToString()
    mask = np.zeros((32, 32), dtype=bool)
    mask[::2] = True
    pruned = with_masks(model, {"w1": mask}, None)
    value = numpy_helper.to_array(next(t for t in pruned.graph.initializer if t.name == "w1"))
    assert (value[mask] == 0).all() and (value[~mask] != 0).all()
    assert model.SerializeToString() == before


def test_sparse_initializers_hold_the_nonzeros_and_run_like_the_dense_model() -> None:
    model = two_matmuls((0.9, 0.5))
    x = np.random.default_rng(0).normal(size=(4, 32)).astype(np.float32)
    expected = run(model, x)
    dense_size = model.ByteSize()
    storage = to_sparse_initializers(model, ["w1", "w2"], min_sparsity=0.5)
    assert storage.moved == ["w1"]
    assert "COO would be larger" in storage.kept_dense["w2"]  # 50% of float32: 12 bytes per non-zero > 4 per element
    (sparse,) = model.graph.sparse_initializer
    values, indices = numpy_helper.to_array(sparse.values), numpy_helper.to_array(sparse.indices)
    assert values.size == indices.size and (values != 0).all() and indices.dtype == np.int64
    onnx.checker.check_model(model)
    np.testing.assert_array_equal(run(model, x), expected)
    assert model.ByteSize() < dense_size


def test_weights_below_the_level_stay_dense() -> None:
    model = two_matmuls((0.9, 0.95))
    storage = to_sparse_initializers(model, ["w1", "w2"], min_sparsity=0.92)
    assert storage.moved == ["w2"] and "below 92%" in storage.kept_dense["w1"]


def test_coo_size_counts_value_and_int64_index_per_nonzero() -> None:
    assert coo_bytes(np.array([0, 1, 0, 2], dtype=np.float32)) == 2 * (4 + 8)
