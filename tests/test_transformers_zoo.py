"""The transformers zoo without torch or transformers: one line naming the extra, nothing written."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from onnxsat.errors import MissingExtraError, SettingsError
from tools.transformers_bench import command
from tools.zoo import build, transformers_zoo
from tools.zoo.transformers_zoo import TRANSFORMER_MODELS, build_transformers


def test_catalogue_has_the_four_models_without_importing_torch() -> None:
    assert list(TRANSFORMER_MODELS) == ["bert", "vit", "gpt2", "llama_tiny"]
    assert set(transformers_zoo.GEOMEAN_MODELS) == {"bert", "vit", "gpt2"}
    assert {spec.ort_model_type for spec in TRANSFORMER_MODELS.values()} == {"bert", "vit", "gpt2"}
    assert "grouped-query" in TRANSFORMER_MODELS["llama_tiny"].description


@pytest.mark.parametrize(
    ("present", "missing"), [((), "torch"), (("torch",), "transformers")], ids=["no torch", "no transformers"]
)
def test_missing_package_is_one_line_naming_the_zoo_extra(
    present: tuple[str, ...], missing: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in present:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # importable, never used before the check
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    with pytest.raises(MissingExtraError, match=rf"{missing} is not installed; pip install 'onnxsat\[zoo\]'"):
        build_transformers(tmp_path / "models", ["bert"], log=lambda line: None)
    assert not (tmp_path / "models" / "bert.onnx").exists()


def test_bench_build_without_torch_exits_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    rc = command.main(["--build", "--models", str(tmp_path), "bert"])
    err = capsys.readouterr().err
    assert rc == MissingExtraError.exit_code
    assert err.strip().splitlines() == [
        "onnxsat: error: building the transformers models: torch is not installed; pip install 'onnxsat[zoo]'"
    ]
    assert list(tmp_path.iterdir()) == []
    assert build.main(["transformers", "--out", str(tmp_path), "vit"]) == MissingExtraError.exit_code


def test_existing_models_are_skipped_without_importing_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    (tmp_path / "gpt2.onnx").write_bytes(b"already built")
    said: list[str] = []
    assert build_transformers(tmp_path, ["gpt2"], log=said.append) == {"gpt2": tmp_path / "gpt2.onnx"}
    assert said == [f"gpt2: {tmp_path / 'gpt2.onnx'} exists, skipped"]
    assert (tmp_path / "gpt2.onnx").read_bytes() == b"already built"


def test_no_models_without_build_or_an_unknown_name_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="pass --build"):
        command.find_models(tmp_path, [], build=False, log=print)
    with pytest.raises(SettingsError, match="unknown model t5"):
        command.find_models(tmp_path, ["t5"], build=False, log=print)
    with pytest.raises(SettingsError, match="unknown transformers model"):
        build_transformers(tmp_path, ["t5"])
