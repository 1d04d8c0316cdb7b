"""Peephole optimization through onnxscript's optimizer and onnxoptimizer: it folds, and the result matches."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxsat.verification import verify
from runtime_models import conv_bn_relu

from onnxsat.errors import SettingsError
from onnxsat.model_io import load_model, model_folder
from onnxsat.report import op_counts
from onnxsat.runtime import peephole as peephole_module
from onnxsat.runtime.peephole import peephole


def bias_built_at_run_time() -> onnx.ModelProto:
    """A Conv whose bias is computed from constants at run time (an ``optimize=False`` export's habit).

    ``Identity`` and ``Add`` of two initializers: only constant folding turns them into one bias.
    """
    rng = np.random.default_rng(2)
    weights = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    half_a = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b1")
    half_b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b2")
    nodes = [
        helper.make_node("Identity", ["b1"], ["b1c"]),
        helper.make_node("Add", ["b1c", "b2"], ["b"]),
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bias_at_run_time",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [weights, half_a, half_b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_onnxscript_folds_the_constant_subgraph_and_matches() -> None:
    model = bias_built_at_run_time()
    optimized, notices = peephole(model)
    assert dict(op_counts(optimized)) == {"Conv": 1, "Relu": 1}
    assert verify(model, optimized).ok
    assert notices == ["onnxscript: 4 -> 2 nodes"]
    assert len(model.graph.node) == 4  # the caller's model is untouched


@pytest.mark.skipif(importlib.util.find_spec("onnxoptimizer") is None, reason="onnxoptimizer is optional (bench)")
def test_onnxoptimizer_fuses_batch_norm_and_onnxscript_folds_what_it_left() -> None:
    """onnxoptimizer writes the folded weights as ops on the weights; onnxscript then folds those away."""
    model = conv_bn_relu()
    fused, notices = peephole(model, "onnxoptimizer")
    assert "BatchNormalization" not in op_counts(fused)
    assert verify(model, fused, {"x": [1, 3, 8, 8]}).ok
    late = len(fused.graph.node) - 2
    assert notices[1].startswith(f"{late} nodes compute only from weights")
    folded, notices = peephole(fused)
    assert dict(op_counts(folded)) == {"Conv": 1, "Relu": 1}
    assert verify(model, folded, {"x": [1, 3, 8, 8]}).ok
    assert len(notices) == 1


def test_weights_listed_as_graph_inputs_get_a_notice() -> None:
    model = conv_bn_relu()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 3, 3, 3]))
    _, notices = peephole(model)
    assert notices[-1].startswith("weights still listed as graph inputs (1: w): ONNX Runtime treats them")


def test_weights_in_external_data_are_read_from_base_dir(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(bias_built_at_run_time(), str(path), save_as_external_data=True, size_threshold=0)
    model = load_model(path)
    optimized, _ = peephole(model, base_dir=model_folder(path))
    assert verify(bias_built_at_run_time(), optimized).ok
    with pytest.raises(SettingsError, match="external data: give base_dir"):
        peephole(model)


def test_unknown_tool_is_a_settings_error() -> None:
    with pytest.raises(
        SettingsError, match="unknown peephole tool 'onnxsim'; choose one of: onnxscript, onnxoptimizer"
    ):
        peephole(bias_built_at_run_time(), "onnxsim")


def test_a_missing_package_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(peephole_module._MODULES, "onnxoptimizer", "onnxsat_no_such_module")
    with pytest.raises(SettingsError, match=r"onnxoptimizer peephole optimizer is not installed .*onnxsat\[bench\]"):
        peephole(bias_built_at_run_time(), "onnxoptimizer")
