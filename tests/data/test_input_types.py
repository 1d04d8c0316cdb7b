"""Data meets the model input's element type: float16 exports get float16 samples, a uint8 input (an
export that does its own preprocessing) gets pixels back as 0-255, and what cannot be cast faithfully is
one clear line. Before, images in [0, 1] cast to uint8 became 0s and 1s, and quantize scored that garbage
as 10% top-1 "inside the budget"; a float16 model stopped prune with an ONNX Runtime type error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxsat.cli import main
from onnxsat.data.model_input import in_input_type
from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import DataError
from onnxsat.zoo.digits_cnn import bundled_digits_cnn


def uint8_digits_cnn(path: Path) -> Path:
    """The bundled digits CNN behind Cast(uint8 -> float) and a division by 255: pixels in, as many
    exports take them."""
    model = onnx.load(bundled_digits_cnn())
    graph = model.graph
    for node in graph.node:
        node.input[:] = ["scaled" if name == "input" else name for name in node.input]
    prefix = [
        helper.make_node("Cast", ["input"], ["as_float"], "to_float", to=TensorProto.FLOAT),
        helper.make_node("Div", ["as_float", "max_pixel"], ["scaled"], "scale"),
    ]
    graph.initializer.append(onnx.numpy_helper.from_array(np.array(255.0, np.float32), "max_pixel"))
    nodes = [*prefix, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def float16_digits_cnn(path: Path) -> Path:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(bundled_digits_cnn()), keep_io_types=False), path)
    return path


def value(elem_type: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", elem_type, ["N", 4])


def test_samples_take_the_input_element_type() -> None:
    pixels = Dataset(np.array([[0.0, 0.5, 1.0, 0.2]], np.float32), None, "images", pixels=True)
    assert in_input_type(value(TensorProto.FLOAT16), pixels).inputs.dtype == np.float16
    as_bytes = in_input_type(value(TensorProto.UINT8), pixels).inputs
    assert as_bytes.dtype == np.uint8 and as_bytes.tolist() == [[0, 128, 255, 51]]
    whole = Dataset(np.array([[1.0, 2.0, 3.0, 4.0]], np.float32), None, "ids")
    assert in_input_type(value(TensorProto.INT64), whole).inputs.tolist() == [[1, 2, 3, 4]]
    same = Dataset(np.zeros((1, 4), np.float32), None, "as is")
    assert in_input_type(value(TensorProto.FLOAT), same) is same


@pytest.mark.parametrize(
    ("inputs", "elem_type", "message"),
    [
        (np.array([[0.5, 1.5, 2.0, 3.0]], np.float32), TensorProto.UINT8, "takes uint8, but the data holds fractional"),
        (np.array([[-1, 0, 1, 300]], np.int64), TensorProto.UINT8, "values from -1 to 300 (outside 0-255)"),
        (np.array([[0.5, 0, 0, 0]], np.float32), TensorProto.INT64, "takes int64, but the data holds fractional"),
        (np.array([["a", "b", "c", "d"]]), TensorProto.FLOAT, "but the data holds <U1 values"),
        (np.zeros((1, 4), np.float32), TensorProto.STRING, "data can only be fed to number inputs"),
    ],
)
def test_what_would_change_in_the_cast_is_one_clear_error(inputs: np.ndarray, elem_type: int, message: str) -> None:
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        in_input_type(value(elem_type), Dataset(inputs, None, "data"))


def test_image_sources_say_they_hold_plain_pixels() -> None:
    """Only images without --mean/--std are pixels a uint8 input can take back; subsets keep the mark."""
    assert load_dataset("digits-test", [None, 1, 8, 8]).pixels
    assert load_dataset("digits", [None, 1, 8, 8], limit=10).subset(np.arange(3)).pixels
    assert not load_dataset("digits", [None, 1, 8, 8], limit=10, mean=[0.5], std=[0.2]).pixels


def report_of(tmp_path: Path, *argv: str) -> dict:
    report = tmp_path / "report.json"
    assert main([*argv, "--report", str(report)]) == 0
    return json.loads(report.read_text())


def test_a_uint8_model_is_scored_on_real_pixels(tmp_path: Path) -> None:
    """The uint8 model sees what the float model sees, so sparsify scores the same top-1 on digits."""
    model = uint8_digits_cnn(tmp_path / "u8.onnx")
    data = ["--data", "digits-test", "--max-drop", "1%"]
    as_float = report_of(tmp_path, "sparsify", str(bundled_digits_cnn()), "-o", str(tmp_path / "f.onnx"), *data)
    as_pixels = report_of(tmp_path, "sparsify", str(model), "-o", str(tmp_path / "s.onnx"), *data)
    assert as_pixels["baseline"]["value"] > 0.9
    assert as_pixels["baseline"]["value"] == pytest.approx(as_float["baseline"]["value"], abs=0.01)
    code = main(["prune", str(model), "-o", str(tmp_path / "p.onnx"), "--rate", "0.25", "--reconstruct", *data[:2]])
    assert code == 0


def test_a_float16_model_prunes_with_reconstruction_and_quantizes(tmp_path: Path) -> None:
    model = float16_digits_cnn(tmp_path / "f16.onnx")
    pruned = tmp_path / "p.onnx"
    assert main(["prune", str(model), "-o", str(pruned), "--rate", "0.25", "--reconstruct", "--data", "digits"]) == 0
    out = tmp_path / "q.onnx"
    # written even if int8 is slower here; no node timing: on a busy machine every node of this small net timed
    # slower or barely faster alone, so none was left to quantize (what is tested is the float16 handling)
    args = ["--data", "digits-test", "--mode", "static", "--force", "--no-node-timing"]
    report = report_of(tmp_path, "quantize", str(model), "-o", str(out), *args)
    assert report["baseline"]["value"] > 0.9 and report["verification"]["ok"]
    assert any("computes in float16" in note for note in report["notes"])
    written = onnx.load(out)
    assert [v.type.tensor_type.elem_type for v in [*written.graph.input, *written.graph.output]] == [
        TensorProto.FLOAT16
    ] * 2
    assert any(node.op_type == "QuantizeLinear" for node in written.graph.node)
    x = np.random.default_rng(0).random((2, 1, 8, 8)).astype(np.float16)
    (logits,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert logits.dtype == np.float16 and logits.shape == (2, 10)


@pytest.mark.parametrize("command", [["prune", "--rate", "0.3", "--reconstruct"], ["quantize"]])
def test_data_holding_nan_is_refused_in_one_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three NaN pixels in three samples: least-squares reconstruction spread them into every refitted weight
    and prune wrote a ruined model with exit 0; quantize blamed its quantizer ("scale issue")."""
    images = np.random.default_rng(0).random((40, 1, 8, 8)).astype(np.float32)
    images[[3, 9, 20], 0, 2, 2] = np.nan
    data = tmp_path / "nan.npz"
    np.savez(data, inputs=images, labels=np.arange(40) % 10)
    out = tmp_path / "out.onnx"
    code = main([command[0], str(bundled_digits_cnn()), "-o", str(out), *command[1:], "--data", str(data)])
    assert code == 12 and not out.exists()
    assert "3 of 40 samples hold NaN or infinite values" in capsys.readouterr().err
