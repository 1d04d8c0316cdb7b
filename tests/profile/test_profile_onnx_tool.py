"""Totals against onnx-tool's on models tests build and on onnx's bundled architectures.

MACs agree exactly but for ConvTranspose, which onnx-tool counts with Conv's formula on its output (checked
as the exact amount below). The other documented differences (see ``onnxsat.profile.counting``)
are checked as exact amounts, not tolerated as noise: ONNXSat counts initializers no node reads as
parameters, gives a 0-d (scalar) tensor one element where onnx-tool gives it none, and sizes an
opset < 10 Dropout mask as its input's type (float32, the spec) where onnx-tool assumes bool (1 byte).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from onnxsat.profile.counting import profile_model
from onnxsat.zoo.bundled import bundled_models
from onnxsat.zoo.digits_cnn import bundled_digits_cnn
from onnxsat.zoo.synthetic import demo_cnn, simple_classifier

onnx_tool = pytest.importorskip("onnx_tool")

LIGHT = ["bvlc_alexnet", "inception_v1", "resnet50", "shufflenet", "squeezenet", "zfnet512"]


def onnx_tool_totals(model: onnx.ModelProto, inputs: dict[str, np.ndarray] | None = None) -> tuple[int, int, int]:
    """onnx-tool's (MACs, params, memory bytes) as its ``Graph.profile`` counts them over every node."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = onnx_tool.Model(model).graph
        graph.graph_reorder_nodes()
        graph.shape_infer(inputs)
        graph.profile()
    return round(graph.macs[0]), int(graph.params), int(graph.memory)


def unread_parameters(model: onnx.ModelProto) -> int:
    read = {name for node in model.graph.node for name in node.input}
    return sum(math.prod(t.dims) for t in model.graph.initializer if t.name not in read)


def scalar_initializers(model: onnx.ModelProto) -> tuple[int, int]:
    """(count, bytes) of the 0-d initializers: one element each here, none in onnx-tool."""
    scalars = [t for t in model.graph.initializer if not t.dims]
    return len(scalars), sum(onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize for t in scalars)


def dropout_mask_bytes_beyond_bool(model: onnx.ModelProto) -> int:
    """Opset < 10 Dropout masks are float32 (4 bytes an element) where onnx-tool counts 1."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset >= 10:
        return 0
    shapes = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    extra = 0
    for node in model.graph.node:
        if node.op_type == "Dropout" and len(node.output) > 1:
            dims = shapes[node.input[0]].type.tensor_type.shape.dim
            assert shapes[node.input[0]].type.tensor_type.elem_type == TensorProto.FLOAT
            extra += math.prod(d.dim_value for d in dims) * 3
    return extra


@pytest.mark.parametrize("name", ["simple_classifier", "demo_cnn", "digits_cnn"])
def test_models_tests_build_agree_exactly(name: str) -> None:
    if name == "digits_cnn":
        model, shapes = onnx.load(str(bundled_digits_cnn())), {"input": [1, 1, 8, 8]}
        inputs = {"input": np.zeros((1, 1, 8, 8), np.float32)}  # onnx-tool needs the dynamic batch fixed too
    else:
        model, shapes, inputs = (simple_classifier() if name == "simple_classifier" else demo_cnn()), None, None
    profile = profile_model(model, shapes)
    macs, params, memory = onnx_tool_totals(model, inputs)
    scalars, scalar_bytes = scalar_initializers(model)
    assert (profile.macs, profile.params, profile.memory_bytes) == (macs, params + scalars, memory + scalar_bytes)


@pytest.mark.parametrize("name", LIGHT)
def test_onnx_bundled_architectures(name: str) -> None:
    path = bundled_models().get(name)
    if path is None:
        pytest.skip("this onnx build ships without backend test data")
    model = onnx.load(str(path))
    macs, params, memory = onnx_tool_totals(model)
    profile = profile_model(model)
    assert profile.macs == macs
    assert profile.params == params + unread_parameters(model)
    assert profile.memory_bytes == memory + dropout_mask_bytes_beyond_bool(model)


def test_the_differences_do_occur_in_the_bundled_models() -> None:
    """So the documented differences are measured, not only allowed."""
    models = [onnx.load(str(p)) for n, p in bundled_models().items() if n in LIGHT]
    if not models:
        pytest.skip("this onnx build ships without backend test data")
    assert any(unread_parameters(m) for m in models) and any(dropout_mask_bytes_beyond_bool(m) for m in models)
    assert scalar_initializers(demo_cnn()) == (2, 8)  # Clip's bounds


def test_bundled_resnet50_needs_no_onnxruntime_run() -> None:
    """The bundled ResNet-50's profile needs no ONNX Runtime run (shape inference covers it)."""
    path = bundled_models().get("resnet50")
    if path is None:
        pytest.skip("this onnx build ships without backend test data")
    assert profile_model(onnx.load(str(path))).shape_method == "onnx shape inference"


def test_conv_transpose_counts_each_input_value_times_its_kernel_slice() -> None:
    """x [1, 8, 4, 4] through a stride-2 ConvTranspose with weight [8, 4, 3, 3] and a bias: 8*4*4 input values
    each multiplied by 4*3*3 weights, plus one add per output value (4*9*9); onnx-tool multiplies the output by
    the weight's dims after the first, as if the weight were [Cout, Cin, 3, 3]."""
    rng = np.random.default_rng(0)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2])],
        "deconv",
        [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 9, 9])],
        [
            onnx.numpy_helper.from_array(rng.normal(size=(8, 4, 3, 3)).astype(np.float32), "w"),
            onnx.numpy_helper.from_array(np.zeros(4, np.float32), "b"),
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    outputs = 4 * 9 * 9
    assert profile_model(model).macs == 8 * 4 * 4 * (4 * 3 * 3) + outputs
    macs, _, _ = onnx_tool_totals(model)
    assert macs == outputs * (4 * 3 * 3) + outputs
