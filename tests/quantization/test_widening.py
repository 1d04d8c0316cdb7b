"""Narrow quantized convolutions widened to 4-channel multiples: the same numbers, ORT's fast kernel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.quantization.widening import widen_narrow_convolutions
from onnxsat.runtime.int8_sums import int8_pairs_saturate

RNG = np.random.default_rng(0)


def stem_model(channels: int, outputs: int = 16, group: int = 1) -> onnx.ModelProto:
    weight = RNG.standard_normal((outputs, channels // group, 3, 3)).astype(np.float32) * 0.2
    second = RNG.standard_normal((16, outputs, 3, 3)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="stem", pads=[1] * 4, group=group),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="second", pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
        [
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(RNG.standard_normal(outputs).astype(np.float32) * 0.1, "b"),
            numpy_helper.from_array(second, "w2"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def quantized(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """As static mode quantizes: 7-bit weights where this machine's int8 kernels clip full-range products. With
    8-bit weights there, the two kernels (im2col and indirect) clip different pairs and disagree."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]

    class Samples(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(4)]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    source, target = folder / "float.onnx", folder / "int8.onnx"
    onnx.save(model, source)
    quantize_static(
        source, target, Samples(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=int8_pairs_saturate(),
    )  # fmt: skip
    return onnx.load(target)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def conv_weight_channels(model: onnx.ModelProto, name: str) -> int:
    made = {o: n for n in model.graph.node for o in n.output}
    weights = {t.name: t for t in model.graph.initializer}
    conv = next(n for n in model.graph.node if n.name == name)
    return weights[made[conv.input[1]].input[0]].dims[1]


@pytest.mark.parametrize("channels", [1, 3, 6])
def test_a_narrow_stem_is_widened_to_the_next_multiple_of_four_with_the_same_outputs(
    channels: int, tmp_path: Path
) -> None:
    int8 = quantized(stem_model(channels), tmp_path)
    wide = onnx.ModelProto()
    wide.CopyFrom(int8)
    assert widen_narrow_convolutions(wide) == ["stem"]
    onnx.checker.check_model(wide)
    assert conv_weight_channels(wide, "stem") == -(-channels // 4) * 4
    assert [n.op_type for n in wide.graph.node].count("Pad") == 1
    x = RNG.standard_normal((1, channels, 12, 12)).astype(np.float32)
    np.testing.assert_array_equal(run(wide, x), run(int8, x))  # padded with the zero point: exact zeros
    names = {t.name for t in wide.graph.initializer}
    assert not {t.name for t in int8.graph.initializer if t.dims[:2] == [16, channels]} & names  # old weight gone


@pytest.mark.parametrize(
    ("channels", "outputs", "group", "why"),
    [
        (4, 16, 1, "already a multiple of 4"),
        (3, 12, 1, "output channels not a multiple of 8"),
        (3, 8, 1, "fewer than 16 output channels"),
        (2, 16, 2, "a grouped convolution"),
    ],
)
def test_convolutions_the_fast_kernel_would_not_take_anyway_are_left(
    channels: int, outputs: int, group: int, why: str, tmp_path: Path
) -> None:
    int8 = quantized(stem_model(channels, outputs, group), tmp_path)
    before = int8.SerializeToString()
    assert widen_narrow_convolutions(int8) == [], why
    assert int8.SerializeToString() == before


def test_a_float_model_is_left_as_it_is() -> None:
    model = stem_model(3)
    before = model.SerializeToString()
    assert widen_narrow_convolutions(model) == []
    assert model.SerializeToString() == before
