"""Whether ONNX Runtime's int8 kernels here clip full-range products, and that with the weights quantize writes
on this machine they compute exactly what the QDQ graph says.

The graph's own arithmetic is what ORT runs with its optimizations off (DequantizeLinear, float Conv,
QuantizeLinear); with them on, the QDQ pairs become QLinearConv, an integer kernel. The two agree to a
rounding step unless the kernel clips.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.runtime.int8_sums import int8_pairs_saturate

SHAPE = [1, 4, 8, 8]


def all_positive_stem() -> onnx.ModelProto:
    """Every weight the same positive value, so every one quantizes to the top of its range, and inputs in
    [0, 1], so activations reach 255: every pair of products is as large as it gets."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1] * 4)],
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
        [numpy_helper.from_array(np.full((16, 4, 3, 3), 0.05, np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def samples(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.0, 1.0, SHAPE).astype(np.float32) for _ in range(count)]


def quantized(folder: Path, reduce_range: bool) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": x} for x in samples(4, seed=0)]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    source, target = folder / "float.onnx", folder / f"int8_{reduce_range}.onnx"
    onnx.save(all_positive_stem(), source)
    quantize_static(
        source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=reduce_range,
    )  # fmt: skip
    return onnx.load(target)


def steps_apart(model: onnx.ModelProto) -> float:
    """The largest difference between ORT's int8 kernels and the QDQ arithmetic, in output rounding steps."""
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    last = next(n for n in reversed(model.graph.node) if n.op_type == "DequantizeLinear")
    step = float(scales[last.input[1]])

    def run(level: ort.GraphOptimizationLevel, x: np.ndarray) -> np.ndarray:
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]

    return max(
        float(
            np.abs(
                run(ort.GraphOptimizationLevel.ORT_ENABLE_ALL, x) - run(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, x)
            ).max()
        )
        / step
        for x in samples(3, seed=1)
    )


def test_the_probe_says_whether_full_range_weights_are_clipped_here(tmp_path: Path) -> None:
    """Where the probe finds clipping (x86 without VNNI), a convolution of full-range weights comes out of the
    int8 kernel far from its QDQ arithmetic; elsewhere within a rounding step."""
    apart = steps_apart(quantized(tmp_path, reduce_range=False))
    assert (apart > 2.0) == int8_pairs_saturate(), apart


def test_the_weights_quantize_writes_here_are_computed_as_their_graph_says(tmp_path: Path) -> None:
    """7-bit weights where full-range products clip, 8 bits elsewhere: either way the kernel agrees with the
    graph to a rounding step."""
    assert steps_apart(quantized(tmp_path, reduce_range=int8_pairs_saturate())) <= 1.0
