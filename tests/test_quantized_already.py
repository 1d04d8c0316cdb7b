"""A model quantized before it came here (QDQ: integer weights behind DequantizeLinear, as ORT's default form
and TFLite int8 conversions write it) is refused by quantize, sparsify and prune with that reason, not only
"no Conv with a constant weight"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.quantized_already import quantized_parts


def qdq_conv(path: Path) -> Path:
    rng = np.random.default_rng(0)
    weight = rng.integers(-100, 100, size=(4, 3, 3, 3)).astype(np.int8)
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"]),
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
        ],
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            numpy_helper.from_array(weight, "w_q"),
            numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
            numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)
    return path


def test_quantized_parts_name_integer_weights_and_integer_ops(tmp_path: Path) -> None:
    model = onnx.load(qdq_conv(tmp_path / "q.onnx"))
    assert quantized_parts(model) == "1 DequantizeLinear of integer weights"
    model.graph.node.append(helper.make_node("QLinearConv", ["a"] * 8, ["b"]))
    assert quantized_parts(model) == "1 DequantizeLinear of integer weights, 1 QLinearConv"
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w_q"))
    del model.graph.node[-1]
    assert quantized_parts(model) == ""  # a float weight behind DequantizeLinear is no integer weight
    f8 = helper.make_tensor("w_q", TensorProto.FLOAT8E4M3FN, [4, 3, 3, 3], np.zeros(108).tolist())
    model.graph.initializer[0].CopyFrom(f8)  # a float8 weight: a quantizer made it
    assert quantized_parts(model) == "1 DequantizeLinear of float8 or float4 weights"


@pytest.mark.parametrize(
    ("command", "verb"),
    [
        (["quantize"], "quantize"),
        (["sparsify", "--sparsity", "0.3"], "sparsify"),
        (["prune", "--rate", "0.3"], "prune"),
    ],
)
def test_commands_say_the_model_is_quantized_already(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], command: list[str], verb: str
) -> None:
    model = qdq_conv(tmp_path / "q.onnx")
    out = tmp_path / "out.onnx"
    code = main([command[0], str(model), "-o", str(out), *command[1:]])
    err = capfd.readouterr().err
    assert code != 0 and not out.exists()
    assert f"it is quantized already (1 DequantizeLinear of integer weights): {verb} its float original instead" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_sparsify_says_when_its_sparsity_is_over_the_float_weights_of_a_model_quantized_in_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A face detector shipped int8 but for 9 small float head weights: `--sparsity 0.5` reached "48% over 9
    weights" and said nothing of the 64 int8 ones it left alone."""
    model = onnx.load(qdq_conv(tmp_path / "q.onnx"))
    rng = np.random.default_rng(1)
    model.graph.initializer.append(numpy_helper.from_array(rng.normal(size=(4, 4, 3, 3)).astype(np.float32), "head"))
    model.graph.node.append(helper.make_node("Conv", ["y", "head"], ["z"], pads=[1, 1, 1, 1]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8]))
    onnx.save(model, tmp_path / "part.onnx")
    assert main(["sparsify", str(tmp_path / "part.onnx"), "-o", str(tmp_path / "s.onnx"), "--sparsity", "0.5"]) == 0
    assert (
        "note: it is quantized already in part (1 DequantizeLinear of integer weights): those weights are left as "
        "they are, and the sparsity is over the 1 float weight only"
    ) in capsys.readouterr().out


def test_static_quantization_leaves_the_nodes_in_qdq_form_alone(tmp_path: Path) -> None:
    """A CNN ORT quantized in QDQ form but for its last layer, a common hand-over. Static quantization
    quantized its Convs a second time, under the tensor names the first pass gave: a model the checker
    refuses (duplicate output names). Only the float layer is quantized now."""
    from onnxsat.quantization.modes import Calibration, static
    from onnxsat.quantized_already import quantized_nodes
    from onnxsat.zoo.digits_cnn import bundled_digits_cnn
    from tests.ort_quantized import DigitsReader, statically_quantized_digits_cnn

    model = onnx.load(bundled_digits_cnn())
    last = [n.name for n in model.graph.node if n.op_type in ("Gemm", "MatMul")][-1]
    partial = statically_quantized_digits_cnn(tmp_path / "partial.onnx", exclude=[last])
    given = onnx.load(partial)
    already = quantized_nodes(given.graph)
    assert {"conv1", "conv2", "fc1"} <= already and last not in already
    result = static(given, [], Calibration(DigitsReader, "minmax", tmp_path / "ranges.json"))
    onnx.checker.check_model(result, full_check=True)
    outputs = [name for node in result.graph.node for name in node.output]
    assert len(outputs) == len(set(outputs))
    weights = {node.input[1] for node in result.graph.node if node.name == last}
    assert any(node.op_type == "DequantizeLinear" and node.output[0] in weights for node in result.graph.node)
