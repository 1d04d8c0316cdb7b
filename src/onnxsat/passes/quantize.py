"""``quantize``: INT8 / 4-bit quantization on ONNX Runtime's quantizer (``onnxsat quantize``), measured per
node and optionally inside an accuracy budget; its keys are ``QuantizeOptions``' fields."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.core import OptionsPass
from onnxsat.quantization.quantize import QuantizeOptions, quantize_model


@dataclass
class QuantizePass(
    OptionsPass,
    kind="quantize",
    options_class=QuantizeOptions,
    transform=quantize_model,
    lossy=True,
    dense_weights=True,
):
    options: QuantizeOptions
    result_name = "the quantized model"
