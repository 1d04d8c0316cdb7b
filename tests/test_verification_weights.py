"""Verification runs hold a large in-memory weight once: ORT takes it in place, the checker sees a stand-in."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat import verification
from onnxsat.errors import InvalidModelError
from onnxsat.external_data import STUB_BYTES, structure_view
from onnxsat.model_io import check_model


def _model(rows: int = 512) -> onnx.ModelProto:
    """y = x @ W + b with W of rows x 1024 float32 (2 MiB at 512 rows) and a small b."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((rows, 1024)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1024])],
        [weight, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_lean_session_takes_large_weights_in_place_with_equal_outputs() -> None:
    model = _model()
    light, shared = verification._large_weights_shared(model)
    assert set(shared) == {"w"}  # the 4 KiB bias stays in the serialized model
    stub = next(t for t in light.graph.initializer if t.name == "w")
    assert stub.data_location == TensorProto.EXTERNAL and not stub.raw_data
    assert light.ByteSize() < 64 * 1024 < model.ByteSize()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 512)).astype(np.float32)}
    lean = verification.session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, lean=True)
    whole = verification.session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    # the whole session prepacks the weight for another GEMM kernel: equal up to float32 summation order
    np.testing.assert_allclose(lean.run(None, feeds)[0], whole.run(None, feeds)[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(verification.run_model(model, feeds, "model")[0], lean.run(None, feeds)[0])


def test_checker_view_stubs_large_weights_and_still_checks_structure() -> None:
    model = _model()
    view = structure_view(model)
    sizes = {t.name: len(t.raw_data) for t in view.graph.initializer}
    assert sizes["w"] == 0 and sizes["b"] == 4096 and STUB_BYTES > 4096
    check_model(model)
    broken = _model()
    broken.graph.node[1].input[0] = "nowhere"
    with pytest.raises(InvalidModelError):
        check_model(broken)
