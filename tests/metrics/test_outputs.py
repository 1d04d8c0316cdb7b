"""Outputs gathered samples first wherever the batch axis is; fixed and dynamic batches agree; streams
run step by step with their state fed back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from models import CLASSES, FEATURES, STEPS, stateful, stateful_reference, time_major

from onnxsat import memory
from onnxsat.data.outputs import OutputRunner, parse_stateful
from onnxsat.data.sources import Dataset
from onnxsat.errors import SettingsError


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_a_time_major_output_is_gathered_samples_first_and_batches_do_not_matter(tmp_path: Path) -> None:
    data = np.random.default_rng(0).normal(size=(7, STEPS, FEATURES)).astype(np.float32)
    dataset = Dataset(data, None, "x")
    dynamic = OutputRunner(session(time_major(tmp_path / "d.onnx")), "x", dataset, batch_size=3)
    gathered = dynamic.run()["scores"]
    assert dynamic.batch_axes == {"scores": 1}
    assert gathered.shape == (7, STEPS, CLASSES)
    direct = session(tmp_path / "d.onnx").run(None, {"x": data})[0]
    np.testing.assert_allclose(gathered, direct.transpose(1, 0, 2), rtol=1e-6)
    one = OutputRunner(session(time_major(tmp_path / "one.onnx", batch=1)), "x", dataset)
    np.testing.assert_allclose(one.run()["scores"], gathered, rtol=1e-6)
    assert one.batch_axes == {"scores": 1}
    fixed = OutputRunner(session(time_major(tmp_path / "four.onnx", batch=4)), "x", dataset)  # last batch padded
    np.testing.assert_allclose(fixed.run()["scores"], gathered, rtol=1e-6)


@pytest.mark.parametrize("echo_sr", [True, False], ids=["one-by-one", "side-by-side"])
def test_streams_feed_the_state_back_step_after_step(tmp_path: Path, echo_sr: bool) -> None:
    """With an output that has no batch axis streams run one at a time, else all as one batch: the same
    outputs either way."""
    path = stateful(tmp_path / "cell.onnx", echo_sr)
    streams = np.random.default_rng(1).normal(size=(3, 5, FEATURES)).astype(np.float32)
    dataset = Dataset(streams, None, "streams", streams=True, lengths=np.array([5, 2, 4]))
    runner = OutputRunner(
        session(path), "x", dataset, given={"sr": np.array(16000)}, state=parse_stateful(["state=stateN"])
    )
    outputs = runner.run()
    assert outputs["prob"].shape == (11, 1) and outputs["stateN"].shape == (11, 2, 4)
    assert runner.batch_axes is not None and runner.batch_axes["stateN"] == 1
    assert runner._side_by_side is (not echo_sr)
    expected = np.concatenate(
        [stateful_reference(path, stream[None, :length])[0] for stream, length in zip(streams, [5, 2, 4], strict=True)]
    )
    np.testing.assert_allclose(outputs["prob"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["nope=stateN"], "the model has no input 'nope'"),
        (["state=nope"], "the model has no output 'nope'"),
        (["x=stateN"], "is the input the data is fed to"),
        (["state"], "write INPUT=OUTPUT"),
    ],
)
def test_a_state_pairing_the_model_does_not_have_is_one_line(tmp_path: Path, pairs: list[str], message: str) -> None:
    dataset = Dataset(np.zeros((1, 2, FEATURES), np.float32), None, "s", streams=True)
    with pytest.raises(SettingsError, match=message):
        OutputRunner(session(stateful(tmp_path / "c.onnx")), "x", dataset, state=parse_stateful(pairs))


def test_streams_without_state_are_refused(tmp_path: Path) -> None:
    dataset = Dataset(np.zeros((1, 2, FEATURES), np.float32), None, "s", streams=True)
    with pytest.raises(SettingsError, match="--stateful"):
        OutputRunner(session(stateful(tmp_path / "c.onnx")), "x", dataset)


def test_an_output_with_no_element_is_left_out_and_said(tmp_path: Path) -> None:
    """optimum's merged seq2seq decoders return the encoder's cache empty on their cache branch: auto scoring
    stopped at it ("no batch axis"). It is left out now, with a note; named with --metric-output, it is scored."""
    import onnx
    from onnx import TensorProto, helper

    from onnxsat.metrics.scorer import ModelScorer

    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Slice", ["x", "zero", "zero", "one"], ["empty"]),  # rows 0:0, [0, F]
    ]
    graph = helper.make_graph(
        nodes,
        "empty_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y", "empty")],
        [
            onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
            onnx.numpy_helper.from_array(np.array([0], np.int64), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = Dataset(np.random.default_rng(0).normal(size=(5, FEATURES)).astype(np.float32), None, "x")
    scorer = ModelScorer(model, "x", data)
    assert list(scorer.reference) == ["y"]
    assert scorer.budget.blind_spots() == ["empty: no element on the data (an empty output), so it is not scored"]
    assert scorer.score(model).drop == 0.0


def wide_activation(path: Path, floats_per_sample: int) -> Path:
    """``x`` [N, 1] -> Expand to [N, floats_per_sample] (each sample's activation that wide) -> ReduceMean."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("Expand", ["x", "shape"], ["wide"]),
            helper.make_node("Sin", ["wide"], ["waves"]),
            helper.make_node("ReduceMean", ["waves"], ["y"], axes=[1], keepdims=1),
        ],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(np.array([1, floats_per_sample], np.int64), "shape")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_a_batch_is_cut_to_what_memory_allows_and_gives_the_same_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sample takes 32 MB inside the model (16 MB expanded, 16 MB of its sines; the second sample's run
    adds 33-67 MB, as ORT reuses the first run's buffers or not): with 250 MiB allowed per batch, batches of
    64 become 2 or 4; the outputs are those of one run over all samples."""
    monkeypatch.setattr(memory, "BATCH_MEMORY_MIB", 250)
    path = wide_activation(tmp_path / "wide.onnx", 4 * 2**20)
    data = np.linspace(0, 1, 9, dtype=np.float32)[:, None]
    runner = OutputRunner(session(path), "x", Dataset(data, None, "x"), batch_size=64)
    gathered = runner.run()["y"]
    assert runner.batch_size in (2, 4)
    np.testing.assert_allclose(gathered, session(path).run(None, {"x": data})[0], rtol=1e-5)
    assert memory.memory_sized_batch(64, 0.0) == 64  # growth not seen: as asked
    assert memory.memory_sized_batch(64, 1.0) == 64 and memory.memory_sized_batch(64, 500.0) == 1
    assert memory.memory_sized_batch(3, 80.0) == 3 and memory.memory_sized_batch(5, 80.0) == 2


def test_a_batch_axis_the_model_squeezes_for_one_sample_is_put_back(tmp_path: Path) -> None:
    """PLCMOS ends in ``torch.squeeze``: its score is ``[]`` for one sample and ``[2]`` for two, and was refused
    as having "no single batch axis". The axis that appears is the batch; runs of one get it back."""
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x", "axes"], ["sums"], keepdims=1),
            helper.make_node("Squeeze", ["sums"], ["score"]),
        ],
        "squeezed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    path = tmp_path / "squeezed.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    runner = OutputRunner(session(path), "x", Dataset(data, None, "five"), batch_size=2)  # the last run is of one
    np.testing.assert_allclose(runner.run()["score"], data.sum(axis=1))
    assert runner.batch_axes == {"score": 0}


def test_a_batch_that_a_given_input_fixes_at_one_runs_sample_by_sample(tmp_path: Path) -> None:
    """AECMOS declares its batch dynamic, but its GRU state ``h0`` [4, 1, 64] (given by ``--inputs``) fixes it at
    one: two samples cannot run together, so each runs alone, as for a model whose batch is fixed to 1."""
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "h"], ["joined"], axis=1), helper.make_node("Relu", ["joined"], ["y"])],
        "state_of_one",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
    )
    path = tmp_path / "state_of_one.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    data = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
    state = np.full((1, 4), 0.5, np.float32)
    runner = OutputRunner(session(path), "x", Dataset(data, None, "five"), given={"h": state})
    gathered = runner.run()["y"]
    assert runner.fixed_batch == 1 and runner.batch_size == 1
    np.testing.assert_allclose(gathered, np.maximum(np.concatenate([data, np.repeat(state, 5, axis=0)], axis=1), 0))
