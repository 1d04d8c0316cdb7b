"""ORT offline optimization: each level fuses what it should, the result runs and matches the original."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnxsat.verification import verify
from runtime_models import conv_bn_relu

from onnxsat.errors import RuntimeUnsupportedError, SettingsError
from onnxsat.external_data import has_external_data
from onnxsat.model_io import load_model, model_folder
from onnxsat.report import op_counts
from onnxsat.runtime.offline import LAYOUT_WARNING, optimize_offline
from onnxsat.zoo import bundled

SHAPES = {"x": [2, 3, 8, 8]}


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("basic", {"Conv": 1, "Relu": 1}),  # BatchNormalization folded into the Conv
        ("extended", {"com.microsoft::FusedConv": 1}),  # and the Relu fused into it
        ("all", {"com.microsoft.nchwc::Conv": 1, "com.microsoft.nchwc::ReorderOutput": 1}),
    ],
)
def test_each_level_fuses_and_matches(level: str, expected: dict[str, int]) -> None:
    model = conv_bn_relu()
    optimized, notices = optimize_offline(model, level)
    assert dict(op_counts(optimized)) == expected
    assert verify(model, optimized, SHAPES).ok
    assert notices[0] == f"ORT {level}: 3 -> {sum(expected.values())} nodes"
    assert (LAYOUT_WARNING in notices) == (level == "all")
    assert ("only ONNX Runtime runs it" in " ".join(notices)) == (level != "basic")
    assert {o.domain for o in optimized.opset_import} <= {"", "com.microsoft", "com.microsoft.nchwc"}


def test_the_input_model_is_left_alone() -> None:
    model = conv_bn_relu()
    before = model.SerializeToString()
    optimize_offline(model, "extended")
    assert model.SerializeToString() == before


def test_external_data_is_read_from_base_dir_and_the_result_holds_its_weights(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(conv_bn_relu(), str(path), save_as_external_data=True, location="model.data", size_threshold=0)
    model = load_model(path)
    assert has_external_data(model)
    optimized, _ = optimize_offline(model, "basic", model_folder(path))
    assert not has_external_data(optimized)  # nothing points into ORT's deleted temporary folder
    assert verify(conv_bn_relu(), optimized, SHAPES).ok
    with pytest.raises(SettingsError, match="base_dir"):
        optimize_offline(model, "basic")


def test_unknown_level_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match=r"unknown ORT optimization level 'fast'.*basic, extended, all"):
        optimize_offline(conv_bn_relu(), "fast")


def test_a_model_ort_cannot_load_is_one_runtime_error() -> None:
    model = conv_bn_relu()
    model.graph.node[2].op_type = "NoSuchOp"
    with pytest.raises(RuntimeUnsupportedError, match=r"cannot load the model to optimize it: .*NoSuchOp") as caught:
        optimize_offline(model, "basic")
    assert "\n" not in str(caught.value)


def test_weights_listed_as_inputs_are_optimized_as_constants() -> None:
    # onnx's light SqueezeNet is IR 3: its 52 weights are graph inputs too, which ORT would keep as inputs
    path = bundled.bundled_models().get("squeezenet")
    if path is None:
        pytest.skip("this onnx build ships no light models")
    model = onnx.load(str(path))
    optimized, notices = optimize_offline(model, "extended")
    assert "52 weights listed as graph inputs (IR 3) were optimized as constants" in notices
    assert [v.name for v in optimized.graph.input] == ["data_0"]
    assert len(optimized.graph.node) < len(model.graph.node)
    assert verify(model, optimized).ok
