"""Where the samples that measure a model's accuracy come from: digits, image folders, CIFAR-10, ``.npz``.

Pruning under an accuracy budget needs real inputs, shaped exactly as the model takes them. Every
source ends as float32 inputs ``[N, *input_shape[1:]]`` and, when the source has them, int64 labels.
Image sources are fitted to the model's NCHW input: converted to its channel count (grayscale or
RGB), resized with Pillow's bilinear filter (computed in float, so no rounding to 8 bits), scaled to
[0, 1] and normalized per channel by ``mean``/``std``. A ``.npz`` is taken as the user prepared it.

Order is deterministic, so two runs measure the same samples, and ``limit`` keeps the first samples
while reading only the files it needs. Every problem is one :class:`~onnxsat.errors.DataError` line
naming the path and what is wrong with it.

scikit-learn (the digits) and Pillow (image folders) are the ``data`` extra, imported only when a
source needs them; a missing one is one :class:`~onnxsat.errors.MissingExtraError` line naming the
extra. ``.npz`` files and CIFAR-10 batches need numpy alone.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, zip_longest
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import numpy as np

from onnxsat.errors import DataError
from onnxsat.extras import require

DIGITS = "digits"
DIGITS_TEST = "digits-test"
"""The 397 digits the bundled digits CNN never trained on (the test part of :data:`DIGITS_SPLIT`)."""
DIGITS_TRAIN = "digits-train"
"""The 1,400 it trained on: calibration data (HRank, reconstruction) kept apart from the evaluation."""
"""The spec naming scikit-learn's bundled digits (1,797 8x8 grayscale images of 0-9, values 0-16)."""

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")

CIFAR_BATCHES = ("test_batch", *(f"data_batch_{index}" for index in range(1, 6)))
"""Batch files read from a CIFAR-10 folder, in this order: the test batch first, because held-out
images are what an accuracy budget should be measured on (and a ``limit`` then takes only those)."""

_CIFAR_SIDE = 32
_DIGITS_MAX = 16.0
_DIGITS_SIZE = (8, 8)
"""The digits' native height and width: a model taking ``[N, 64]`` gets them flattened."""
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)
"""ITU-R 601-2 luma weights: what Pillow's ``convert("L")`` uses, so CIFAR and folder images agree."""

_CIFAR_PICKLE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
    }
)
"""All a CIFAR batch pickle may import (a numpy array, and bytes as Python 3 pickles them): a pickle
can run any function it names, and a data file has no business naming any other."""


@dataclass(frozen=True)
class Split:
    """A fixed train/test split of the 1,797 digits: a permutation from ``shuffle_seed``, whose first
    ``train_count`` indices train the model and the rest are held out for measuring it."""

    shuffle_seed: int
    train_count: int

    def indices(self, total: int) -> tuple[np.ndarray, np.ndarray]:
        """(train indices, test indices) into a dataset of ``total`` samples in its own order."""
        order = np.random.default_rng(self.shuffle_seed).permutation(total)
        return order[: self.train_count], order[self.train_count :]


DIGITS_SPLIT = Split(shuffle_seed=0, train_count=1400)
"""The split of the bundled digits CNN (``digits-train`` and ``digits-test``): 1,400 training digits, 397
held out. Independent of the training seed, so every retrain is measured on the same held-out digits."""


@dataclass(frozen=True)
class Dataset:
    """Model-ready samples: ``inputs`` ``[N, ...]`` (float32, or the integers a ``.npz`` holds), ``labels``
    int64 classes ``[N]``, float64 regression targets ``[N, ...]``, or None.

    With ``streams``, the data is sequences for a model that keeps state: ``inputs`` ``[S, T, ...]`` are S
    streams of T steps (each step one sample, fed as a batch of one), ``lengths`` ``[S]`` how many steps
    of each are real (all T when None), ``labels`` ``[S, T]`` or None.
    """

    inputs: np.ndarray
    labels: np.ndarray | None
    name: str
    streams: bool = False
    lengths: np.ndarray | None = None
    companions: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Per-sample values of the model's other inputs (a text model's attention_mask beside its input_ids),
    rows aligned with ``inputs`` and fed with them, batch by batch (not with streams)."""
    pixels: bool = False
    """The inputs are image pixels scaled to [0, 1] with no mean or std taken off: a model whose input
    holds integer pixels (uint8, preprocessing inside the graph) is fed them back as 0-255."""

    def __post_init__(self) -> None:
        if self.companions and self.streams:
            raise DataError("inputs given per sample beside streams of data are not supported")
        for name, values in self.companions.items():
            if len(values) != len(self.inputs):
                raise DataError(
                    f"input {name!r} has {len(values)} rows for {len(self.inputs)} samples of data: "
                    "give one row per sample, or one row for all"
                )

    def __len__(self) -> int:
        return len(self.inputs)

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The companions' rows of samples ``start`` to ``stop``: what is fed beside those samples."""
        return {name: values[start:stop] for name, values in self.companions.items()}

    def first(self, size: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The first ``size`` samples and their companions' rows, repeated from the start to fill ``size``
        when the data has fewer (one run's feeds: a latency probe, a check)."""
        fill = lambda values: np.resize(values[:size], (size, *values.shape[1:]))  # noqa: E731
        return fill(self.inputs), {name: fill(values) for name, values in self.companions.items()}

    def feed_batches(self, size: int) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]]:
        """``batches`` with the companions' rows of each batch: (inputs, companions, labels)."""
        for index, (inputs, labels) in enumerate(self.batches(size)):
            yield inputs, self.rows(index * size, index * size + len(inputs)), labels

    def batches(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """Consecutive batches of ``size`` samples in dataset order; the last one may be shorter. Streams
        give their steps in order, stream after stream."""
        if size < 1:
            raise ValueError(f"batch size must be at least 1, got {size}")
        if self.streams:
            steps = np.concatenate(
                [stream[:length] for stream, length in zip(self.inputs, self.stream_lengths, strict=True)]
            )
            labels = self.step_labels()
            for start in range(0, len(steps), size):
                yield steps[start : start + size], None if labels is None else labels[start : start + size]
            return
        for start in range(0, len(self), size):
            labels = None if self.labels is None else self.labels[start : start + size]
            yield self.inputs[start : start + size], labels

    @property
    def stream_lengths(self) -> np.ndarray:
        """Steps per stream (streams only)."""
        if self.lengths is not None:
            return self.lengths
        return np.full(len(self.inputs), self.inputs.shape[1] if self.inputs.ndim > 1 else 0, dtype=np.int64)

    @property
    def samples(self) -> int:
        """Samples scored: one per sample, or one per real step of every stream."""
        return int(self.stream_lengths.sum()) if self.streams else len(self)

    def step_labels(self) -> np.ndarray | None:
        """Labels in the order outputs are scored (streams: each stream's real steps, in turn)."""
        if self.labels is None or not self.streams:
            return self.labels
        return np.concatenate([row[:length] for row, length in zip(self.labels, self.stream_lengths, strict=True)])

    def take(self, n: int) -> Dataset:
        """The first ``n`` samples (or streams): a deterministic subset, e.g. a quick calibration set."""
        return self.subset(np.arange(min(n, len(self))))

    def subset(self, indices: np.ndarray) -> Dataset:
        """The samples (or streams) at ``indices``, in that order."""
        labels = None if self.labels is None else self.labels[indices]
        lengths = None if self.lengths is None else self.lengths[indices]
        companions = {name: values[indices] for name, values in self.companions.items()}
        return replace(self, inputs=self.inputs[indices], labels=labels, lengths=lengths, companions=companions)

    def split(self, held_out: float, seed: int = 0) -> tuple[Dataset, Dataset | None]:
        """(search part, held-out part): a seeded random ``held_out`` fraction of the samples (streams)
        set apart, each part in dataset order; no held-out part when the fraction is 0 or the data has
        fewer than two samples (streams)."""
        count = len(self)
        kept = min(count - 1, max(1, round(count * held_out))) if held_out > 0 and count >= 2 else 0
        if not kept:
            return self, None
        chosen = np.zeros(count, dtype=bool)
        chosen[np.random.default_rng(seed).permutation(count)[:kept]] = True
        search, rest = self.subset(np.flatnonzero(~chosen)), self.subset(np.flatnonzero(chosen))
        return replace(search, name=f"{self.name} (search part)"), replace(rest, name=f"{self.name} (held out)")


@dataclass(frozen=True)
class _ImageLayout:
    """What image sources must produce; height/width None where the model's dim is dynamic (kept as is)."""

    channels: int
    height: int | None
    width: int | None
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    channels_last: bool = False
    """NHWC, as TensorFlow and Keras models (and their tf2onnx exports) take images."""
    flat: bool = False
    """``[N, C*H*W]``: each image flattened, as scikit-learn models take the digits."""

    @property
    def plain(self) -> bool:
        """No mean or std: the images stay pixels in [0, 1]."""
        return self.mean is None and self.std is None


def load_dataset(
    spec: str,
    input_shape: Sequence[int | str | None],
    *,
    limit: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    streams: bool = False,
    labels: bool = True,
    carried: Collection[str] = (),
) -> Dataset:
    """Load ``spec`` ("digits" or a path) fitted to a model input of ``input_shape`` (batch dim first).

    A path is a folder of images (in class subfolders, labelled by sorted folder name, or all at the
    top level, unlabelled), a CIFAR-10 python-batches folder or one batch file, or a ``.npz`` holding
    ``inputs`` (or one array of any name) and optionally ``labels``. Dims that are None, a name, or <= 0 are dynamic.

    ``streams``: sequences for a model that keeps state, from a ``.npz`` only: ``inputs`` ``[S, T, ...]``
    (each step one sample of the model's input), optional ``lengths`` ``[S]`` and ``labels`` ``[S, T]``;
    ``limit`` then counts streams. ``labels`` False: a ``.npz``'s labels are not read (``--fidelity`` ignores
    them, whatever they hold: a scikit-learn classifier's string classes). ``carried``: arrays of a ``.npz``
    named after other inputs of the model, read as their rows (see :func:`carried_rows`).
    """
    if limit is not None and limit < 1:
        raise DataError(f"{spec}: the sample limit must be at least 1, got {limit}")
    if streams:
        dataset = _npz_streams(Path(spec), input_shape, limit)
    else:
        dataset = _load(spec, input_shape, limit, mean, std, labels, carried)
    if len(dataset) == 0:
        raise DataError(f"{spec}: holds no samples")
    return dataset


def require_shape(shape: Sequence[int], input_shape: Sequence[int | str | None], where: str) -> None:
    """Samples of ``shape`` (batch first) must fit the model input: same rank, same fixed non-batch dims.

    The batch dim is not compared: a model whose batch is fixed to 1 is still fed a whole dataset.
    """
    model_dims = [_fixed(dim) for dim in input_shape]
    fits = len(shape) == len(model_dims) and all(
        want is None or have == want for have, want in zip(shape[1:], model_dims[1:], strict=True)
    )
    if not fits:
        said = f"{where}: inputs have shape {list(shape)} but the model takes {_shape_text(input_shape)}"
        unbatched = len(shape) == len(model_dims) + 1 and all(
            want is None or have == want for have, want in zip(shape[1:], model_dims, strict=True)
        )
        if unbatched:  # madmom's nets take [frames, features], one clip per run
            sample = ",".join(str(size) for size in shape[1:])
            said += (
                f": each sample is the model's whole input (it has no batch axis to run data in batches along); "
                f"without --data, seeded random inputs of --input-shape NAME:{sample} stand in for it"
            )
        raise DataError(said)


RANDOM = "random"
"""The data spec of seeded random samples (``--data random``), which the budgeted passes take."""


def check_data_spec(spec: str, folder: Path | None = None) -> None:
    """Refuse, before any work, data that is no built-in set and no file or folder (``folder``: where a
    relative path is also looked for, a pipeline file's own)."""
    path = Path(spec).expanduser()
    if spec in (DIGITS, DIGITS_TEST, DIGITS_TRAIN, RANDOM) or path.exists():
        return
    if folder is not None and (folder / path).exists():
        return
    if "/" in spec or "\\" in spec or path.suffix:
        raise DataError(f"{path}: no such file or folder")
    raise DataError(
        f"unknown dataset {spec!r}: give {DIGITS!r}, {DIGITS_TEST!r}, {DIGITS_TRAIN!r} or a path to an image "
        "folder, a CIFAR-10 batch folder or file, or a .npz"
    )


def _load(
    spec: str,
    input_shape: Sequence[int | str | None],
    limit: int | None,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    labels: bool = True,
    carried: Collection[str] = (),
) -> Dataset:
    """Dispatch on the spec: the digits name, then by what the path is."""
    if spec in (DIGITS, DIGITS_TEST, DIGITS_TRAIN):
        layout = _layout(DIGITS, input_shape, mean, std, native_channels=1, native_size=_DIGITS_SIZE)
        digits = _digits(layout, limit if spec == DIGITS else None)
        if spec == DIGITS:
            return digits
        train, test = DIGITS_SPLIT.indices(len(digits))
        part = (test if spec == DIGITS_TEST else train)[:limit]
        return replace(digits.subset(part), name=spec + digits.name.removeprefix(DIGITS))
    check_data_spec(spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        batch_files = [path / name for name in CIFAR_BATCHES if (path / name).is_file()]
        if batch_files:
            return _cifar(batch_files, f"cifar10:{path}", _layout(path, input_shape, mean, std), limit)
        return _image_folder(path, _layout(path, input_shape, mean, std), limit)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        raise DataError(f"{path}: a single image; give the folder that holds the images")
    if path.suffix.lower() == ".npz":
        if mean is not None or std is not None:
            raise DataError(f"{path}: mean/std apply to images only; a .npz's inputs are used as stored")
        return _npz(path, input_shape, limit, labels, carried)
    return _cifar([path], f"cifar10:{path}", _layout(path, input_shape, mean, std), limit)


def _layout(
    source: str | Path,
    input_shape: Sequence[int | str | None],
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    native_channels: int = 3,
    native_size: tuple[int, int] | None = None,
) -> _ImageLayout:
    """Read channels and size off an NCHW model input, or an NHWC one (its last dim 1 or 3, its second
    not); a dynamic channel dim keeps the source's ``native_channels``. A source whose images all have
    one ``native_size`` also fits ``[N, features]`` with as many features as an image has values,
    flattened. Check mean/std are usable for that many channels."""
    flat_size = native_channels * native_size[0] * native_size[1] if native_size is not None else None
    flat = len(input_shape) == 2 and flat_size is not None and _fixed(input_shape[1]) == flat_size
    if flat:
        assert native_size is not None
        input_shape = [input_shape[0], native_channels, *native_size]
    if len(input_shape) != 4:
        flattened = f", or [N, {flat_size}] for images flattened" if flat_size is not None else ""
        raise DataError(
            f"{source}: holds images, so the model input must be NCHW or NHWC (4 dims){flattened}, but it is "
            f"{_shape_text(input_shape)}; give a .npz for other inputs"
        )
    model_channels, height, width = (_fixed(dim) for dim in input_shape[1:])
    last = _fixed(input_shape[3])
    channels_last = model_channels not in (1, 3) and last in (1, 3)
    if channels_last:
        height, width, model_channels = model_channels, height, last
    channels = model_channels or native_channels
    if channels not in (1, 3):
        raise DataError(f"{source}: images have 1 or 3 channels, but the model input has {channels}")
    for label, values in (("mean", mean), ("std", std)):
        if values is not None and (len(values) not in (1, channels) or not np.all(np.isfinite(values))):
            raise DataError(f"{source}: {label} needs 1 or {channels} finite values, got {list(values)}")
    if std is not None and min(std) <= 0:
        raise DataError(f"{source}: std values must be positive, got {list(std)}")
    return _ImageLayout(
        channels,
        height,
        width,
        None if mean is None else tuple(float(value) for value in mean),
        None if std is None else tuple(float(value) for value in std),
        channels_last,
        flat,
    )


def _digits(layout: _ImageLayout, limit: int | None) -> Dataset:
    """scikit-learn's bundled digits, scaled from 0-16 to [0, 1]."""
    bunch = require("sklearn.datasets", "scikit-learn's digits").load_digits()
    images = (bunch.images[:limit] / _DIGITS_MAX).astype(np.float32)[:, None]
    fitted, changes = _fit(images, layout)
    labels = bunch.target[:limit].astype(np.int64)
    return Dataset(_arranged(fitted, layout), labels, _named(DIGITS, changes), pixels=layout.plain)


def _cifar(files: list[Path], name: str, layout: _ImageLayout, limit: int | None) -> Dataset:
    """CIFAR-10 batches in the given order, reading no more of them than ``limit`` needs."""
    images: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for path in files:
        batch_images, batch_labels = _read_cifar_batch(path)
        images.append(batch_images)
        labels.append(batch_labels)
        if limit is not None and sum(map(len, labels)) >= limit:
            break
    pixels = np.concatenate(images)[:limit].astype(np.float32) / 255.0
    fitted, changes = _fit(pixels, layout)
    labels_kept = np.concatenate(labels)[:limit]
    return Dataset(_arranged(fitted, layout), labels_kept, _named(name, changes), pixels=layout.plain)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch pickle: uint8 images [N, 3, 32, 32] and int64 labels."""
    try:
        with path.open("rb") as stream:
            batch = _CifarUnpickler(stream, encoding="bytes").load()
    except OSError as error:
        raise DataError(f"{path}: cannot read it ({error.strerror or error})") from None
    except Exception as error:  # unpickling arbitrary bytes fails in many ways; all mean "not a batch"
        reason = " ".join(str(error).split()) or type(error).__name__
        raise DataError(f"{path}: not a CIFAR-10 batch ({reason})") from None
    if not isinstance(batch, dict):
        raise DataError(f"{path}: not a CIFAR-10 batch (a pickled {type(batch).__name__}, not a dict)")
    data = batch.get(b"data", batch.get("data"))
    raw_labels = batch.get(b"labels", batch.get("labels"))
    if data is None or raw_labels is None:
        raise DataError(f"{path}: not a CIFAR-10 batch (no 'data' and 'labels' entries)")
    side = _CIFAR_SIDE
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * side**2:
        what = f"{data.dtype} {list(data.shape)}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{path}: not a CIFAR-10 batch ('data' is {what}, not uint8 [N, 3072])")
    labels = _checked_labels(raw_labels, len(data), str(path), targets=False)
    return data.reshape(len(data), 3, side, side), labels


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that refuses every import but the few a CIFAR batch needs."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in _CIFAR_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"it asks to load {module}.{name}, which a data file never needs")
        return super().find_class(module, name)


def _image_folder(root: Path, layout: _ImageLayout, limit: int | None) -> Dataset:
    """Images in class subfolders (labelled) or at the top level (unlabelled); only the first ``limit`` are read."""
    files, labels = _folder_files(root)
    files = files[:limit]
    mode = "L" if layout.channels == 1 else "RGB"
    _pillow()  # before any file is read: a missing Pillow is one line naming the extra
    images = (_read_image(path, mode) for path in files)
    first = next(images)
    size = (layout.height or first.shape[1], layout.width or first.shape[2])  # a dynamic dim: the first image's
    sizes: set[tuple[int, int]] = set()

    def resized(image: np.ndarray) -> np.ndarray:
        sizes.add(image.shape[1:])
        return _resize(image, size)

    inputs = _normalize(np.stack([resized(first), *(resized(image) for image in images)]), layout)
    labels = None if labels is None else labels[:limit]
    fitted = _resized_text(sizes, size)
    return Dataset(_arranged(inputs, layout), labels, _named(f"folder:{root}", fitted), pixels=layout.plain)


def _folder_files(root: Path) -> tuple[list[Path], np.ndarray | None]:
    """The image files in reading order, and their labels (None for a flat folder).

    Classes are interleaved (first image of every class, then the second, ...), sorted by file name
    within a class: a ``limit`` then keeps every class represented instead of only the first ones.
    """
    entries = sorted(entry for entry in root.iterdir() if not entry.name.startswith("."))
    class_dirs = [entry for entry in entries if entry.is_dir()]
    top_images = [entry for entry in entries if _is_image(entry)]
    if class_dirs and top_images:
        raise DataError(f"{root}: has images both at its top level and in subfolders; use one layout")
    if not class_dirs:
        if not top_images:
            raise DataError(f"{root}: no images ({', '.join(IMAGE_SUFFIXES)}) and no class subfolders")
        return top_images, None
    per_class = [
        [(path, label) for path in sorted(folder.iterdir()) if _is_image(path)]
        for label, folder in enumerate(class_dirs)
    ]
    ordered = [item for item in chain.from_iterable(zip_longest(*per_class)) if item is not None]
    if not ordered:
        raise DataError(f"{root}: its class subfolders hold no images ({', '.join(IMAGE_SUFFIXES)})")
    return [path for path, _ in ordered], np.array([label for _, label in ordered], dtype=np.int64)


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and path.is_file() and not path.name.startswith(".")


def _pillow(purpose: str = "image folders") -> ModuleType:
    """Pillow's ``PIL.Image`` (the ``data`` extra); ``purpose`` names what needs it in the missing-extra line."""
    return require("PIL.Image", purpose)


def _read_image(path: Path, mode: str) -> np.ndarray:
    """One image as float32 [C, H, W] in [0, 1], converted by Pillow to ``mode`` ("L" or "RGB")."""
    Image = _pillow()
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert(mode), dtype=np.float32) / 255.0
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        reason = " ".join(str(error).replace(f" '{path}'", "").split()) or type(error).__name__
        raise DataError(f"{path}: cannot read the image ({reason})") from None
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


def _fit(images: np.ndarray, layout: _ImageLayout) -> tuple[np.ndarray, str]:
    """Float images [N, C, H, W] in [0, 1] -> the model's channels, size and normalization, and what was
    changed to fit (empty when nothing was): a model trained on other resampling scores differently, so
    the reports say so."""
    changes = []
    if images.shape[1] == 3 and layout.channels == 1:
        images = np.tensordot(images, _LUMA, axes=([1], [0]))[:, None].astype(np.float32)
        changes.append("RGB made grayscale")
    elif images.shape[1] == 1 and layout.channels == 3:
        images = np.repeat(images, 3, axis=1)
        changes.append("grayscale repeated to 3 channels")
    size = (layout.height or images.shape[2], layout.width or images.shape[3])
    if size != images.shape[2:]:
        changes.append(_resized_text({images.shape[2:]}, size))
        images = np.stack([_resize(image, size) for image in images])
    return _normalize(images, layout), ", ".join(changes)


def _resized_text(sizes: set[tuple[int, ...]], size: tuple[int, int]) -> str:
    """How images of ``sizes`` (height, width) were brought to ``size``; empty when none needed it."""
    changed = sorted(other for other in sizes if other != size)
    if len(changed) > 1:
        return f"resized bilinearly to {_size_text(size)} from {len(changed)} other sizes"
    return f"resized bilinearly from {_size_text(changed[0])} to {_size_text(size)}" if changed else ""


def _size_text(size: Sequence[int]) -> str:
    return f"{size[0]}x{size[1]}"


def _named(name: str, fitted: str) -> str:
    """A source's name with how its images were fitted to the model, as every report shows it."""
    return f"{name} ({fitted})" if fitted else name


def _arranged(images: np.ndarray, layout: _ImageLayout) -> np.ndarray:
    """Images [N, C, H, W] in the model's layout: as they are, [N, H, W, C] for a channels-last input, or
    [N, C*H*W] for a flat one."""
    if layout.flat:
        return np.ascontiguousarray(images.reshape(len(images), -1))
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1)) if layout.channels_last else images


def _resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """One float image [C, H, W] resized bilinearly to ``size`` (height, width), channel by channel."""
    if image.shape[1:] == size:
        return image
    height, width = size
    Image = _pillow("resizing images to the model's input")
    channels = [
        np.asarray(Image.fromarray(channel, mode="F").resize((width, height), Image.Resampling.BILINEAR))
        for channel in image
    ]
    return np.stack(channels).astype(np.float32)


def _normalize(images: np.ndarray, layout: _ImageLayout) -> np.ndarray:
    """``(images - mean) / std`` per channel (or one value for all channels)."""
    if layout.mean is not None:
        images = images - np.asarray(layout.mean, dtype=np.float32).reshape(1, -1, 1, 1)
    if layout.std is not None:
        images = images / np.asarray(layout.std, dtype=np.float32).reshape(1, -1, 1, 1)
    return np.ascontiguousarray(images, dtype=np.float32)


def _npz(
    path: Path,
    input_shape: Sequence[int | str | None],
    limit: int | None,
    labels: bool = True,
    carried: Collection[str] = (),
) -> Dataset:
    """``inputs`` (floats as float32, integers as stored: token ids, bytes; checked against the model's
    shape) and optional ``labels`` (left unread unless ``labels``)."""
    inputs, raw_labels, companions = _read_npz(path, carried)
    raw_labels = raw_labels if labels else None
    inputs = _numbers(inputs, path)
    require_shape(inputs.shape, input_shape, str(path))
    checked = None if raw_labels is None else _checked_labels(raw_labels, len(inputs), str(path))
    companions = {name: values[:limit] for name, values in companions.items()}
    return Dataset(inputs[:limit], None if checked is None else checked[:limit], f"npz:{path}", companions=companions)


COMPANION_PREFIX = "companion:"
"""In a ``.npz`` of samples, ``companion:NAME`` holds input NAME's row for each sample (``Dataset.companions``):
how a dataset with them is written for another process (compress's workers) and read back."""


def companions_in(loaded: np.lib.npyio.NpzFile) -> dict[str, np.ndarray]:
    """The ``companion:NAME`` arrays of an open ``.npz``, by input name."""
    return {name: loaded[f"{COMPANION_PREFIX}{name}"] for name in _companion_names(loaded)}


def _companion_names(loaded: np.lib.npyio.NpzFile) -> list[str]:
    """The input names of an open ``.npz``'s ``companion:NAME`` entries, from its index (no array is read)."""
    return [key[len(COMPANION_PREFIX) :] for key in loaded.files if key.startswith(COMPANION_PREFIX)]


Read = TypeVar("Read")


def carried_rows(spec: str | None, inputs: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """The ``companion:NAME`` arrays of a ``.npz`` data ``spec``, by input name, and in one without ``inputs``
    the arrays named after several of the model's ``inputs`` (in its order), but the data input's
    (:func:`_data_array`): ``np.savez(path, x=images, widths=widths)`` for a text recognizer fed both. None for
    other data, and for a file that cannot be read: loading it says why."""
    return _from_archive(spec, lambda loaded: {**_named_rows(loaded, inputs), **companions_in(loaded)}, {})


def carried_names(spec: str | None, inputs: Sequence[str] = ()) -> list[str]:
    """The inputs a ``.npz`` data ``spec`` carries rows for (:func:`carried_rows`), the ``companion:NAME`` ones read
    from its index alone."""
    return _from_archive(spec, lambda loaded: [*_named_rows(loaded, inputs), *_companion_names(loaded)], [])


def _named_rows(loaded: np.lib.npyio.NpzFile, inputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays named after the model's ``inputs`` but the data input's, when there are several and no
    ``inputs`` array says which the samples are."""
    named = [name for name in inputs if name in loaded.files]
    if "inputs" in loaded.files or len(named) < 2:
        return {}
    arrays = {name: loaded[name] for name in named}
    data = _data_array(arrays)
    return {name: values for name, values in arrays.items() if name != data}


def _data_array(arrays: Mapping[str, np.ndarray]) -> str:
    """Which of several arrays of inputs' rows is the samples, fitted to the model as data is: a float one
    before integers (images beside their widths, features beside ids), then the most values per sample, then
    the first."""
    return max(
        arrays,
        key=lambda name: (
            np.issubdtype(arrays[name].dtype, np.floating),
            arrays[name][:1].size,
            -list(arrays).index(name),
        ),
    )


def _from_archive(spec: str | None, read: Callable[[np.lib.npyio.NpzFile], Read], empty: Read) -> Read:
    """``read`` of the open ``.npz`` ``spec``, or ``empty`` for other data and for a file that cannot be read."""
    if spec is None or Path(spec).suffix.lower() != ".npz" or not Path(spec).is_file():
        return empty
    try:
        with np.load(spec, allow_pickle=False) as loaded:
            return read(loaded) if isinstance(loaded, np.lib.npyio.NpzFile) else empty
    except Exception:  # numpy and zipfile raise several types for a damaged or foreign file
        return empty


def _numbers(inputs: np.ndarray, path: Path) -> np.ndarray:
    if np.issubdtype(inputs.dtype, np.integer):
        return inputs
    if np.issubdtype(inputs.dtype, np.floating):
        return inputs.astype(np.float32)
    raise DataError(f"{path}: 'inputs' holds {inputs.dtype} values, not numbers")


def _npz_streams(path: Path, input_shape: Sequence[int | str | None], limit: int | None) -> Dataset:
    """Streams from a ``.npz``: ``inputs`` ``[S, T, ...]``, optional ``lengths`` ``[S]``, ``labels`` ``[S, T]``."""
    if not path.is_file():
        raise DataError(f"{path}: streams for a stateful model come from a .npz file, and there is none there")
    inputs, raw_labels, _ = _read_npz(path, ())
    inputs = _numbers(inputs, path)
    if inputs.ndim < 2:
        raise DataError(f"{path}: streams need 'inputs' of shape [streams, steps, ...], got {list(inputs.shape)}")
    require_shape(inputs.shape[1:], input_shape, f"{path} (one stream)")
    streams, steps = inputs.shape[:2]
    with np.load(path, allow_pickle=False) as loaded:
        raw_lengths = loaded["lengths"] if "lengths" in loaded.files else None
    lengths = None
    if raw_lengths is not None:
        lengths = np.asarray(raw_lengths)
        if lengths.shape != (streams,) or not np.issubdtype(lengths.dtype, np.integer):
            raise DataError(f"{path}: 'lengths' must be {streams} whole numbers, one per stream")
        if lengths.min() < 1 or lengths.max() > steps:
            raise DataError(f"{path}: 'lengths' must be between 1 and {steps} steps")
        lengths = lengths.astype(np.int64)[:limit]
    labels = None
    if raw_labels is not None:
        labels = np.asarray(raw_labels)
        if labels.shape != (streams, steps):
            raise DataError(
                f"{path}: stream labels must be [streams, steps] = [{streams}, {steps}], got {list(labels.shape)}"
            )
        labels = _checked_labels(labels.reshape(-1), streams * steps, str(path)).reshape(streams, steps)[:limit]
    return Dataset(inputs[:limit], labels, f"npz:{path} ({min(streams, limit or streams)} streams)", True, lengths)


def _read_npz(path: Path, carried: Collection[str]) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
    """The ``inputs``, ``labels`` (None if absent) and companion arrays of a .npz archive (the ``carried`` ones,
    named after other inputs, among them); pickled objects are refused."""
    if path.exists() and not path.is_file():  # a pipe would block the read until something writes to it
        raise DataError(f"{path}: not a regular file (a pipe, a device or a folder); give the .npz file itself")
    try:
        with open(path, "rb") as handle:
            magic = handle.read(6)
    except OSError as error:
        raise _unreadable_npz(path, error) from None
    if not magic.startswith((b"PK", b"\x93NUMPY")):  # numpy then guesses "pickled data", and advises unpickling
        raise DataError(f"{path}: not a .npz archive (numpy.savez writes one: a zip of 'inputs' and 'labels')")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:  # numpy and zipfile raise several types for a damaged or foreign file
        raise _unreadable_npz(path, error) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: a single .npy array, not a .npz archive of 'inputs' and 'labels'")
    with loaded:
        key = "inputs" if "inputs" in loaded.files else _lone_array(loaded, carried)
        if key is None:
            raise DataError(
                f"{path}: no array named 'inputs' (it has: {', '.join(loaded.files) or 'none'}); data for the budget "
                f"is an .npz of 'inputs' [samples, ...], optionally 'labels' [samples] and, for the model's other "
                f"inputs, 'companion:NAME' (feeds named by input are --inputs)"
            )
        try:
            labels = loaded["labels"] if "labels" in loaded.files else None
            named = {name: loaded[name] for name in carried if name in loaded.files and name != key}
            return loaded[key], labels, {**named, **companions_in(loaded)}
        except Exception as error:  # a damaged member, or one holding pickled objects
            raise _unreadable_npz(path, error) from None


def _lone_array(loaded: np.lib.npyio.NpzFile, carried: Collection[str]) -> str | None:
    """The name of the archive's one array besides ``labels``, ``lengths`` and companions (``carried`` too), read
    as its ``inputs`` (an array named after the model's input, as ``np.savez(path, input=x)`` writes), or None."""
    names = [
        name
        for name in loaded.files
        if name not in ("labels", "lengths", *carried) and not name.startswith(COMPANION_PREFIX)
    ]
    return names[0] if len(names) == 1 else None


def _unreadable_npz(path: Path, error: Exception) -> DataError:
    reason = " ".join(str(error).split()) or type(error).__name__
    return DataError(f"{path}: not a readable .npz ({reason})")


def _checked_labels(values: object, count: int, where: str, targets: bool = True) -> np.ndarray:
    """Labels, one entry per sample: int64 classes when they are whole numbers 0 or more (or one-hot rows, or a
    column ``[N, 1]``), boolean rows ``[N, K]`` when each sample has several labels of 0 and 1 (multi-hot rows:
    a multi-label classifier's tags, a watermark's bits), else float64 targets (a regression's, stored as
    floats: not whole, negative, or several values per sample), which a source of classes only (``targets``
    False: a CIFAR batch) refuses. Integers below 0 are refused (-1 marks "no label" in many datasets, and is no
    regression target), and so are whole numbers of other shapes stored as integers or all 0 and 1 (masks)."""
    try:
        labels = np.asarray(values)
    except ValueError:
        raise DataError(f"{where}: labels are not an array of numbers") from None
    if not (np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)):
        raise DataError(f"{where}: labels hold {labels.dtype} values, not numbers (--fidelity ignores them)")
    if labels.ndim == 0:
        raise DataError(f"{where}: labels must be one entry per sample, got a single number")
    if len(labels) != count:
        raise DataError(f"{where}: {count} inputs but {len(labels)} labels")
    if not np.all(np.isfinite(labels)):
        raise DataError(f"{where}: labels hold NaN or infinity")
    if _one_hot(labels):
        return np.argmax(labels, axis=1).astype(np.int64)
    whole = bool(np.all(labels == np.round(labels))) and (not count or labels.min() >= 0)
    if labels.ndim == 2 and labels.shape[1] == 1 and whole:  # a column of classes: [N, 1] reads as [N]
        labels = labels[:, 0]
    if labels.ndim == 1 and whole:
        return labels.astype(np.int64)
    yes_no = bool(np.all((labels == 0) | (labels == 1)))
    if yes_no and labels.ndim == 2 and labels.shape[1] > 1:  # several yes/no labels per sample: tags, bits
        return labels.astype(bool)
    if whole and (np.issubdtype(labels.dtype, np.integer) or yes_no):
        raise DataError(
            f"{where}: labels of shape {list(labels.shape)} hold whole numbers: classes, but not one per sample "
            "(per-pixel masks or several classes per sample are not read, but rows of 0 and 1 are: one yes/no per "
            "value; --fidelity compares with the original instead); a regression's targets are floats"
        )
    if not targets:
        raise DataError(f"{where}: labels must be classes, whole numbers 0 or more, one per sample")
    if labels.ndim == 1 and np.issubdtype(labels.dtype, np.integer):  # -1 often marks "no label": no target
        raise DataError(
            f"{where}: labels must be classes 0 or more, found {labels.min()} (a regression's targets are floats)"
        )
    return labels.astype(np.float64)


def _one_hot(labels: np.ndarray) -> bool:
    """Rows of 0s with one 1 (Keras' ``to_categorical``): classes, not several targets per sample."""
    if labels.ndim != 2 or labels.shape[1] < 2 or not len(labels):
        return False
    return bool(np.all((labels == 0) | (labels == 1)) and np.all(labels.sum(axis=1) == 1))


def _fixed(dim: int | str | None) -> int | None:
    """A dim's size, or None when it is dynamic (None, a symbolic name, or <= 0)."""
    return dim if isinstance(dim, (int, np.integer)) and dim > 0 else None


def _shape_text(shape: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if _fixed(dim) is None else str(dim) for dim in shape) + "]"
