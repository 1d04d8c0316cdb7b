"""MatMulAddToGemm, GemmToMatMulAdd and MatMulToTransposeConvTranspose: structure and the same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from catalogue_checks import applied, assert_same_values, make_model, op_types
from onnx import helper

from onnxsat.surgery.surgeons.matmul import (
    EinsumToMatMul,
    GemmToMatMulAdd,
    MatMulAddToGemm,
    MatMulToTransposeConvTranspose,
)

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


@pytest.mark.parametrize(
    "attrs", [{}, {"transB": 1}, {"transA": 1, "transB": 1}, {"alpha": 0.5, "beta": 2.0, "transB": 1}]
)
def test_gemm_becomes_matmul_and_add(attrs: dict) -> None:
    a_shape = [6, 3] if attrs.get("transA") else [3, 6]
    weight = W.T.copy() if attrs.get("transB") else W
    model = make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", **attrs)],
        {"x": a_shape},
        {"y": None},
        {"w": weight, "b": B},
    )
    result = applied(GemmToMatMulAdd(), model).model
    assert [n.name for n in result.graph.node if n.op_type in ("MatMul", "Add")] == ["fc_MatMul", "fc_Add"]
    assert "Gemm" not in op_types(result) and result.graph.node[-1].output[0] == "y"
    weights = {t.name for t in result.graph.initializer}
    assert ("w" in weights) == (
        not attrs.get("transB") and attrs.get("alpha", 1.0) == 1.0
    )  # a remade weight replaces it
    assert_same_values(model, result, atol=1e-5)


def test_a_gemm_weight_another_node_reads_is_kept() -> None:
    model = make_model(
        [
            helper.make_node("Gemm", ["x", "w"], ["y"], transB=1),
            helper.make_node("MatMul", ["x", "w"], ["z"]),
        ],
        {"x": [5, 5]},
        {"y": None, "z": None},
        {"w": RNG.normal(size=(5, 5)).astype(np.float32)},
    )
    result = applied(GemmToMatMulAdd(), model).model
    assert op_types(result) == ["MatMul", "MatMul"] and "w" in {t.name for t in result.graph.initializer}
    assert_same_values(model, result, atol=1e-5)


def test_gemms_sharing_a_weight_share_its_remade_copy() -> None:
    """An unrolled LSTM reads one input weight from a Gemm (transB) per time step: each made its own
    transposed copy, and weight-only quantization stored each in 4 bits (a captcha reader 19 -> 48 MB)."""
    steps = [helper.make_node("Gemm", [f"x{i}", "w"], [f"y{i}"], transB=1, name=f"step{i}") for i in range(3)]
    model = make_model(steps, {f"x{i}": [2, 6] for i in range(3)}, {f"y{i}": None for i in range(3)}, {"w": W.T.copy()})
    result = applied(GemmToMatMulAdd(), model).model
    assert len({node.input[1] for node in result.graph.node}) == 1 and len(result.graph.initializer) == 1
    assert_same_values(model, result, atol=1e-5)


def test_a_gemm_weight_a_feed_may_replace_is_not_remade() -> None:
    """A transposed weight that is also a graph input (IR < 4 lists every initializer so) would become a copy no
    feed reaches: that Gemm stays."""
    model = make_model(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], {"x": [3, 6]}, {"y": None}, {"w": W.T.copy()}
    )
    model.graph.input.append(helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [5, 6]))
    assert not GemmToMatMulAdd().apply(model).changed


def test_a_gemm_on_a_computed_weight_is_left_alone() -> None:
    model = make_model([helper.make_node("Gemm", ["x", "v"], ["y"])], {"x": [3, 6], "v": [6, 5]}, {"y": None})
    outcome = GemmToMatMulAdd().apply(model)
    assert not outcome.changed and outcome.notice.endswith("nothing to split")


@pytest.mark.parametrize(
    ("equation", "x_shape", "w_shape", "ops"),
    [
        ("abc,cde->abde", [2, 5, 6], [6, 3, 4], ["MatMul", "Reshape"]),  # Keras EinsumDense: Q/K/V
        ("abcd,cde->abe", [2, 5, 3, 4], [3, 4, 6], ["Reshape", "MatMul"]),  # and the output projection
        ("bij,jk->bik", [2, 5, 6], [6, 4], ["MatMul"]),
    ],
)
def test_einsum_that_is_a_matmul_becomes_one(equation: str, x_shape: list, w_shape: list, ops: list) -> None:
    weight = RNG.normal(size=w_shape).astype(np.float32)
    model = make_model(
        [helper.make_node("Einsum", ["x", "w"], ["y"], equation=equation)], {"x": x_shape}, {"y": None}, {"w": weight}
    )
    result = applied(EinsumToMatMul(), model).model
    assert op_types(result) == ops and "w" not in {t.name for t in result.graph.initializer}
    assert_same_values(model, result, atol=1e-5)


@pytest.mark.parametrize("equation", ["abc,dc->abd", "abc,cd->adb", "abc,cc->ab", "abc,cbd->ad"])
def test_einsum_that_is_no_plain_matmul_is_left_alone(equation: str) -> None:
    """The weight's contracted letters last, the output reordered, a trace, two contracted in another order."""
    shapes = {"abc,dc->abd": [4, 6], "abc,cd->adb": [6, 4], "abc,cc->ab": [6, 6], "abc,cbd->ad": [6, 5, 4]}
    model = make_model(
        [helper.make_node("Einsum", ["x", "w"], ["y"], equation=equation)],
        {"x": [2, 5, 6]},
        {"y": None},
        {"w": RNG.normal(size=shapes[equation]).astype(np.float32)},
    )
    assert not EinsumToMatMul().apply(model).changed


def test_optimize_writes_einsum_projections_as_matmuls() -> None:
    """Keras' jax backend exports every attention projection as an Einsum: no pass knew them (nothing quantized,
    pruned or sparsified there). The optimizer writes them as MatMuls, checked against the original."""
    from onnxsat.eqsat.optimizer import optimize_model

    weight = RNG.normal(size=(6, 3, 4)).astype(np.float32)
    model = make_model(
        [helper.make_node("Einsum", ["x", "w"], ["y"], equation="abc,cde->abde")],
        {"x": [2, 5, 6]},
        {"y": None},
        {"w": weight},
    )
    result, report = optimize_model(model)
    assert "Einsum" not in op_types(result) and report.fusions["Einsum -> MatMul"] == 1
    assert report.verification is not None and report.verification.ok


def test_an_einsum_weight_in_a_data_file_is_not_read() -> None:
    """A large model's weights stay in their data file while it is optimized: the surgeon reads none of them."""
    from onnx.external_data_helper import set_external_data

    model = make_model(
        [helper.make_node("Einsum", ["x", "w"], ["y"], equation="abc,cde->abde")],
        {"x": [2, 5, 6]},
        {"y": None},
        {"w": RNG.normal(size=(6, 3, 4)).astype(np.float32)},
    )
    weight = model.graph.initializer[0]
    set_external_data(weight, "weights.bin", offset=0, length=weight.ByteSize())
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    assert not EinsumToMatMul().apply(model).changed


def test_an_einsum_weight_a_body_reads_is_kept() -> None:
    """The replaced weight goes only where nothing reads it any more: an If body reading it by name keeps it."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["b_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("b_out", onnx.TensorProto.FLOAT, [6, 4])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Einsum", ["x", "w"], ["y"], equation="bij,jk->bik"),
            helper.make_node("If", ["flag"], ["z"], then_branch=body, else_branch=body),
        ],
        "einsum_and_body",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5, 6]),
            helper.make_tensor_value_info("flag", onnx.TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5, 4]),
            helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [6, 4]),
        ],
        [onnx.numpy_helper.from_array(RNG.normal(size=(6, 4)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result = applied(EinsumToMatMul(), model).model
    assert "w" in {t.name for t in result.graph.initializer} and op_types(result) == ["MatMul", "If"]
    onnx.checker.check_model(result, full_check=True)


def test_gemms_inside_if_branches_are_split_too() -> None:
    """A merged KV-cache decoder holds every Linear (HF's Conv1D: a plain Gemm) in its two branches, reading
    weights of the main graph: 4-bit quantization, which takes MatMuls, quantized none of them."""
    from onnxsat.proto_fields import all_nodes

    def branch(name: str, attrs: dict) -> onnx.GraphProto:
        weight = "wt" if attrs.get("transB") else "w"
        gemm = helper.make_node("Gemm", ["x", weight, "b"], [f"{name}_y"], name="fc", **attrs)
        out = helper.make_tensor_value_info(f"{name}_y", onnx.TensorProto.FLOAT, None)
        return helper.make_graph([gemm], name, [], [out])

    plain, transposed = branch("then", {}), branch("else", {"transB": 1})
    model = make_model(
        [helper.make_node("If", ["cond"], ["y"], then_branch=plain, else_branch=transposed)],
        {"x": [3, 6]},
        {"y": [3, W.shape[1]]},
        {"w": W, "wt": W.T.copy(), "b": B, "cond": np.array(True)},
    )
    result = applied(GemmToMatMulAdd(), model).model
    ops = {
        graph.name: [n.op_type for n in graph.node]
        for n in result.graph.node
        for graph in (n.attribute[0].g, n.attribute[1].g)
    }
    assert ops == {"then": ["MatMul", "Add"], "else": ["Gemm"]}  # a transposed weight would need a copy: left
    assert [n.name for n in all_nodes(result.graph) if n.op_type == "MatMul"] == ["fc_MatMul"]
    assert_same_values(model, result, atol=1e-5)
