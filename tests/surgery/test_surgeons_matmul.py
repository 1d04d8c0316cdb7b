"""MatMulAddToGemm and MatMulToTransposeConvTranspose: structure and the same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from catalogue_checks import applied, assert_same_values, make_model, op_types
from onnx import helper

from onnxsat.surgery.surgeons.matmul import MatMulAddToGemm, MatMulToTransposeConvTranspose

RNG = np.random.default_rng(0)
W, B = RNG.normal(size=(6, 5)).astype(np.float32), RNG.normal(size=5).astype(np.float32)


def matmul_add(shape: list[int]) -> onnx.ModelProto:
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        {"x": shape},
        {"y": None},
        {"w": W, "b": B},
    )


def test_document_example_2d_becomes_one_gemm() -> None:
    model = matmul_add([3, 6])
    result = applied(MatMulAddToGemm(), model).model
    assert op_types(result) == ["Gemm"] and list(result.graph.node[0].input) == ["x", "w", "b"]
    assert_same_values(model, result)


def test_document_example_nd_is_reshaped_around_the_gemm() -> None:
    model = matmul_add([2, 3, 6])
    result = applied(MatMulAddToGemm(), model).model
    assert op_types(result) == ["Reshape", "Gemm", "Reshape"]
    assert_same_values(model, result)


def test_no_matmul_add_is_a_no_op() -> None:
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [3, 6]}, {"y": None}, {"w": W})
    outcome = MatMulAddToGemm().apply(model)
    assert not outcome.changed and outcome.notice.endswith("nothing to fuse")


@pytest.mark.parametrize("shape", [[3, 6], [2, 3, 6], [2, 1, 3, 6]])
def test_matmul_becomes_transpose_conv_transpose(shape: list[int]) -> None:
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": shape}, {"y": None}, {"w": W})
    result = applied(MatMulToTransposeConvTranspose(), model).model
    core = [op for op in op_types(result) if op not in ("Unsqueeze", "Squeeze")]
    assert core == ["Transpose", "Conv", "Transpose"]
    assert_same_values(model, result, atol=1e-4)


def test_gemm_with_trans_b_and_bias_becomes_a_conv() -> None:
    model = make_model(
        [helper.make_node("Gemm", ["x", "wt", "b"], ["y"], transB=1)],
        {"x": [3, 6]},
        {"y": None},
        {"wt": W.T.copy(), "b": B},
    )
    result = applied(MatMulToTransposeConvTranspose(), model).model
    assert "Gemm" not in op_types(result)
    assert_same_values(model, result, atol=1e-4)
    skipped = make_model(
        [helper.make_node("Gemm", ["x", "wt"], ["y"], alpha=2.0, transB=1)],
        {"x": [3, 6]},
        {"y": None},
        {"wt": W.T.copy()},
    )
    assert not MatMulToTransposeConvTranspose().apply(skipped).changed
