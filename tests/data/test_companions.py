"""Inputs fed per sample beside the data (a text model's attention_mask beside its input_ids): one row is
repeated for every sample, a row per sample goes with its sample through batches, subsets and splits,
and a model run over the data sees each sample with its own row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.data.model_input import evaluation_data, fitted_to_model, with_data_rows
from onnxsat.data.outputs import OutputRunner
from onnxsat.data.sources import COMPANION_PREFIX, Dataset
from onnxsat.errors import DataError
from onnxsat.inputs import InputSpec

RNG = np.random.default_rng(7)


def text_model(batch: str | int = "N") -> onnx.ModelProto:
    """ids [batch, S] embedded, masked by mask [batch, S], two MatMuls: the shape of an encoder's inputs."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
            helper.make_node("Unsqueeze", ["mask", "axis"], ["m3"], name="unsqueeze"),
            helper.make_node("Cast", ["m3"], ["mf"], to=TensorProto.FLOAT, name="cast"),
            helper.make_node("Mul", ["e", "mf"], ["em"], name="masked"),
            helper.make_node("MatMul", ["em", "w1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
        ],
        "text",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, "S"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, "S"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, "S", 16])],
        [
            numpy_helper.from_array(RNG.normal(size=(50, 128)).astype(np.float32), "emb"),
            numpy_helper.from_array(np.array([2], np.int64), "axis"),
            numpy_helper.from_array(RNG.normal(size=(128, 256)).astype(np.float32) * 0.05, "w1"),
            numpy_helper.from_array(RNG.normal(size=(256, 16)).astype(np.float32) * 0.05, "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ids_and_masks(count: int, length: int = 6) -> tuple[np.ndarray, np.ndarray]:
    ids = RNG.integers(0, 50, size=(count, length))
    masks = (np.arange(length)[None, :] < RNG.integers(1, length + 1, size=(count, 1))).astype(np.int64)
    return ids, masks


def test_rows_follow_their_samples_through_subsets_splits_and_batches() -> None:
    ids, masks = ids_and_masks(10)
    dataset = Dataset(ids, np.arange(10), "text", companions={"mask": masks})
    picked = dataset.subset(np.array([7, 2, 5]))
    np.testing.assert_array_equal(picked.companions["mask"], masks[[7, 2, 5]])
    search, held = dataset.split(0.3)
    assert held is not None
    for part in (search, held):
        for row, label in zip(part.inputs, part.labels, strict=True):
            np.testing.assert_array_equal(row, ids[label])
        np.testing.assert_array_equal(part.companions["mask"], masks[part.labels])
    batches = list(dataset.feed_batches(4))
    assert [len(inputs) for inputs, _, _ in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([rows["mask"] for _, rows, _ in batches]), masks)
    first, rows = dataset.first(12)  # fewer samples than asked: repeated from the start
    np.testing.assert_array_equal(first[10:], ids[:2])
    np.testing.assert_array_equal(rows["mask"][10:], masks[:2])
    with pytest.raises(DataError, match="3 rows for 10 samples"):
        Dataset(ids, None, "text", companions={"mask": masks[:3]})


def test_given_inputs_become_companions_only_when_they_share_the_dynamic_batch() -> None:
    ids, masks = ids_and_masks(5)
    dataset = Dataset(ids, None, "text")
    one = fitted_to_model(text_model(), dataset, {"mask": masks[:1]})
    np.testing.assert_array_equal(one.companions["mask"], np.repeat(masks[:1], 5, axis=0))
    each = fitted_to_model(text_model(), dataset, {"mask": masks})
    np.testing.assert_array_equal(each.companions["mask"], masks)
    assert fitted_to_model(text_model(batch=1), Dataset(ids[:1], None, "t"), {"mask": masks[:1]}).companions == {}
    with pytest.raises(DataError, match="'mask' has 2 rows for 5 samples"):
        fitted_to_model(text_model(), dataset, {"mask": masks[:2]})


def test_a_run_over_the_data_feeds_each_sample_its_own_row() -> None:
    model = text_model()
    ids, masks = ids_and_masks(9)
    dataset = fitted_to_model(model, Dataset(ids, None, "text"), {"mask": masks})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = OutputRunner(session, "ids", dataset, batch_size=4, given={"mask": masks}).run()["y"]
    one_by_one = [session.run(["y"], {"ids": ids[i : i + 1], "mask": masks[i : i + 1]})[0][0] for i in range(9)]
    np.testing.assert_allclose(outputs, np.stack(one_by_one), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("given", ["none", "one mask", "every input per sample"])
def test_quantize_a_model_with_two_inputs_of_a_dynamic_batch(tmp_path: Path, given: str) -> None:
    """No data: the mask is held at one seeded value beside each random sample. With --inputs: one mask for
    all, or every input per sample (the ids are then the data)."""
    path, out = tmp_path / "text.onnx", tmp_path / "q.onnx"
    onnx.save(text_model(), path)
    ids, masks = ids_and_masks(12)
    extra: list[str] = []
    if given != "none":
        feeds = tmp_path / "feeds.npz"
        np.savez(feeds, **({"mask": masks[:1]} if given == "one mask" else {"ids": ids, "mask": masks}))
        extra = ["--inputs", str(feeds)]
    argv = ["quantize", str(path), "-o", str(out), "--mode", "dynamic", "--no-node-timing", *extra]
    assert main(argv) == 0  # (timed, both tiny MatMuls run slower quantized, alone and together)
    assert any(node.op_type == "MatMulInteger" for node in onnx.load(out).graph.node)


def test_companions_travel_in_an_npz_of_samples(tmp_path: Path) -> None:
    """How compress hands its search data to worker processes: the rows come back with their samples, and a
    given input already fed per sample is not fitted again (the user's rows cover the whole data, the
    worker's samples only the search part)."""
    from onnxsat.compression.evaluate import samples_npz
    from onnxsat.data.sources import load_dataset

    ids, masks = ids_and_masks(6)
    path = tmp_path / "search.npz"
    path.write_bytes(samples_npz(Dataset(ids, None, "text", companions={"mask": masks})))
    loaded = load_dataset(str(path), [None, 6], limit=4)
    np.testing.assert_array_equal(loaded.companions["mask"], masks[:4])
    all_rows = np.concatenate([masks, masks])  # twelve rows, as given for the whole data
    kept = fitted_to_model(text_model(), loaded, {"mask": all_rows})
    np.testing.assert_array_equal(kept.companions["mask"], masks[:4])


def test_held_out_data_takes_no_rows_meant_for_the_search_samples(tmp_path: Path) -> None:
    """--inputs rows per sample belong to --data's samples: --eval-data of as many samples would otherwise
    be scored with the search samples' masks. It carries its own rows, or the run stops in one line."""
    _, masks = ids_and_masks(8)
    held_ids, held_masks = ids_and_masks(8)
    bare, own = tmp_path / "held.npz", tmp_path / "held_rows.npz"
    np.savez(bare, inputs=held_ids)
    np.savez(own, inputs=held_ids, **{f"{COMPANION_PREFIX}mask": held_masks})
    spec = InputSpec(given={"mask": masks})
    with pytest.raises(DataError, match=r"--inputs gives a row of 'mask' per sample of --data.*companion:mask"):
        evaluation_data(text_model(), str(bare), spec, held_out=True)
    loaded = evaluation_data(text_model(), str(own), spec, held_out=True)
    assert loaded is not None
    np.testing.assert_array_equal(loaded.companions["mask"], held_masks)
    one_row = evaluation_data(text_model(), str(bare), InputSpec(given={"mask": masks[:1]}), held_out=True)
    assert one_row is not None
    np.testing.assert_array_equal(one_row.companions["mask"], np.repeat(masks[:1], 8, axis=0))


def test_compress_refuses_eval_data_without_its_own_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, data, held, feeds = (tmp_path / name for name in ("text.onnx", "d.npz", "e.npz", "feeds.npz"))
    onnx.save(text_model(), path)
    ids, masks = ids_and_masks(8)
    np.savez(data, inputs=ids)
    np.savez(held, inputs=ids_and_masks(8)[0])
    np.savez(feeds, mask=masks)
    argv = ["compress", str(path), "-o", str(tmp_path / "c.onnx"), "--data", str(data), "--eval-data", str(held)]
    assert main([*argv, "--inputs", str(feeds)]) != 0
    assert "save theirs as `companion:mask`" in capsys.readouterr().err
    assert not (tmp_path / "c.onnx").exists()


def test_rows_the_data_carries_per_sample_leave_the_data_input_to_the_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An .npz of `inputs` and `companion:mask` (the format the message for a missing `inputs` advises) is
    enough for a two-input model: no --inputs needed; held-out data must carry its own rows."""
    path, data, bare = tmp_path / "text.onnx", tmp_path / "d.npz", tmp_path / "e.npz"
    onnx.save(text_model(), path)
    ids, masks = ids_and_masks(12)
    np.savez(data, inputs=ids, **{f"{COMPANION_PREFIX}mask": masks})
    np.savez(bare, inputs=ids_and_masks(12)[0])
    spec = with_data_rows(InputSpec(), str(data), text_model())
    assert spec.from_data == {"mask"}
    np.testing.assert_array_equal(spec.given["mask"], masks[:1])
    loaded = evaluation_data(text_model(), str(data), spec)
    assert loaded is not None
    np.testing.assert_array_equal(loaded.companions["mask"], masks)  # each sample its own row, not the first
    with pytest.raises(DataError, match=r"--data carries a row of 'mask' per sample"):
        evaluation_data(text_model(), str(bare), spec, held_out=True)
    argv = ["quantize", str(path), "-o", str(tmp_path / "q.onnx"), "--mode", "dynamic", "--no-node-timing"]
    assert main([*argv, "--data", str(data)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("inputs: ids from the data, mask from the data")  # not "random"
    argv = ["compress", str(path), "-o", str(tmp_path / "c.onnx"), "--data", str(data), "--eval-data", str(bare)]
    assert main(argv) != 0
    assert "save theirs as `companion:mask`" in capsys.readouterr().err


def test_arrays_named_after_the_models_inputs_are_each_inputs_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``np.savez(path, x=images, widths=widths)``, as a text recognizer's user saves its two inputs: the samples
    are the float array (integers when all are), the others its rows; they were refused as "data is fed to one
    input, and this model has 2 not given by --inputs"."""
    from onnxsat.data.sources import _data_array

    path, data = tmp_path / "text.onnx", tmp_path / "named.npz"
    onnx.save(text_model(), path)
    ids, masks = ids_and_masks(12)
    np.savez(data, mask=masks, ids=ids)
    spec = with_data_rows(InputSpec(), str(data), text_model())
    assert spec.from_data == {"mask"}  # both integers, as many values each: the model's first input is the data
    loaded = evaluation_data(text_model(), str(data), spec)
    assert loaded is not None
    np.testing.assert_array_equal(loaded.inputs, ids)
    np.testing.assert_array_equal(loaded.companions["mask"], masks)
    argv = ["quantize", str(path), "-o", str(tmp_path / "q.onnx"), "--mode", "dynamic", "--no-node-timing"]
    assert main([*argv, "--data", str(data)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("inputs: ids from the data, mask from the data")
    images, widths = np.zeros((4, 1, 8, 32), np.float32), np.full(4, 32, np.int64)
    assert _data_array({"widths": widths, "x": images}) == "x"
