"""The bundled digits CNN quantized by ONNX Runtime's own quantizer, as users hand over models quantized
elsewhere: tests of what ONNXSat does with them share it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

from onnxsat.zoo.digits_cnn import bundled_digits_cnn


class DigitsReader(CalibrationDataReader):
    """Eight seeded random digits-shaped samples, one per call, for ORT's calibration."""

    def __init__(self) -> None:
        samples = np.random.default_rng(0).random((8, 1, 8, 8)).astype(np.float32)
        self.feeds = iter([{"input": samples[i : i + 1]} for i in range(len(samples))])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def statically_quantized_digits_cnn(
    path: Path, quant_format: QuantFormat = QuantFormat.QDQ, exclude: Sequence[str] = ()
) -> Path:
    """The digits CNN quantized by ``quantize_static`` (QDQ by default) into ``path``, ``exclude`` left float."""
    quantize_static(
        bundled_digits_cnn(), path, DigitsReader(), quant_format=quant_format, nodes_to_exclude=list(exclude)
    )
    return path
