"""``optimize --specialize``: the sizes given become fixed dims of the inputs, and the outputs' dims they decide
become fixed too, while a size the data decides stays symbolic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.specialize import declare_fixed_outputs


def two_output_model(path: Path) -> Path:
    """x[N,T,4] -> MatMul -> y[N,T,5], and the positions of x's positive values, nz[3,count]: the count is
    the data's, whatever the sizes."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), "w")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            helper.make_node("Greater", ["x", "zero"], ["positive"]),
            helper.make_node("NonZero", ["positive"], ["nz"]),
        ],
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", 5]),
            helper.make_tensor_value_info("nz", TensorProto.INT64, [3, "count"]),
        ],
        [weight, zero],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def _run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_specialize_declares_the_output_dims_the_fixed_sizes_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = two_output_model(tmp_path / "m.onnx"), tmp_path / "s.onnx"
    assert main(["optimize", str(source), "-o", str(out), "--input-shape", "x:2,6,4", "--specialize"]) == 0
    assert "output 'y' declared [2,6,5] (was [N,T,5])" in capsys.readouterr().out
    result = onnx.load(out)
    assert _dims(result.graph.input[0]) == [2, 6, 4]
    assert {o.name: _dims(o) for o in result.graph.output} == {"y": [2, 6, 5], "nz": [3, "count"]}
    x = np.random.default_rng(1).standard_normal((2, 6, 4)).astype(np.float32)
    for got, want in zip(_run(out, x), _run(source, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_only_dynamic_dims_inference_fixes_are_declared() -> None:
    """A declared size is never changed, a rank that disagrees is left alone, and no inference changes nothing."""
    declared = helper.make_graph(
        [],
        "g",
        [],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 7]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N"]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
        ],
    )
    inferred = helper.make_graph(
        [],
        "g",
        [],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 9]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [4, 5]),
        ],
    )
    model, typed = helper.make_model(declared), helper.make_model(inferred)
    assert declare_fixed_outputs(model, None) == []
    notes = declare_fixed_outputs(model, typed)
    assert [_dims(o) for o in model.graph.output] == [[2, 7], ["N"], [4, 5]]
    assert notes == [
        "output 'a' declared [2,7] (was [N,7]): the fixed inputs decide its size",
        "output 'c' declared [4,5] (was []): the fixed inputs decide its size",
    ]
