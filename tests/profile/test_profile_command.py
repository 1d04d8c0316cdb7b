"""``onnxsat profile``: tables, JSON, the side-by-side comparison and bad input, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from profile_models import conv_relu

from onnxsat.cli import main
from onnxsat.zoo.digits_cnn import bundled_digits_cnn


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """Conv + Relu, and the same as one FusedConv."""
    original, fused = tmp_path / "original.onnx", tmp_path / "fused.onnx"
    onnx.save(conv_relu(), str(original))
    onnx.save(conv_relu(fused=True), str(fused))
    return original, fused


def test_json_schema(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", str(pair[0]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["total"] == {"macs": 23_200, "params": 224, "memory_bytes": 4 * (224 + 1600)}
    assert [layer["name"] for layer in result["layers"]] == ["conv", "relu"]
    conv = result["layers"][0]
    assert conv == {
        "name": "conv",
        "op_type": "Conv",
        "macs": 22_400,
        "params": 224,
        "memory_bytes": 4 * (224 + 800),
        "weight_bytes": 4 * 224,
        "output_bytes": 4 * 800,
        "output_shapes": [[1, 8, 10, 10]],
    }
    assert result["op_counts"] == {"Conv": 1, "Relu": 1} and result["input_shapes"] == {"x": [1, 3, 10, 10]}


def test_compare_json_is_the_seed_table_one(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", str(pair[0]), "--compare", str(pair[1]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    first, second = result["models"]
    assert (first["model"], second["model"]) == (str(pair[0]), str(pair[1]))
    assert second["total"] == {"macs": 22_400, "params": 224, "memory_bytes": 4 * (224 + 800)}
    comparison = result["comparison"]
    assert comparison["fused_percent"] == pytest.approx(50.0)  # 1 of the original's 2 nodes is gone
    assert comparison["macs_reduction_percent"] == pytest.approx(100 * 800 / 23_200)
    assert comparison["params_reduction_percent"] == 0.0
    assert comparison["memory_bytes_reduction_percent"] == pytest.approx(100 * 800 / (224 + 1600))


def test_compare_table(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", str(pair[0]), "--compare", str(pair[1])]) == 0
    out = capsys.readouterr().out
    assert "50.00% fused" in out and "3.45% less" in out and "43.86% less" in out
    assert "Relu 1 -> 0" in out and "com.microsoft.FusedConv 0 -> 1" in out


def test_table_of_the_digits_cnn_with_its_dynamic_batch_given(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(bundled_digits_cnn())
    assert main(["profile", model, "--input-shape", "input:1,1,8,8", "--layers", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{model}: inputs input [1,1,8,8]")
    rows = [line.split()[0] for line in lines[2:5]]
    assert rows == ["conv2", "fc1", "..."]  # the two heaviest layers, in graph order
    assert lines[-2].split()[:3] == ["total", "9", "nodes"] and lines[-2].split()[-3:] == [
        "345,866",
        "38,282",
        "182,352",
    ]
    assert lines[-1] == "op types: Relu 3, Conv 2, Gemm 2, Flatten 1, MaxPool 1"


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [(None, 3, "not found"), (b"not a model at all", 4, "not a readable ONNX model")],
)
def test_bad_files(
    content: bytes | None, code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    assert main(["profile", str(path)]) == code
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_dynamic_batch_alone_is_one_and_other_dynamic_dims_are_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nearly every export has a dynamic batch and nothing else dynamic: per-sample figures at batch 1,
    said on a line of their own. A dynamic image size changes the figures too much to guess."""
    assert main(["profile", str(bundled_digits_cnn())]) == 0
    out = capsys.readouterr().out
    assert out.startswith("batch 1 for input (dynamic batch dim; --input-shape sets another)\n")
    assert "inputs input [1,1,8,8]" in out
    assert main(["profile", str(bundled_digits_cnn()), "--input-shape", "input:4,1,8,8"]) == 0
    assert "inputs input [4,1,8,8]" in capsys.readouterr().out
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["image"], ["y"])],
        "sized",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "sized.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    assert main(["profile", str(path)]) == 9
    err = capsys.readouterr().err
    assert "cannot be inferred without the input shapes" in err and "--input-shape image:1,3,1,1" in err


def test_bad_options(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", str(pair[0]), "--layers", "-1"]) == 9
    assert main(["profile", str(pair[0]), "--input-shape", "nope:1,2"]) == 9
    err = capsys.readouterr().err
    assert "--layers must be 0 or more" in err and "inputs the model does not have: nope (inputs: x)" in err


def test_weights_in_a_data_file_are_counted_at_their_real_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch's dynamo exporter writes its weights to a data file: inference must see their dims (not
    empty stand-ins), whatever the folder it runs from."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "flat"),
        numpy_helper.from_array(rng.standard_normal((8 * 8 * 8, 10)).astype(np.float32), "fc"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Reshape", ["c", "flat"], ["f"], name="flatten"),
            helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
        ],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, folder / "whole.onnx")
    onnx.save(model, folder / "apart.onnx", save_as_external_data=True, size_threshold=64, location="apart.data")
    monkeypatch.chdir(tmp_path)
    totals = []
    for name in ("whole", "apart"):
        assert main(["profile", str(folder / f"{name}.onnx"), "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        totals.append(result["total"])
        assert [layer["output_shapes"] for layer in result["layers"]] == [[[1, 8, 8, 8]], [[1, 512]], [[1, 10]]]
    assert totals[0] == totals[1] and totals[0]["macs"] == 8 * 27 * 64 + 512 * 10
    assert main(["prune", str(folder / "apart.onnx"), "-o", str(tmp_path / "p.onnx"), "--rate", "0.5"]) == 0
    assert f"MACs: {totals[0]['macs']:,} ->" in capsys.readouterr().out


def test_compare_says_what_grew_and_does_not_compare_macs_it_cannot_count(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model that grew read "-100.00% fused"; and MACs compared with an op of no MAC rule (counted 0) made
    ORT's fused BERT look 34% cheaper than the export it came from."""
    assert main(["profile", str(pair[1]), "--compare", str(pair[0])]) == 0
    assert "100.00% more" in capsys.readouterr().out
    model = conv_relu()
    relu = next(node for node in model.graph.node if node.op_type == "Relu")
    relu.op_type, relu.domain = "QuickGelu", "com.microsoft"
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    contrib = tmp_path / "contrib.onnx"
    onnx.save(model, str(contrib))
    assert main(["profile", str(contrib), "--compare", str(pair[0])]) == 0
    assert "not comparable: no MAC rule for com.microsoft.QuickGelu" in capsys.readouterr().out
    assert main(["profile", str(contrib), "--compare", str(pair[0]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["comparison"]["macs_reduction_percent"] is None
