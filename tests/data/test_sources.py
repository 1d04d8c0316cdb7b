"""load_dataset: every source fitted to the model's input, and every bad input one DataError line."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import DataError

RED = (255, 0, 0)
BLUE = (0, 0, 255)


def write_image(path: Path, size: tuple[int, int], mode: str = "RGB", color: object = RED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path)
    return path


def image_folder(root: Path) -> Path:
    """Two classes ("cat" < "dog"), images of several sizes and modes; dog's are blue, cat's red."""
    write_image(root / "dog" / "a.png", (12, 10), color=BLUE)
    write_image(root / "dog" / "b.bmp", (8, 8), mode="RGBA", color=(*BLUE, 255))
    write_image(root / "cat" / "x.png", (5, 7), color=RED)
    write_image(root / "cat" / "y.jpg", (8, 8), color=RED)
    palette = Image.new("P", (9, 9), 0)
    palette.putpalette([*RED] * 256)
    palette.save(root / "cat" / "z.PNG")
    (root / "cat" / "notes.txt").write_text("not an image")
    return root


def cifar_batch(path: Path, labels: list[int], seed: int = 0, **overrides: object) -> np.ndarray:
    """A CIFAR-10 style batch pickle (as the real ones: protocol 2, bytes keys); returns its data."""
    data = np.random.default_rng(seed).integers(0, 256, (len(labels), 3072), dtype=np.uint8)
    batch = {b"batch_label": b"fake", b"data": data, b"labels": labels, **overrides}
    path.write_bytes(pickle.dumps(batch, protocol=2))
    return data


def npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


class RunsCode:
    """Unpickling this creates a folder: what a hostile "CIFAR batch" would do instead."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.makedirs, (str(self.target),)


# ---------------------------------------------------------------- digits


@pytest.mark.parametrize("batch", [None, "batch", -1, 0, 1])
def test_digits_load_as_nchw_in_unit_range(batch: object) -> None:
    data = load_dataset("digits", [batch, 1, 8, 8])
    assert data.name == "digits"
    assert data.inputs.shape == (1797, 1, 8, 8) and data.inputs.dtype == np.float32
    assert data.inputs.min() == 0.0 and data.inputs.max() == 1.0
    assert data.labels is not None and data.labels.dtype == np.int64
    assert data.labels[:10].tolist() == list(range(10))


def test_digits_resized_to_three_channels() -> None:
    data = load_dataset("digits", [1, 3, 16, 16], limit=20)
    assert data.inputs.shape == (20, 3, 16, 16)
    # the reports say how the samples were fitted: a model trained on other resampling scores differently
    assert data.name == "digits (grayscale repeated to 3 channels, resized bilinearly from 8x8 to 16x16)"
    assert load_dataset("digits-test", [1, 1, 32, 32]).name == "digits-test (resized bilinearly from 8x8 to 32x32)"
    np.testing.assert_array_equal(data.inputs[:, 0], data.inputs[:, 2])
    small = load_dataset("digits", [1, 1, 8, 8], limit=20).inputs
    assert abs(float(data.inputs.mean()) - float(small.mean())) < 0.02  # bilinear keeps the average brightness


def test_digits_dynamic_size_keeps_eight_by_eight_and_normalizes() -> None:
    plain = load_dataset("digits", ["N", 1, "H", "W"], limit=5)
    normalized = load_dataset("digits", ["N", 1, None, None], limit=5, mean=[0.5], std=[0.25])
    assert plain.inputs.shape == (5, 1, 8, 8)
    np.testing.assert_allclose(normalized.inputs, (plain.inputs - 0.5) / 0.25, rtol=1e-6)


def test_digits_flattened_for_a_model_of_64_features(tmp_path: Path) -> None:
    """scikit-learn models take the digits as [N, 64]: the same pixels, flattened; a linear classifier fitted
    here on digits-train scores on digits-test through ``--data`` as it does by hand."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnxsat.cli import main

    flat = load_dataset("digits-test", ["N", 64], mean=[0.5], std=[0.25])
    images = load_dataset("digits-test", ["N", 1, 8, 8], mean=[0.5], std=[0.25])
    np.testing.assert_array_equal(flat.inputs, images.inputs.reshape(len(images.inputs), 64))
    train = load_dataset("digits-train", ["N", 64])
    rows = np.hstack([train.inputs, np.ones((len(train.inputs), 1), np.float32)])
    solved = np.linalg.lstsq(rows, np.eye(10)[train.labels], rcond=None)[0].astype(np.float32)
    test = load_dataset("digits-test", ["N", 64])
    accuracy = float(np.mean(np.argmax(test.inputs @ solved[:-1] + solved[-1], axis=1) == test.labels))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coefficient"], ["product"]),
            helper.make_node("Add", ["product", "intercepts"], ["scores"]),
        ],
        "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(solved[:-1], "coefficient"), numpy_helper.from_array(solved[-1:], "intercepts")],
    )
    path, report = tmp_path / "linear.onnx", tmp_path / "report.json"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    args = [
        "sparsify",
        str(path),
        "-o",
        str(tmp_path / "out.onnx"),
        "--data",
        "digits-test",
        "--max-drop",
        "1%",
        "--holdout",
        "0",
    ]
    assert main([*args, "--report", str(report)]) == 0
    assert abs(json.loads(report.read_text())["baseline"]["value"] - accuracy) < 1e-9 and accuracy > 0.85


# ---------------------------------------------------------------- image folders


def test_image_folder_labels_by_sorted_class_and_fits_size(tmp_path: Path) -> None:
    data = load_dataset(str(image_folder(tmp_path / "images")), [1, 3, 8, 8])
    assert data.name == f"folder:{tmp_path / 'images'} (resized bilinearly to 8x8 from 3 other sizes)"
    assert data.inputs.shape == (5, 3, 8, 8) and data.inputs.dtype == np.float32
    # classes interleaved: cat x, dog a, cat y, dog b, cat z
    assert data.labels is not None and data.labels.tolist() == [0, 1, 0, 1, 0]
    red, blue = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0])
    for image, label in zip(data.inputs, data.labels, strict=True):
        expected = blue if label else red
        np.testing.assert_allclose(image.mean(axis=(1, 2)), expected, atol=0.02)  # a JPEG is only near red


@pytest.mark.parametrize("shape", [[1, 8, 8, 3], ["N", 8, 8, 3]])
def test_a_channels_last_input_gets_nhwc_images(tmp_path: Path, shape: list[object]) -> None:
    """TensorFlow and Keras models (and tf2onnx exports) take NHWC images: the same pixels, channels last."""
    folder = str(image_folder(tmp_path / "images"))
    nchw = load_dataset(folder, [1, 3, 8, 8], mean=[0.5, 0.4, 0.3], std=[0.2])
    nhwc = load_dataset(folder, shape, mean=[0.5, 0.4, 0.3], std=[0.2])
    assert nhwc.inputs.shape == (5, 8, 8, 3)
    np.testing.assert_array_equal(nhwc.inputs, nchw.inputs.transpose(0, 2, 3, 1))
    digits = load_dataset("digits", [None, 8, 8, 1], limit=4)
    np.testing.assert_array_equal(digits.inputs[..., 0], load_dataset("digits", [None, 1, 8, 8], limit=4).inputs[:, 0])


def test_image_folder_to_grayscale_and_normalized(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "images")
    data = load_dataset(str(root), [None, 1, 4, 6], mean=[0.1], std=[0.5])
    assert data.inputs.shape == (5, 1, 4, 6)
    luma_red = 76 / 255  # Pillow's convert("L") of pure red
    np.testing.assert_allclose(data.inputs[0], (luma_red - 0.1) / 0.5, atol=1e-5)


def test_flat_image_folder_has_no_labels_and_keeps_first_size(tmp_path: Path) -> None:
    write_image(tmp_path / "b.png", (6, 4))
    write_image(tmp_path / "a.png", (3, 5), mode="L", color=128)
    data = load_dataset(str(tmp_path), [1, 3, None, None])
    assert data.name == f"folder:{tmp_path} (resized bilinearly from 4x6 to 5x3)"
    assert data.labels is None
    assert data.inputs.shape == (2, 3, 5, 3)  # "a.png" comes first: height 5, width 3
    np.testing.assert_allclose(data.inputs[0], 128 / 255, atol=1e-6)


def test_image_folder_limit_reads_only_the_first_files(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "images")
    (root / "cat" / "zz_damaged.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    data = load_dataset(str(root), [1, 3, 8, 8], limit=3)
    assert data.labels is not None and data.labels.tolist() == [0, 1, 0]
    with pytest.raises(DataError, match=r"zz_damaged\.png: cannot read the image"):
        load_dataset(str(root), [1, 3, 8, 8])


# ---------------------------------------------------------------- CIFAR-10


def test_cifar_folder_reads_test_batch_first(tmp_path: Path) -> None:
    test_data = cifar_batch(tmp_path / "test_batch", [3, 1, 4], seed=1)
    cifar_batch(tmp_path / "data_batch_1", [9, 2], seed=2)
    (tmp_path / "batches.meta").write_bytes(b"ignored")
    data = load_dataset(str(tmp_path), [None, 3, 32, 32])
    assert data.name == f"cifar10:{tmp_path}"
    assert data.labels is not None and data.labels.tolist() == [3, 1, 4, 9, 2]
    assert data.inputs.shape == (5, 3, 32, 32)
    np.testing.assert_allclose(data.inputs[0], test_data[0].reshape(3, 32, 32) / 255.0, rtol=1e-6)


def test_cifar_limit_stops_before_later_batches(tmp_path: Path) -> None:
    cifar_batch(tmp_path / "test_batch", [0, 1, 2])
    (tmp_path / "data_batch_1").write_bytes(b"damaged")
    assert len(load_dataset(str(tmp_path), [1, 3, 32, 32], limit=3)) == 3
    with pytest.raises(DataError, match="data_batch_1: not a CIFAR-10 batch"):
        load_dataset(str(tmp_path), [1, 3, 32, 32])


def test_one_cifar_batch_file_resized_to_grayscale(tmp_path: Path) -> None:
    data = cifar_batch(tmp_path / "batch.bin", [5, 6])
    loaded = load_dataset(str(tmp_path / "batch.bin"), [1, 1, 8, 8])
    assert loaded.inputs.shape == (2, 1, 8, 8)
    assert loaded.name.endswith("batch.bin (RGB made grayscale, resized bilinearly from 32x32 to 8x8)")
    assert loaded.labels is not None and loaded.labels.tolist() == [5, 6]
    luma = np.tensordot(data.reshape(2, 3, 32, 32) / 255.0, [0.299, 0.587, 0.114], axes=([1], [0]))
    np.testing.assert_allclose(loaded.inputs.mean(axis=(1, 2, 3)), luma.mean(axis=(1, 2)), atol=1e-3)


def test_cifar_pickle_cannot_run_code(tmp_path: Path) -> None:
    target = tmp_path / "created_by_pickle"
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": RunsCode(target), b"labels": [0]}))
    with pytest.raises(DataError, match=r"not a CIFAR-10 batch \(it asks to load os\.makedirs"):
        load_dataset(str(tmp_path), [1, 3, 32, 32])
    assert not target.exists()


# ---------------------------------------------------------------- .npz


def test_npz_inputs_and_labels(tmp_path: Path) -> None:
    inputs = np.arange(30, dtype=np.float64).reshape(5, 2, 3)
    path = npz(tmp_path / "data.npz", inputs=inputs, labels=np.array([0, 1, 2, 1, 0], dtype=np.int32))
    data = load_dataset(str(path), ["batch", 2, 3], limit=4)
    assert data.name == f"npz:{path}"
    assert data.inputs.dtype == np.float32 and data.inputs.shape == (4, 2, 3)
    np.testing.assert_array_equal(data.inputs, inputs[:4])
    assert data.labels is not None and data.labels.dtype == np.int64 and data.labels.tolist() == [0, 1, 2, 1]


def test_a_lone_array_of_any_name_is_the_inputs(tmp_path: Path) -> None:
    """``numpy.savez(path, input=x)``, named after the model's input (as magika's and AECMOS's users would):
    read as the samples, beside labels and companions; two such arrays are still refused (see the bad inputs)."""
    inputs = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = npz(tmp_path / "named.npz", input=inputs, labels=np.array([0, 1, 1, 0]), **{"companion:h": np.ones((4, 2))})
    data = load_dataset(str(path), ["N", 3])
    np.testing.assert_array_equal(data.inputs, inputs)
    assert data.labels is not None and data.labels.tolist() == [0, 1, 1, 0] and list(data.companions) == ["h"]


def test_a_file_that_is_no_npz_is_named_so_not_pickled_data(tmp_path: Path) -> None:
    """numpy reads a foreign file as "pickled data" and advises allow_pickle=True: unsafe, and beside the point."""
    path = tmp_path / "data.npz"
    path.write_text("not a zip file at all")
    with pytest.raises(DataError, match=r"not a \.npz archive \(numpy\.savez writes one") as raised:
        load_dataset(str(path), ["batch", 2, 3])
    assert "pickle" not in str(raised.value)


def test_npz_without_labels_and_whole_float_labels(tmp_path: Path) -> None:
    unlabeled = npz(tmp_path / "unlabeled.npz", inputs=np.ones((3, 4), np.float32))
    assert load_dataset(str(unlabeled), [None, None]).labels is None
    floats = npz(tmp_path / "floats.npz", inputs=np.ones((2, 4)), labels=np.array([1.0, 3.0]))
    labels = load_dataset(str(floats), [1, 4]).labels
    assert labels is not None and labels.tolist() == [1, 3]


def _pipe(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (np.array([0.5, -1.25, 3.0]), [0.5, -1.25, 3.0]),  # not whole: a regression's targets
        (np.array([-2.0, 0.0, 5.0]), [-2.0, 0.0, 5.0]),  # negative floats: no class index
        (np.array([[1.0, 2.0], [3.0, 4.5], [0.0, 0.0]]), [[1.0, 2.0], [3.0, 4.5], [0.0, 0.0]]),  # two per sample
    ],
    ids=["fractional", "negative", "two per sample"],
)
def test_npz_labels_that_are_no_classes_are_regression_targets(
    tmp_path: Path, labels: np.ndarray, expected: list
) -> None:
    path = npz(tmp_path / "targets.npz", inputs=np.ones((3, 4)), labels=labels)
    loaded = load_dataset(str(path), [None, 4]).labels
    assert loaded is not None and loaded.dtype == np.float64 and loaded.tolist() == expected


@pytest.mark.parametrize("column", [np.array([[0], [1], [1]]), np.array([[3.0], [0.0], [9.0]])], ids=["0/1", "digits"])
def test_a_column_of_classes_reads_as_one_class_per_sample(tmp_path: Path, column: np.ndarray) -> None:
    """``[N, 1]`` whole numbers are the ``[N]`` classes they hold (they became one regression target each)."""
    path = npz(tmp_path / "column.npz", inputs=np.ones((3, 4)), labels=column)
    loaded = load_dataset(str(path), [None, 4]).labels
    assert loaded is not None and loaded.dtype == np.int64 and loaded.tolist() == column[:, 0].tolist()


def test_whole_float_targets_beyond_zero_and_one_stay_targets(tmp_path: Path) -> None:
    """Counts or pixel coordinates stored as floats: a regression's targets, several per sample."""
    labels = np.array([[3.0, 12.0], [0.0, 7.0], [5.0, 2.0]])
    loaded = load_dataset(str(npz(tmp_path / "t.npz", inputs=np.ones((3, 4)), labels=labels)), [None, 4]).labels
    assert loaded is not None and loaded.dtype == np.float64 and loaded.tolist() == labels.tolist()


def test_one_hot_labels_are_classes(tmp_path: Path) -> None:
    """Keras' ``to_categorical`` rows: classes, not four targets per sample."""
    one_hot = np.eye(4, dtype=np.float32)[[2, 0, 3]]
    path = npz(tmp_path / "one_hot.npz", inputs=np.ones((3, 4)), labels=one_hot)
    loaded = load_dataset(str(path), [None, 4]).labels
    assert loaded is not None and loaded.dtype == np.int64 and loaded.tolist() == [2, 0, 3]


def test_dataset_batches_cover_every_sample_and_take_is_a_prefix() -> None:
    data = Dataset(np.arange(10, dtype=np.float32)[:, None], np.arange(10), "numbers")
    batches = list(data.batches(4))
    assert [len(inputs) for inputs, _ in batches] == [4, 4, 2]
    assert np.concatenate([labels for _, labels in batches]).tolist() == list(range(10))
    first = data.take(3)
    assert first.inputs[:, 0].tolist() == [0, 1, 2] and first.labels is not None and first.labels.tolist() == [0, 1, 2]


# ---------------------------------------------------------------- every bad input: one DataError line

Case = Callable[[Path], tuple[str, list[object], dict[str, object]]]


def _folder_of(tmp_path: Path, *files: tuple[str, bytes]) -> Path:
    root = tmp_path / "folder"
    root.mkdir()
    for name, content in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def _npy_named_npz(tmp_path: Path) -> Path:
    with (tmp_path / "d.npz").open("wb") as stream:
        np.save(stream, np.ones((2, 2)))
    return tmp_path / "d.npz"


def _png_bytes(tmp_path: Path) -> bytes:
    """A PNG of noise: its compressed pixels are long enough to cut in the middle."""
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "source.png")
    return (tmp_path / "source.png").read_bytes()


BAD_INPUTS: dict[str, tuple[Case, str]] = {
    "missing path": (lambda t: (str(t / "nothing_here"), [1, 3, 8, 8], {}), "no such file or folder"),
    "unknown spec": (lambda t: ("imagenet", [1, 3, 8, 8], {}), "unknown dataset 'imagenet'"),
    "empty folder": (lambda t: (str(_folder_of(t)), [1, 3, 8, 8], {}), "no images"),
    "no images": (lambda t: (str(_folder_of(t, ("a.txt", b"x"))), [1, 3, 8, 8], {}), "no images"),
    "empty classes": (
        lambda t: (str(_folder_of(t, ("cat/a.txt", b"x"), ("dog/b.csv", b"y"))), [1, 3, 8, 8], {}),
        "class subfolders hold no images",
    ),
    "mixed layout": (
        lambda t: (str(_folder_of(t, ("a.png", _png_bytes(t)), ("cat/b.png", _png_bytes(t)))), [1, 3, 8, 8], {}),
        "both at its top level and in subfolders",
    ),
    "unreadable image": (
        lambda t: (str(_folder_of(t, ("cat/a.png", b"not a png"))), [1, 3, 8, 8], {}),
        "a.png: cannot read the image",
    ),
    "truncated image": (
        lambda t: (str(_folder_of(t, ("cat/a.png", _png_bytes(t)[:1500]))), [1, 3, 8, 8], {}),
        "a.png: cannot read the image",
    ),
    "single image": (lambda t: (str(write_image(t / "one.png", (8, 8))), [1, 3, 8, 8], {}), "a single image"),
    "not a pickle": (
        lambda t: (str(_folder_of(t, ("test_batch", b"\x00garbage")) / "test_batch"), [1, 3, 32, 32], {}),
        "not a CIFAR-10 batch",
    ),
    "pickled list": (
        lambda t: (str(_folder_of(t, ("b", pickle.dumps([1, 2]))) / "b"), [1, 3, 32, 32], {}),
        "not a CIFAR-10 batch (a pickled list, not a dict)",
    ),
    "batch without labels": (
        lambda t: (str(_folder_of(t, ("b", pickle.dumps({b"data": b""}))) / "b"), [1, 3, 32, 32], {}),
        "no 'data' and 'labels' entries",
    ),
    "batch of wrong data": (
        lambda t: (
            str(_folder_of(t, ("b", pickle.dumps({b"data": np.zeros((2, 10)), b"labels": [0, 1]}))) / "b"),
            [1, 3, 32, 32],
            {},
        ),
        "not uint8 [N, 3072]",
    ),
    "batch with negative labels": (
        lambda t: (
            str(_folder_of(t, ("b", pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, -3]}))) / "b"),
            [1, 3, 32, 32],
            {},
        ),
        "labels must be classes, whole numbers 0 or more",
    ),
    "npz without inputs": (
        lambda t: (str(npz(t / "d.npz", x=np.ones((2, 4)), z=np.ones((2, 4)))), [1, 4], {}),
        "no array named 'inputs' (it has: x, z); data for the budget is an .npz of 'inputs' [samples, ...]",
    ),
    "npz of the wrong shape": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((4, 3, 4, 4)))), [None, 1, 8, 8], {}),
        "inputs have shape [4, 3, 4, 4] but the model takes [?, 1, 8, 8]",
    ),
    "npz of samples without a batch axis": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((4, 48, 105)))), ["frames", "features"], {}),
        "inputs have shape [4, 48, 105] but the model takes [?, ?]: each sample is the model's whole input (it has no "
        "batch axis to run data in batches along); without --data, seeded random inputs of --input-shape NAME:48,105 "
        "stand in for it",
    ),
    "npz of the wrong rank": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((4, 64)))), [1, 1, 8, 8], {}),
        "inputs have shape [4, 64] but the model takes [1, 1, 8, 8]",
    ),
    "label count": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((4, 2)), labels=np.arange(3))), [1, 2], {}),
        "4 inputs but 3 labels",
    ),
    "text labels": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((2, 2)), labels=np.array(["a", "b"]))), [1, 2], {}),
        "not numbers (--fidelity ignores them)",
    ),
    "integer labels below 0": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((2, 2)), labels=np.array([-1, 3]))), [1, 2], {}),
        "labels must be classes 0 or more, found -1 (a regression's targets are floats)",
    ),
    "per-pixel 0/1 masks": (  # classes, but not one per sample: no regression's targets (R² against masks)
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((2, 2)), labels=np.ones((2, 3, 3), np.float32))), [1, 2], {}),
        "labels of shape [2, 3, 3] hold whole numbers: classes, but not one per sample",
    ),
    "integer labels two per sample": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((2, 2)), labels=np.array([[1, 5], [2, 7]]))), [1, 2], {}),
        "a regression's targets are floats",
    ),
    "a pipe named .npz": (
        lambda t: (str(_pipe(t / "d.npz")), [1, 2], {}),
        "not a regular file (a pipe, a device or a folder)",  # reading it would wait for a writer forever
    ),
    "labels with NaN": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((2, 2)), labels=np.array([0.5, np.nan]))), [1, 2], {}),
        "labels hold NaN or infinity",
    ),
    "text inputs": (
        lambda t: (str(npz(t / "d.npz", inputs=np.array(["a", "b"]))), [1], {}),
        "not numbers",
    ),
    "no samples": (lambda t: (str(npz(t / "d.npz", inputs=np.ones((0, 2)))), [1, 2], {}), "holds no samples"),
    "npy named npz": (lambda t: (str(_npy_named_npz(t)), [1, 2], {}), "a single .npy array"),
    "damaged npz": (lambda t: (str(_folder_of(t, ("d.npz", b"PK\x03\x04broken")) / "d.npz"), [1, 2], {}), ".npz"),
    "mean with npz": (
        lambda t: (str(npz(t / "d.npz", inputs=np.ones((2, 2)))), [1, 2], {"mean": [0.5]}),
        "mean/std apply to images only",
    ),
    "images for a flat input": (
        lambda t: ("digits", [1, 100], {}),
        "must be NCHW or NHWC (4 dims), or [N, 64] for images flattened, but it is [1, 100]",
    ),
    "two channels": (lambda t: ("digits", [1, 2, 8, 8], {}), "1 or 3 channels, but the model input has 2"),
    "mean of wrong length": (lambda t: ("digits", [1, 3, 8, 8], {"mean": [0.1, 0.2]}), "mean needs 1 or 3"),
    "zero std": (lambda t: ("digits", [1, 1, 8, 8], {"std": [0.0]}), "std values must be positive"),
    "zero limit": (lambda t: ("digits", [1, 1, 8, 8], {"limit": 0}), "limit must be at least 1"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_one_data_error_line(tmp_path: Path, case: str) -> None:
    build, problem = BAD_INPUTS[case]
    spec, input_shape, options = build(tmp_path)
    with pytest.raises(DataError) as caught:
        load_dataset(spec, input_shape, **options)
    message = str(caught.value)
    assert problem in message
    assert "\n" not in message
    if spec != "imagenet":
        assert spec in message, "the message names the data it is about"


def test_images_for_a_dynamic_size_take_the_input_shape_asked_for(tmp_path: Path) -> None:
    """A detector with dynamic height and width: --input-shape says the size the images are resized to;
    without it, images of one size keep their own."""
    import onnx
    from onnx import TensorProto, helper

    from onnxsat.data.model_input import evaluation_data
    from onnxsat.inputs import InputSpec

    graph = helper.make_graph(
        [helper.make_node("Relu", ["images"], ["y"])],
        "dynamic_size",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    for name in ("a", "b", "c"):
        write_image(tmp_path / "photos" / f"{name}.png", (40, 30))
    folder = str(tmp_path / "photos")
    sized = evaluation_data(model, folder, InputSpec(shapes={"images": [1, 3, 16, 24]}))
    assert sized is not None and sized.inputs.shape == (3, 3, 16, 24)
    own = evaluation_data(model, folder, InputSpec())
    assert own is not None and own.inputs.shape == (3, 3, 30, 40)


def test_labels_left_unread_may_hold_anything(tmp_path: Path) -> None:
    """``--fidelity`` ignores labels: a scikit-learn classifier's string classes must not stop it."""
    path = npz(tmp_path / "d.npz", inputs=np.ones((2, 2)), labels=np.array(["zero", "one"]))
    dataset = load_dataset(str(path), [None, 2], labels=False)
    assert dataset.labels is None and len(dataset) == 2


def test_rows_of_zeros_and_ones_are_yes_no_labels_and_one_hot_rows_classes(tmp_path: Path) -> None:
    tags = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]])
    data = load_dataset(str(npz(tmp_path / "tags.npz", inputs=np.ones((4, 2)), labels=tags)), [None, 2])
    assert data.labels is not None and data.labels.dtype == bool
    np.testing.assert_array_equal(data.labels, tags.astype(bool))
    one_hot = np.eye(3, dtype=np.float32)[[2, 0, 1, 2]]  # one 1 per row: Keras' to_categorical
    data = load_dataset(str(npz(tmp_path / "classes.npz", inputs=np.ones((4, 2)), labels=one_hot)), [None, 2])
    assert data.labels is not None and data.labels.tolist() == [2, 0, 1, 2]
