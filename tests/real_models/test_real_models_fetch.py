"""Fetching into the cache, without the network: a fake downloader writes a small wheel.

What CI depends on: a second fetch downloads nothing, a file whose hash differs from the catalogue's
is refused and not left looking cached, and ``fetch`` exits non-zero with one line per failed model.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from tools.real_models import cache, command
from tools.real_models.catalogue import MODELS, RealModel, WheelFile

PAYLOAD = b"not really an onnx model"
MEMBER = "toy/models/model.onnx"


def toy_model(sha256: str) -> RealModel:
    template = MODELS["magika"]
    return RealModel(
        name="toy",
        requirement="toy-package==1.2.3",
        model=WheelFile(MEMBER, sha256),
        input_name=template.input_name,
        shape=template.shape,
        make_inputs=template.make_inputs,
        reads=template.reads,
        agreement=template.agreement,
        measure_name=template.measure_name,
    )


class FakePip:
    """Writes ``toy_package-1.2.3-py3-none-any.whl`` holding PAYLOAD; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, requirement: str, folder: Path) -> Path:
        self.calls += 1
        folder.mkdir(parents=True, exist_ok=True)
        wheel = folder / "toy_package-1.2.3-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(MEMBER, PAYLOAD)
        return wheel


def test_fetch_unpacks_checks_and_then_skips_what_is_cached(tmp_path: Path) -> None:
    model = toy_model(hashlib.sha256(PAYLOAD).hexdigest())
    pip = FakePip()
    first = cache.fetch(model, tmp_path, download=pip)
    assert first.downloaded and first.path.read_bytes() == PAYLOAD
    assert first.path == tmp_path / "toy-package-1.2.3" / MEMBER
    second = cache.fetch(model, tmp_path, download=pip)
    assert not second.downloaded and pip.calls == 1
    first.path.unlink()  # the file is gone but the wheel is kept: unpacked again without downloading
    assert cache.fetch(model, tmp_path, download=pip).downloaded and pip.calls == 1


def test_a_file_with_another_hash_is_refused_and_not_left_behind(tmp_path: Path) -> None:
    model = toy_model("0" * 64)
    with pytest.raises(cache.FetchError, match="sha256"):
        cache.fetch(model, tmp_path, download=FakePip())
    assert not cache.model_path(model, tmp_path).exists()
    assert not cache.is_cached(model, tmp_path)


def test_fetch_command_fails_loudly_when_pip_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(requirement: str, folder: Path) -> Path:
        raise cache.FetchError(f"pip download {requirement} failed (exit 1): no network")

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(cache, "pip_download", failing)
    monkeypatch.setattr(cache.fetch, "__defaults__", (None, failing))
    assert command.main(["fetch", "--models", "magika"]) == 1
    out = capsys.readouterr()
    assert out.out.strip() == "magika: FAILED pip download magika==1.0.3 failed (exit 1): no network"
    assert "could not be fetched" in out.err


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    assert cache.cache_dir() == tmp_path
    monkeypatch.delenv(cache.ENV_VAR)
    assert cache.cache_dir() == Path("~/.cache/onnxsat/real_models").expanduser()
