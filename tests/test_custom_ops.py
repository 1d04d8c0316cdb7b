"""Models with onnxruntime-extensions' ops (pre- and post-processing merged into the model) run: its library is
registered with every session; a model that needs it without the package, or a library that cannot load, is
one line. Runs on random values never reach a custom op that could end the process when --inputs gives values."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat import custom_ops
from onnxsat.cli import main
from onnxsat.errors import MissingExtraError, SettingsError

pytest.importorskip("onnxruntime_extensions")


@pytest.fixture(autouse=True)
def fresh_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no library registered, and leaves none for the tests after it (the registration
    lives in the environment; set here, it is taken back at the end)."""
    monkeypatch.setenv(custom_ops.ENVIRONMENT, "")


def image_classifier(path: Path) -> Path:
    """Encoded image bytes -> DecodeImage (onnxruntime-extensions) -> a small CNN: 5 class scores."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.normal(size=(8, 3, 3, 3)) * 0.01).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.normal(size=(8, 8, 3, 3)) * 0.1).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.normal(size=(8, 5)) * 0.1).astype(np.float32), "fc"),
        numpy_helper.from_array(np.array([0], np.int64), "batch_axis"),
    ]
    nodes = [
        helper.make_node("DecodeImage", ["image"], ["bgr"], domain="com.microsoft.extensions"),
        helper.make_node("Cast", ["bgr"], ["pixels"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["pixels"], ["chw"], perm=[2, 0, 1]),
        helper.make_node("Unsqueeze", ["chw", "batch_axis"], ["x"]),
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc"], ["scores"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "decode_and_classify",
        [helper.make_tensor_value_info("image", TensorProto.UINT8, ["num_bytes"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 5])],
        weights,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft.extensions", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=8), path)
    return path


def png_feeds(path: Path) -> Path:
    from PIL import Image

    pixels = (np.random.default_rng(1).random((20, 24, 3)) * 255).astype(np.uint8)
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="PNG")
    np.savez(path, image=np.frombuffer(encoded.getvalue(), np.uint8))
    return path


def test_a_model_with_extension_ops_is_optimized_and_pruned_on_the_given_image(tmp_path: Path) -> None:
    model, feeds = image_classifier(tmp_path / "m.onnx"), png_feeds(tmp_path / "feeds.npz")
    report = tmp_path / "o.json"
    assert main(["optimize", str(model), "-o", str(tmp_path / "o.onnx"), "--inputs", str(feeds), "--report",
                 str(report)]) == 0  # fmt: skip
    assert "onnxruntime-extensions' library registered" in json.dumps(json.loads(report.read_text())["run"])
    # prune counts MACs and probes sizes by running the model: on the given image, never on random bytes, which
    # the image decoder answers by ending the process
    pruned = tmp_path / "p.onnx"
    assert main(["prune", str(model), "-o", str(pruned), "--rate", "0.5", "--inputs", str(feeds)]) == 0
    kept = {t.name: list(t.dims) for t in onnx.load(pruned).graph.initializer}
    assert kept["w1"][0] == 4


def test_without_the_package_a_model_needing_it_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(custom_ops, "_extensions_library", lambda: None)
    monkeypatch.setitem(sys.modules, "onnxruntime_extensions", None)  # importing it fails
    with pytest.raises(MissingExtraError, match=r"DecodeImage\): onnxruntime-extensions is not installed; pip install"):
        custom_ops.use_for(onnx.load(image_classifier(tmp_path / "m.onnx")))
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx")]) == 14


def test_a_named_library_that_is_no_file_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(custom_ops.ENVIRONMENT, str(tmp_path / "missing.so"))
    with pytest.raises(SettingsError, match=r"ONNXSAT_CUSTOM_OPS names .*missing\.so, which is not a file"):
        custom_ops.register(ort.SessionOptions())
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    # a setting, exit 9: it was "ONNX Runtime cannot run the input model" (6), with advice on the model's sizes
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx")]) == 9


def test_a_model_without_custom_ops_registers_nothing(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    assert custom_ops.use_for(helper.make_model(graph)) is None
    assert custom_ops.libraries() == []
