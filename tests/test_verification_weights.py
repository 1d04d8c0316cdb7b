"""Verification runs hold a large in-memory weight once: ORT takes it in place, the checker sees a stand-in."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf.message import EncodeError
from onnx import TensorProto, helper, numpy_helper

from onnxsat import verification
from onnxsat.eqsat.optimizer import optimize_model
from onnxsat.errors import InvalidModelError
from onnxsat.external_data import STUB_BYTES, structure_view
from onnxsat.model_io import check_model, over_protobuf_limit


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
    light, shared = verification.weights_apart(model)
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


def test_weights_apart_and_back_give_the_same_model() -> None:
    model = _model()
    model.graph.initializer[0].doc_string = "kept with its weight"
    light, weights = verification.weights_apart(model)
    assert set(weights) == {"w"} and light.ByteSize() < 64 * 1024
    assert verification.weights_back(light, weights).SerializeToString() == model.SerializeToString()
    small = _model(rows=8)  # nothing large: one model, not copied
    assert verification.weights_apart(small) == (small, {}) and verification.weights_back(small, {}) is small


def _anonymous_mib() -> int | None:
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) // 1024 for line in status if line.startswith("RssAnon"))
    except (OSError, StopIteration):
        return None


def test_lean_run_feeds_large_weights_as_inputs_that_ort_reads_in_place() -> None:
    if _anonymous_mib() is None:
        pytest.skip("needs /proc/self/status")
    model = _model(rows=16384)  # a 64 MiB weight
    light, weights = verification.weights_apart(model)
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before = _anonymous_mib()
    fed = verification.session(light, level, lean=True, weights_as_inputs=True, weights=weights)
    grown = _anonymous_mib() - before
    assert grown < 16, f"the session copied the fed weight ({grown} MiB)"
    assert "w" in {value.name for value in fed.get_inputs()} and fed._onnxsat_fed["w"] is weights["w"]
    assert not light.graph.input[1:]  # the caller's half is left as it was
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 16384)).astype(np.float32)}
    given = verification.session(light, level, lean=True, weights=weights)  # as initializers
    assert given._onnxsat_fed == {} and "w" not in {value.name for value in given.get_inputs()}
    want = given.run(None, feeds)[0]
    np.testing.assert_array_equal(fed.run(None, {**feeds, **fed._onnxsat_fed})[0], want)
    np.testing.assert_array_equal(verification.run_model(light, feeds, "model", weights=weights)[0], want)
    before = model.SerializeToString()
    np.testing.assert_array_equal(verification.run_model(model, feeds, "model")[0], want)
    assert model.SerializeToString() == before  # its own stand-in copy became inputs, not the model


def test_lean_run_gives_the_weights_as_initializers_when_a_kernel_refuses_them_as_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 512)).astype(np.float32)}
    want = verification.run_model(model, feeds, "model")[0]

    def refuse(light: onnx.ModelProto, shared: object) -> onnx.ModelProto:
        raise RuntimeError("this kernel needs a constant weight")

    monkeypatch.setattr(verification, "_weights_as_inputs", refuse)
    np.testing.assert_array_equal(verification.run_model(model, feeds, "model")[0], want)


def test_optimize_verifies_a_folded_large_weight_apart_and_returns_it_whole() -> None:
    """Transpose(W) folds into a new 2 MiB weight: verified as a fed array, then back in the result."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((1024, 512)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1024])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    optimized, report = optimize_model(model)
    assert report.verification.ok
    assert [n.op_type for n in optimized.graph.node] == ["MatMul"]
    (folded,) = optimized.graph.initializer
    assert not folded.HasField("data_location") and not folded.external_data
    np.testing.assert_array_equal(numpy_helper.to_array(folded), weight.T)


class _Unsizable:
    """Stands for a model over 2 GiB: protobuf's upb refuses even to size it."""

    def ByteSize(self) -> int:
        raise EncodeError("Failed to serialize proto")


def test_a_model_protobuf_cannot_size_is_over_the_limit() -> None:
    assert over_protobuf_limit(_Unsizable())  # type: ignore[arg-type]
    assert not over_protobuf_limit(_model())


def test_a_session_of_a_model_over_2gb_takes_its_weights_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any session (not only a lean one) of a model too large to serialize hands ORT its large weights apart;
    serialized whole, it failed with protobuf's EncodeError (quantize scores a 2.4 GB MLP so)."""
    model = _model()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 512)).astype(np.float32)}
    expected = verification.run_model(model, feeds, "model")[0]
    monkeypatch.setattr(verification, "over_protobuf_limit", lambda _: True)
    sess = verification.session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    assert set(sess._onnxsat_shared) == {"w"}
    np.testing.assert_allclose(sess.run(None, feeds)[0], expected, rtol=1e-5, atol=1e-4)


def test_a_session_of_a_heavy_model_takes_its_weights_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """From HEAVY_MODEL_BYTES on, a timing or scoring session (not lean) gets the weights apart too: serialized
    whole, session creation held the model's bytes twice more for a moment (quantize of a 1.07 GB MLP peaked
    at 8.1 GB; 6.5 GB with this and the other copies avoided)."""
    model = _model()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 512)).astype(np.float32)}
    expected = verification.run_model(model, feeds, "model")[0]
    assert not verification.session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)._onnxsat_shared
    monkeypatch.setattr(verification, "HEAVY_MODEL_BYTES", 2**20)
    sess = verification.session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    assert set(sess._onnxsat_shared) == {"w"}
    np.testing.assert_allclose(sess.run(None, feeds)[0], expected, rtol=1e-5, atol=1e-4)


def test_shape_inference_for_rule_conditions_holds_no_weight() -> None:
    """The optimizer infers value types on the structure alone (the weight as an input of its type and dims):
    inferring on the whole model serialized, parsed and held it again (1.1 GB more on a 1.07 GB MLP)."""
    from onnxsat.eqsat.optimizer import _shape_inferred

    typed = _shape_inferred(_model())
    assert typed is not None and typed.ByteSize() < 64 * 1024
    types = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*typed.graph.input, *typed.graph.value_info]
    }
    assert types["w"] == [512, 1024] and types["h"] == [2, 1024]
