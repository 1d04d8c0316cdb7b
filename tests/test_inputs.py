"""User-given inputs (``--inputs FEEDS.npz``): used as given by every command that runs a model, reported as
given, and refused before any work when the model does not take them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.errors import DataError
from onnxsat.inputs import InputSpec, load_feeds


def _branch(name: str, nodes: list[onnx.NodeProto], output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["m", "n"])])


def rate_switch_model(path: Path) -> Path:
    """x[1,16] -> Conv1d-like MatMul -> times 2 at 16000 Hz, as is at 8000 Hz, and for any other rate a
    Reshape to a size x cannot have: like voice-activity exports, random rates cannot run it."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    bad_shape = numpy_helper.from_array(np.array([7, 5], np.int64), "bad_shape")
    at_16k = _branch("at_16k", [helper.make_node("Mul", ["h", "two"], ["y16"])], "y16")
    at_8k = _branch("at_8k", [helper.make_node("Identity", ["h"], ["y8"])], "y8")
    invalid = _branch("invalid", [helper.make_node("Reshape", ["h", "bad_shape"], ["yr"])], "yr")
    other = _branch(
        "other",
        [
            helper.make_node("Equal", ["sr", "k8000"], ["is_8k"]),
            helper.make_node("If", ["is_8k"], ["yo"], then_branch=at_8k, else_branch=invalid),
        ],
        "yo",
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Equal", ["sr", "k16000"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["y"], then_branch=at_16k, else_branch=other),
    ]
    constants = [
        numpy_helper.from_array(np.array(16000, np.int64), "k16000"),
        numpy_helper.from_array(np.array(8000, np.int64), "k8000"),
    ]
    graph = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", "n"])],
        [weight, two, bad_shape, *constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def feeds_file(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


@pytest.fixture
def vad(tmp_path: Path) -> Path:
    return rate_switch_model(tmp_path / "vad.onnx")


def test_random_values_cannot_run_a_rate_switch(vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", str(vad), "-o", str(tmp_path / "o.onnx")]) == 6
    assert "ONNX Runtime cannot run the input model" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("command", [["optimize"], ["sparsify", "--sparsity", "0.5"]])
def test_given_inputs_run_every_model_writing_command(
    vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    feeds = feeds_file(tmp_path / "feeds.npz", sr=np.array(16000, np.int64))
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code = main([command[0], str(vad), "-o", str(out), "--inputs", str(feeds), "--report", str(report), *command[1:]])
    assert code == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert f"inputs: sr given ({feeds}), x random" in text
    run = json.loads(report.read_text())["run"]
    assert run["inputs"] == {"given": ["sr"], "random": ["x"]}
    assert run["inputs_file"] == str(feeds)
    assert out.exists()


def test_given_inputs_in_profile_tune_and_pipelines(
    vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = feeds_file(tmp_path / "feeds.npz", sr=np.array(8000, np.int64), x=np.ones((3, 16), np.float32))
    assert main(["profile", str(vad), "--inputs", str(feeds)]) == 0
    assert "x [3,16]" in capsys.readouterr().out  # the given array's shape fixed the dynamic batch
    assert main(["tune", str(vad), "--inputs", str(feeds), "--rounds", "2", "--warmup", "0"]) == 0
    assert "best:" in capsys.readouterr().out
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"input_model: vad.onnx\noutput_model: out.onnx\ninputs: {feeds.name}\npasses:\n  - type: eqsat\n"
    )
    assert main(["run", str(pipeline)]) == 0, capsys.readouterr().err
    assert "inputs: x given (" in capsys.readouterr().out  # the pipeline report says it too
    assert (tmp_path / "out.onnx").exists()


def test_given_inputs_in_bench_compare(vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    feeds = feeds_file(tmp_path / "feeds.npz", sr=np.array(16000, np.int64))
    code = main(["bench", "compare", str(vad), "--inputs", str(feeds), "--pairs", "3", "--warmup", "1"])
    assert code in (0, 1), capsys.readouterr().err  # 1: a peer is missing or slower; the run itself worked
    assert "ONNXSat" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"rate": np.array(16000, np.int64)}, "the model has no input 'rate' (inputs: x, sr)"),
        ({"sr": np.array(16000.0)}, "input 'sr' is float64; the model declares int64"),
        ({"sr": np.array([16000], np.int64)}, "input 'sr' has shape [1]; the model declares []"),
        ({"x": np.ones((2, 8), np.float32)}, "input 'x' has shape [2, 8]; the model declares [batch,16]"),
    ],
)
def test_feeds_the_model_does_not_take_are_refused_before_any_work(
    vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], arrays: dict[str, np.ndarray], message: str
) -> None:
    feeds = feeds_file(tmp_path / "feeds.npz", **arrays)
    for command in (["optimize"], ["sparsify", "--sparsity", "0.5"], ["prune"]):
        out = tmp_path / "o.onnx"
        assert main([command[0], str(vad), "-o", str(out), "--inputs", str(feeds), *command[1:]]) == 12
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err
        assert not out.exists()
    assert main(["profile", str(vad), "--inputs", str(feeds)]) == 12


def test_unreadable_feeds_files_are_one_line(vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_npz = tmp_path / "feeds.npz"
    not_npz.write_text("sr,16000\n")
    one_array = tmp_path / "one.npy"
    np.save(one_array, np.array(16000, np.int64))
    for path, message in [
        (tmp_path / "missing.npz", "no such file"),
        (not_npz, "is not a readable .npz file of named arrays (numpy.savez writes one): not numpy's format"),
        (one_array, "a .npz file of named arrays is needed"),
    ]:
        assert main(["optimize", str(vad), "-o", str(tmp_path / "o.onnx"), "--inputs", str(path)]) == 12
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


def test_an_input_given_twice_must_agree(vad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    feeds = feeds_file(tmp_path / "feeds.npz", sr=np.array(16000, np.int64), x=np.ones((1, 16), np.float32))
    args = ["optimize", str(vad), "-o", str(tmp_path / "o.onnx"), "--inputs", str(feeds), "--input-shape"]
    assert main([*args, "x:2,16"]) == 9
    assert "input 'x' has shape [1, 16] in --inputs and [2, 16] in --input-shape" in capsys.readouterr().err
    assert main([*args, "x:1,16"]) == 0


def test_a_spec_feeds_given_arrays_as_they_are_and_the_rest_seeded(vad: Path, tmp_path: Path) -> None:
    model = onnx.load(str(vad))
    rate = np.array(16000, np.int64)
    spec = InputSpec(shapes={"x": [4, 16]}, given={"sr": rate})
    first, again = spec.feeds(model, seed=3), spec.feeds(model, seed=3)
    assert first["sr"] is rate and first["x"].shape == (4, 16)
    np.testing.assert_array_equal(first["x"], again["x"])
    assert spec.dims() == {"x": [4, 16], "sr": []}
    assert spec.described(model) == {"given": ["sr"], "random": ["x"]}
    assert load_feeds(feeds_file(tmp_path / "f.npz", sr=rate))["sr"] == 16000
    with pytest.raises(DataError, match="holds no arrays"):
        load_feeds(feeds_file(tmp_path / "empty.npz"))


def test_the_python_api_takes_inputs_as_a_file_or_arrays(vad: Path, tmp_path: Path) -> None:
    import onnxsat

    report = onnxsat.optimize(vad, tmp_path / "a.onnx", inputs={"sr": np.array(8000, np.int64)})
    assert report.verification.ok and report.run_facts.inputs["given"] == ["sr"]
    feeds = feeds_file(tmp_path / "feeds.npz", sr=np.array(16000, np.int64))
    report = onnxsat.sparsify(vad, tmp_path / "b.onnx", inputs=feeds, sparsity=0.5)
    assert report.verification.ok and report.run_facts.inputs_file == str(feeds)


def reshape_model(path: Path) -> Path:
    """x[N, W] -> Reshape to [-1, 5] -> MatMul: a W of 1 (the default for a dynamic dim) cannot run, nor can the
    larger sizes tried then (64, 224)."""
    weight = numpy_helper.from_array(np.ones((5, 3), np.float32), "w")
    target = numpy_helper.from_array(np.array([-1, 5], np.int64), "target")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 3])],
        [weight, target],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


@pytest.mark.parametrize("command", [["optimize"], ["sparsify", "--sparsity", "0.5"], ["prune"]])
def test_an_input_model_that_cannot_run_is_blamed_and_the_guessed_dims_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    source, out = reshape_model(tmp_path / "m.onnx"), tmp_path / "o.onnx"
    assert main([command[0], str(source), "-o", str(out), *command[1:]]) == 6
    err = capsys.readouterr().err
    assert "cannot run the input model" in err and "x ran as [1, 1]" in err and "--input-shape" in err
    assert "(it failed too at 64, at 224, at 64 with the first axes too, at 224 with the first axes too)" in err
    assert not out.exists()
    code = main([command[0], str(source), "-o", str(out), *command[1:], "--input-shape", "x:2,10"])
    assert code in (0, 9), capsys.readouterr().err  # prune may find no channel group in one MatMul


def test_a_dim_named_like_a_given_arrays_takes_its_size() -> None:
    """An image beside 64 given class ids, both declared [batch, ...]: the random image is 64 images too
    (a float model broadcasts one image against 64 ids; its quantized form refuses to)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["image"], ["y"]), helper.make_node("Identity", ["ids"], ["z"])],
        "two",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "side", "side"]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "side", "side"]),
            helper.make_tensor_value_info("z", TensorProto.INT64, ["batch"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    spec = InputSpec(given={"ids": np.arange(64)})
    assert spec.feeds(model)["image"].shape == (64, 3, 1, 1)
    assert spec.guessed(model) == ["image"]  # "side" is still a guess
    sized = InputSpec(shapes={"ids": [64], "image": [64, 3, 8, 8]}).feeds(model)
    assert sized["image"].shape == (64, 3, 8, 8) and sized["ids"].shape == (64,)
    assert InputSpec(shapes={"ids": [5]}).feeds(model)["image"].shape == (5, 3, 1, 1)


@pytest.mark.parametrize("command", [["optimize"], ["sparsify", "--sparsity", "0.5"], ["prune", "--rate", "0.5"]])
def test_a_type_no_kernel_takes_is_named_without_a_hint_about_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A bfloat16 Conv has no CPU kernel in ONNX Runtime: the error says so, not that sizes were guessed."""
    weight = helper.make_tensor("w", TensorProto.BFLOAT16, [4, 3, 3, 3], np.zeros(108, np.uint16).tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 4, 6, 6])],
        [weight],
    )
    source, out = tmp_path / "bf16.onnx", tmp_path / "o.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), source)
    assert main([command[0], str(source), "-o", str(out), *command[1:]]) == 6
    err = capsys.readouterr().err.strip()
    assert err.endswith("has no CPU kernel for Conv on tensor(bfloat16): export it in float32)")
    assert "--input-shape" not in err and len(err.splitlines()) == 1 and not out.exists()


def cast_model(path: Path, input_type: int, output_type: int) -> Path:
    """x -> Cast to float -> MatMul by a 4x4 weight (something to quantize) -> Relu -> Cast to ``output_type``:
    ONNX Runtime has CPU kernels for every step."""
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["xf", "w"], ["m"]),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Cast", ["r"], ["y"], to=output_type),
        ],
        "exotic_io",
        [helper.make_tensor_value_info("x", input_type, ["N", 4])],
        [helper.make_tensor_value_info("y", output_type, ["N", 4])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return path


@pytest.mark.parametrize(
    ("input_type", "output_type", "named"),
    [
        (TensorProto.BFLOAT16, TensorProto.BFLOAT16, "input 'x' (tensor(bfloat16)), output 'y' (tensor(bfloat16))"),
        (TensorProto.FLOAT, TensorProto.FLOAT8E5M2, "output 'y' (tensor(float8e5m2))"),
    ],
)
@pytest.mark.parametrize("command", [["optimize"], ["sparsify", "--sparsity", "0.5"], ["quantize"]])
def test_an_input_or_output_numpy_cannot_hold_is_named_as_the_python_api_limit(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    input_type: int,
    output_type: int,
    named: str,
) -> None:
    """ORT runs bfloat16 / float8 interfaces, only its Python binding converts no numpy array of them: the one
    line names which input or output and that limit (not "cannot run the input model"), exit 6; profile works."""
    source, out = cast_model(tmp_path / "m.onnx", input_type, output_type), tmp_path / "o.onnx"
    assert main([command[0], str(source), "-o", str(out), *command[1:]]) == 6
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert f"ONNX Runtime loads the input model, but its Python API cannot exchange numpy arrays with {named}," in err
    assert "--input-shape" not in err and "Numpy_type" not in err
    assert main(["profile", str(source)]) == 0


def test_a_model_that_declares_no_shapes_runs_at_the_sizes_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interface without shapes (rank unknown) is valid for ONNX Runtime, though the ONNX checker wants
    one: nothing is refused for it, and the sizes come from --input-shape, which is asked for."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((10, 8)) * 0.3).astype(np.float32), "fc"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["g"]),
            helper.make_node("Flatten", ["g"], ["f"]),
            helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
        ],
        "shapeless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    source, out, data = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "d.npz"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), source)
    assert main(["optimize", str(source), "-o", str(out)]) == 9
    assert capsys.readouterr().err.strip() == (
        "onnxsat: error: input 'x' declares no shape, not even its rank: give its sizes with --input-shape x:D1,D2,..."
    )
    assert main(["optimize", str(source), "-o", str(out), "--input-shape", "x:1,3,8,8"]) == 0
    np.savez(data, inputs=rng.standard_normal((20, 3, 8, 8)).astype(np.float32))
    budget = ["--sparsity", "0.5", "--max-drop", "50%", "--data", str(data), "--input-shape", "x:1,3,8,8"]
    assert main(["sparsify", str(source), "-o", str(out), *budget]) == 0


def _decoder_with_past() -> onnx.ModelProto:
    """optimum's decoder interface: ids ``[batch, seq]``, a past ``[batch, heads, past, dim]`` and a mask over
    ``past_sequence_length + sequence_length``; the body only checks the sizes line up (Concat, then Add)."""
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["past", "axes"], ["summed"], keepdims=0),  # [batch, past, ...]
        helper.make_node("Slice", ["summed", "zero", "one", "two"], ["first"]),  # [batch, past, 1]
        helper.make_node("Squeeze", ["first", "two"], ["per_step"]),  # [batch, past]
        helper.make_node("Concat", ["per_step", "ids"], ["steps"], axis=1),  # [batch, past + seq]
        helper.make_node("Add", ["steps", "mask"], ["y"]),
    ]
    weights = {"axes": [1], "zero": [0], "one": [1], "two": [2]}
    graph = helper.make_graph(
        nodes,
        "decoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
            helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch_size", 2, "past_sequence_length", 4]),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch_size", "past_sequence_length + sequence_length"]
            ),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_dim_that_sums_named_dims_is_sized_as_their_sum() -> None:
    """Every command's default run gave the mask 1 beside a past of 1 and a sequence of 1, and failed."""
    from onnxsat.inputs import dim_expression, random_inputs

    model = _decoder_with_past()
    feeds = random_inputs(model)
    assert feeds["attention_mask"].shape == (1, 2) and feeds["past"].shape == (1, 2, 1, 4)
    given = random_inputs(model, InputSpec(shapes={"past": [3, 2, 5, 4], "input_ids": [3, 2]}))
    assert given["attention_mask"].shape == (3, 7)
    assert dim_expression("a + b * 2 + 3", {"a": 4, "b": 5}) == 17 and dim_expression("a - b", {}) is None
    assert dim_expression("batch", {"batch": 2}) is None  # a plain name is no expression


def test_given_arrays_that_disagree_on_a_name_leave_it_to_the_default() -> None:
    """optimum's merged decoder declares its mask with the sequence length although it spans the past too:
    a mask of 9 beside position ids of 1 sized the random ids 9, and the model could not run."""
    from onnxsat.inputs import named_sizes

    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    positions = helper.make_tensor_value_info("positions", TensorProto.INT64, ["batch", "seq"])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    graph = helper.make_graph([helper.make_node("Identity", ["ids"], ["y"])], "g", [ids, mask, positions], [ids])
    model = helper.make_model(graph)
    spec = InputSpec(given={"mask": np.ones((4, 9), np.int64), "positions": np.zeros((4, 1), np.int64)})
    assert named_sizes(model, spec) == {"batch": 4}


def test_the_data_input_takes_the_batch_its_given_rows_fix() -> None:
    """Rows given per sample (a past per sample beside --data's ids) ran the ids at batch 1: refused."""
    from onnxsat.data.model_input import sized_by_data
    from onnxsat.data.sources import Dataset

    model = _decoder_with_past()
    spec = InputSpec(given={"past": np.zeros((6, 2, 3, 4), np.float32), "attention_mask": np.ones((6, 5), np.int64)})
    sized = sized_by_data(model, spec, Dataset(np.ones((6, 2), np.int64), None, "ids"))
    assert sized.shapes["input_ids"] == [6, 2]


def test_profile_sizes_inputs_from_the_names_given_and_suggests_sums() -> None:
    from onnxsat.profile.shapes import ShapesUnknownError, fixed_input_shapes

    model = _decoder_with_past()
    with pytest.raises(ShapesUnknownError, match=r"--input-shape attention_mask:1,2 "):
        fixed_input_shapes(model, {})
    shapes = fixed_input_shapes(model, {"input_ids": [2, 3], "past": [2, 2, 4, 4]})
    assert shapes["attention_mask"] == [2, 7]
