"""Magika's real inputs: files of known types, turned into the model's 2048 byte features as Magika does.

Magika (``Magika._extract_features_from_seekable``) reads at most ``block_size`` bytes from each end of
the file, strips leading whitespace from the first block and trailing whitespace from the last, keeps
``beg_size`` bytes from the start and ``end_size`` from the end, and pads with ``padding_token`` (after
the beginning, before the end). The model's input is the beginning followed by the end.
"""

from __future__ import annotations

import gzip
import io
import json
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from tools.real_models.samples import Samples

CONFIG_NAME = "config.min.json"


@dataclass(frozen=True)
class FeatureConfig:
    """The part of Magika's ``config.min.json`` that says how features are taken and what they mean."""

    beg_size: int
    end_size: int
    padding_token: int
    block_size: int
    labels: tuple[str, ...]

    @classmethod
    def beside(cls, model: Path) -> FeatureConfig:
        return _config(model.parent / CONFIG_NAME)


@lru_cache(maxsize=4)
def _config(path: Path) -> FeatureConfig:
    raw = json.loads(path.read_text())
    if raw.get("mid_size", 0) or raw.get("use_inputs_at_offsets", False):
        raise ValueError(f"{path}: middle and offset features are not supported")
    return FeatureConfig(
        raw["beg_size"], raw["end_size"], raw["padding_token"], raw["block_size"], tuple(raw["target_labels_space"])
    )


def features(path: Path, config: FeatureConfig) -> np.ndarray:
    """The model's int32 feature row for the file at ``path``."""
    size = path.stat().st_size
    window = min(config.block_size, size)
    with path.open("rb") as handle:
        first = handle.read(window)
        handle.seek(size - window)
        last = handle.read(window)
    beg = list(first.lstrip()[: config.beg_size])
    beg += [config.padding_token] * (config.beg_size - len(beg))
    stripped = last.rstrip()
    end = list(stripped[max(0, len(stripped) - config.end_size) :])
    end = [config.padding_token] * (config.end_size - len(end)) + end
    return np.asarray(beg + end, dtype=np.int32)


# ------------------------------------------------------------------------------------------ the files


def _png(folder: Path) -> Path:
    from PIL import Image

    ramp = np.add.outer(np.arange(64), np.arange(96)).astype(np.uint8)
    path = folder / "ramp.png"
    Image.fromarray(np.stack([ramp, ramp[::-1], ramp * 2], axis=2)).save(path)
    return path


def _json(folder: Path) -> Path:
    records = [{"id": i, "name": f"item {i}", "tags": ["a", "b"], "price": i * 1.25} for i in range(60)]
    path = folder / "items.json"
    path.write_text(json.dumps({"version": 3, "items": records}, indent=2))
    return path


def _gzip(folder: Path) -> Path:
    path = folder / "source.py.gz"
    path.write_bytes(gzip.compress(Path(json.__file__).read_bytes(), mtime=0))
    return path


def _zip(folder: Path) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("README.txt", (2020, 1, 1, 0, 0, 0)), "hello\n" * 50)
        archive.writestr(zipfile.ZipInfo("data/items.csv", (2020, 1, 1, 0, 0, 0)), "a,b\n1,2\n" * 200)
    path = folder / "bundle.zip"
    path.write_bytes(buffer.getvalue())
    return path


def _html(folder: Path) -> Path:
    rows = "\n".join(f"      <tr><td>{i}</td><td>row {i}</td></tr>" for i in range(40))
    path = folder / "page.html"
    path.write_text(
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n  <title>Report</title>\n'
        f"</head>\n<body>\n  <h1>Report</h1>\n  <table>\n{rows}\n  </table>\n</body>\n</html>\n"
    )
    return path


def _shell(folder: Path) -> Path:
    path = folder / "build.sh"
    path.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\ncd \"$(dirname \"$0\")\"\n"
        + "".join(f'if [ -f "part{i}.txt" ]; then\n    echo "found part {i}"\n    cat "part{i}.txt" >> all.txt\nfi\n'
                  for i in range(20))
    )  # fmt: skip
    return path


def _python(folder: Path) -> Path:
    del folder
    return Path(json.__file__)


def _shared_library(folder: Path) -> Path:
    del folder
    found = sorted(Path(np.__file__).parent.rglob("_multiarray_umath*.so"))
    if not found:
        raise FileNotFoundError("numpy's compiled core (_multiarray_umath*.so) was not found")
    return found[0]


SAMPLE_FILES: dict[str, Callable[[Path], Path]] = {
    "python": _python,
    "elf": _shared_library,
    "png": _png,
    "json": _json,
    "gzip": _gzip,
    "zip": _zip,
    "html": _html,
    "shell": _shell,
}
"""Magika's label for each file and how to get one: the standard library's ``json`` source and numpy's
compiled core are real files on the machine; the others are written, deterministically, by Python."""


def file_samples(model: Path, kinds: Sequence[str] = tuple(SAMPLE_FILES)) -> Samples:
    """One feature row per file kind, each naming the label Magika should give it."""
    config = FeatureConfig.beside(model)
    with tempfile.TemporaryDirectory(prefix="onnxsat-magika-") as folder:
        rows = [features(SAMPLE_FILES[kind](Path(folder)), config) for kind in kinds]
    return Samples(np.stack(rows), tuple(kinds))


def labels(model: Path, output: np.ndarray) -> list[str]:
    names = FeatureConfig.beside(model).labels
    return [names[index] for index in output.argmax(axis=1)]


def reads_type(model: Path, output: np.ndarray, truth: Sequence[object]) -> list[bool]:
    return [label == kind for label, kind in zip(labels(model, output), truth, strict=True)]
