"""Dynamic input dims however exporters write them: -1 (Paddle2ONNX, tf2onnx) is dynamic as ONNX Runtime takes
it, and a declared 0 is read as dynamic when the model is loaded (ONNX Runtime would hold it to size 0).
Verification, ``--input-shape`` and the profiler accept any size there; symbolic names survive."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.bench.compare import CompareSettings, compare_model
from onnxsat.cli import main
from onnxsat.errors import NothingPaysError, RuntimeUnsupportedError
from onnxsat.inputs import InputSpec, fixed_dim, random_inputs


def conv_model(path: Path, dims: list[int | str]) -> Path:
    """x[dims] -> Conv(3->4, 3x3, same padding) -> Relu -> y."""
    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 4, *dims[2:]])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def declared(path: Path) -> list[tuple[int, str]]:
    return [(d.dim_value, d.dim_param) for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]


def test_a_negative_dim_is_dynamic() -> None:
    dims = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 0, "h"]).type.tensor_type.shape.dim
    assert [fixed_dim(d) for d in dims] == [None, 3, 0, None]  # 0 is made dynamic by the normal form, not here


@pytest.mark.parametrize("shape", [[], ["--input-shape", "x:2,3,16,12"]])
def test_minus_one_dims_optimize_and_survive(tmp_path: Path, shape: list[str]) -> None:
    source = conv_model(tmp_path / "paddle.onnx", [-1, 3, -1, -1])
    output = tmp_path / "out.onnx"
    assert main(["optimize", str(source), "-o", str(output), *shape]) == 0
    assert declared(output) == declared(source) == [(-1, ""), (3, ""), (-1, ""), (-1, "")]


def test_minus_one_dims_sparsify_and_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = conv_model(tmp_path / "paddle.onnx", [-1, 3, -1, -1])
    assert main(["sparsify", str(source), "-o", str(tmp_path / "s.onnx"), "--sparsity", "0.5"]) == 0
    assert main(["profile", str(source), "--input-shape", "x:1,3,8,8"]) == 0
    assert "Conv" in capsys.readouterr().out
    assert main(["profile", str(source)]) != 0
    assert "--input-shape x:1,3,1,1" in capsys.readouterr().err


def test_fixed_dims_still_bind_the_given_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = conv_model(tmp_path / "fixed.onnx", [-1, 3, "h", 8])
    assert main(["optimize", str(source), "-o", str(tmp_path / "o.onnx"), "--input-shape", "x:1,4,5,8"]) == 9
    assert "does not fit the declared shape [?,3,h,8]" in capsys.readouterr().err
    assert random_inputs(onnx.load(str(source)))["x"].shape == (1, 3, 1, 8)


def test_zero_dims_are_dynamic_and_written_as_dynamic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, output = conv_model(tmp_path / "zero.onnx", [0, 3, 0, "w"]), tmp_path / "o.onnx"
    assert main(["optimize", str(source), "-o", str(output), "--input-shape", "x:2,3,5,8"]) == 0
    assert "normal form: dims declared 0 read as dynamic on x, y" in capsys.readouterr().out
    assert declared(output) == [(0, ""), (3, ""), (0, ""), (0, "w")]
    assert not onnx.load(str(output)).graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_value")
    assert main(["profile", str(source), "--input-shape", "x:1,3,4,4"]) == 0


def audio_model(path: Path) -> Path:
    """A clip [N, L] of dynamic length -> Conv1d (kernel 10, stride 5) -> Relu -> mean over time -> MatMul."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["clip", "one"], ["channels"]),
            helper.make_node("Conv", ["channels", "w"], ["c"], strides=[5]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("ReduceMean", ["r"], ["m"], axes=[2], keepdims=0),
            helper.make_node("MatMul", ["m", "fc"], ["logits"]),
        ],
        "audio",
        [helper.make_tensor_value_info("clip", TensorProto.FLOAT, ["N", "L"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
        [
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            numpy_helper.from_array(rng.normal(size=(16, 1, 10)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.normal(size=(16, 4)).astype(np.float32), "fc"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


@pytest.mark.parametrize(
    "command",
    [["sparsify", "--max-drop", "5%"], ["prune", "--rate", "0.25"], ["compress", "--techniques", "prune"]],
)
def test_a_dynamic_length_is_sized_by_the_data(tmp_path: Path, capfd: pytest.CaptureFixture[str], command) -> None:
    """The reference run took the clip's length as 1 (a Conv of kernel 10 cannot run on it) beside --data of
    400-sample clips; the data's sizes are used where the user gave none. prune's best-effort probe of ranks,
    which fails at length 1, printed ORT's coloured error line."""
    data = tmp_path / "clips.npz"
    np.savez(data, inputs=np.random.default_rng(1).normal(size=(24, 400)).astype(np.float32))
    out = tmp_path / "out.onnx"
    args = [command[0], str(audio_model(tmp_path / "a.onnx")), "-o", str(out), "--data", str(data), *command[1:]]
    code = main(
        [*args, "--metric", "cosine"] + (["--max-drop", "5%", "--budget-minutes", "1"] * (command[0] == "compress"))
    )
    err = capfd.readouterr().err
    assert "Invalid input shape" not in err and "dynamic dims were set to 1" not in err, err
    assert "onnxruntime" not in err, err
    assert code in (0, NothingPaysError.exit_code), err  # written, or nothing pays (one line); never the input refused


def skip_model(path: Path, reshape_to: int | None = None) -> Path:
    """x[batch, 2, h, w] -> Conv stride 2 -> Resize x2 -> Concat with x: an encoder-decoder's skip connection,
    which ONNX Runtime cannot run at 1 x 1 (the halved map upsamples to 2 x 2 beside the 1 x 1 input). With
    ``reshape_to``, the result is then reshaped to that many elements: no size runs."""
    weight = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["c", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Concat", ["up", "x"], ["y"], axis=1),
    ]
    initializers = [
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if reshape_to is not None:
        nodes.append(helper.make_node("Reshape", ["y", "shape"], ["z"]))
        initializers.append(numpy_helper.from_array(np.array([reshape_to], np.int64), "shape"))
        output = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "h", "w"])],
        [output],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_unsized_dims_take_a_larger_size_but_a_batch_stays_at_one() -> None:
    values = [
        helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "h", -1]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "h"]),
        helper.make_tensor_value_info("lengths", TensorProto.INT64, [-1]),
        helper.make_tensor_value_info("given", TensorProto.FLOAT, ["batch", 5]),
    ]
    graph = helper.make_graph([], "g", values, [])
    spec = InputSpec(shapes={"given": [2, 5]}).with_guessed_at(helper.make_model(graph), 64)
    assert spec.shapes == {"given": [2, 5], "image": [2, 3, 64, 64], "mask": [2, 64], "lengths": [64]}


@pytest.mark.parametrize("command", [["optimize"], ["sparsify", "--sparsity", "0.5"]])
def test_a_model_that_cannot_run_at_size_one_runs_at_a_larger_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    source, output, report = skip_model(tmp_path / "unet.onnx"), tmp_path / "out.onnx", tmp_path / "r.json"
    assert main([command[0], str(source), "-o", str(output), *command[1:], "--report", str(report)]) == 0
    said = "ONNX Runtime cannot run the model with its unsized dynamic dims at 1; at 64: x as [1, 2, 64, 64]"
    assert f"sizes: {said}" in capsys.readouterr().out
    assert json.loads(report.read_text())["run"]["sizes"] == said
    assert declared(output) == declared(source)


def test_a_model_no_size_runs_is_refused_naming_every_size_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, output = skip_model(tmp_path / "fixed.onnx", reshape_to=7), tmp_path / "out.onnx"
    assert main(["optimize", str(source), "-o", str(output)]) == RuntimeUnsupportedError.exit_code
    err = capsys.readouterr().err
    assert (
        "dynamic dims were set to 1: x ran as [1, 2, 1, 1]" in err
        and "(it failed too at 64, at 224, at 64 with the first axes too, at 224 with the first axes too)" in err
    )
    assert len(err.strip().splitlines()) == 1 and not output.exists()


def test_bench_compare_times_a_model_that_cannot_run_at_size_one(tmp_path: Path) -> None:
    settings = CompareSettings(pairs=1, warmup=0)
    result = compare_model(skip_model(tmp_path / "unet.onnx"), settings, registry={})
    assert result.inputs == "x [1,2,64,64] float32"
