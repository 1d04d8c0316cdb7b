"""Compress tests keep their per-node timing cache in their own folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path_factory.mktemp("onnxsat-cache")
    monkeypatch.setenv("ONNXSAT_CACHE_DIR", str(folder))
    return folder
