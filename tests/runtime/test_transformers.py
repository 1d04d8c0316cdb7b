"""ORT's transformers optimizer: it fuses a spelled-out LayerNorm and Gelu, the result matches, bad settings fail."""

from __future__ import annotations

import builtins
import importlib.util
from pathlib import Path

import onnx
import pytest
from onnxsat.verification import verify
from runtime_models import conv_bn_relu, layer_norm_gelu

from onnxsat.errors import SettingsError
from onnxsat.model_io import check_model, load_model, model_folder
from onnxsat.report import op_counts
from onnxsat.runtime.transformers import guess_model_type, optimize_transformer


def test_layer_norm_and_gelu_are_fused_and_match() -> None:
    model = layer_norm_gelu()
    optimized, notices = optimize_transformer(model, "bert")
    assert dict(op_counts(optimized)) == {"MatMul": 1, "LayerNormalization": 1, "com.microsoft::Gelu": 1}
    check_model(optimized)  # the contrib domain the optimizer used is imported
    assert verify(model, optimized).ok
    assert notices[0] == (
        "ORT transformers optimizer (bert, opt_level 0): 15 -> 3 nodes; "
        "new ops: LayerNormalization 1, com.microsoft::Gelu 1"
    )
    assert "only ONNX Runtime runs it" in notices[1]
    assert len(model.graph.node) == 15  # the caller's model is untouched


def test_external_weights_are_read_from_base_dir(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(layer_norm_gelu(), str(path), save_as_external_data=True, size_threshold=0)
    optimized, _ = optimize_transformer(load_model(path), "bert", base_dir=model_folder(path))
    assert verify(layer_norm_gelu(), optimized).ok


def test_a_higher_opt_level_runs_or_says_it_needs_torch() -> None:
    """ORT 1.31's optimizer imports torch before running ORT's own optimizer (opt_level >= 1)."""
    model = layer_norm_gelu()
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(SettingsError, match=r"needs PyTorch at opt_level 1.*pip install torch, or use opt_level 0"):
            optimize_transformer(model, "bert", opt_level=1)
    else:
        optimized, _ = optimize_transformer(model, "bert", opt_level=1)
        assert verify(model, optimized).ok


def test_an_optimizer_that_cannot_be_imported_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Some ORT releases import torch with the module itself: that is named, not an ImportError traceback."""
    real_import = builtins.__import__

    def without_torch(name: str, *args: object, **kwargs: object) -> object:
        if name == "onnxruntime.transformers.optimizer":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_torch)
    with pytest.raises(SettingsError, match="transformers optimizer needs PyTorch: pip install torch"):
        optimize_transformer(layer_norm_gelu(), "bert")


def test_model_type_is_guessed_or_refused_with_the_reason() -> None:
    model = layer_norm_gelu()
    model.graph.input[0].name = "input_ids"
    model.graph.node[0].input[0] = "input_ids"
    assert guess_model_type(model) == "bert"
    _, notices = optimize_transformer(model)
    assert notices[0].startswith("ORT transformers optimizer (bert, opt_level 0)")
    with pytest.raises(SettingsError, match="not a transformer: image input but no Softmax or LayerNormalization"):
        optimize_transformer(conv_bn_relu())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_type": "resnet"}, "unknown transformer model type 'resnet'; choose one of: bart, bert"),
        ({"model_type": "bert", "opt_level": 3}, "opt_level must be one of 0, 1, 2, 99"),
        ({"model_type": "bert", "num_heads": -1}, "num_heads and hidden_size must be >= 0"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        optimize_transformer(layer_norm_gelu(), **kwargs)  # type: ignore[arg-type]
