"""``compress``: the fastest model inside an accuracy budget, searched over pruning, quantization and fusion
(``onnxsat compress``); its keys are ``CompressOptions``' fields."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.compression.compress import CompressOptions, compress_model
from onnxsat.core import OptionsPass


@dataclass
class CompressPass(
    OptionsPass,
    kind="compress",
    options_class=CompressOptions,
    transform=compress_model,
    lossy=True,
    dense_weights=True,
):
    options: CompressOptions
    result_name = "the compressed model"
