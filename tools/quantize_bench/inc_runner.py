"""Intel onnx-neural-compressor's post-training static quantization, run inside its own venv.

onnx-neural-compressor pins its own onnxruntime and numpy, so it lives in a throwaway venv and this script
is its only contact with the benchmark: ``PYTHON inc_runner.py MODEL CALIBRATION.npz OUT.onnx`` reads the
calibration samples (``inputs``, fed to the model's first input in batches of ``--batch``) and writes the
quantized model. It imports neither onnxsat nor the tools package. The settings are the ones ORT's
quantizer gets in this benchmark (QDQ, per-channel int8 weights, uint8 activations, MinMax), so the rows
differ by the tool, not by the recipe.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx


class NpzReader:
    """The calibration samples as consecutive batches of the model's first input."""

    def __init__(self, name: str, samples: np.ndarray, batch: int) -> None:
        self.batches = [samples[start : start + batch] for start in range(0, len(samples), batch)]
        self.name, self.index = name, 0

    def get_next(self) -> dict | None:
        if self.index >= len(self.batches):
            return None
        self.index += 1
        return {self.name: self.batches[self.index - 1]}

    def rewind(self) -> None:
        self.index = 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("calibration")
    parser.add_argument("out")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    from onnx_neural_compressor import data_reader
    from onnx_neural_compressor.quantization import config, quantize
    from onnxruntime.quantization import QuantFormat, QuantType

    class Reader(NpzReader, data_reader.CalibrationDataReader):
        pass

    model = onnx.load(args.model, load_external_data=False)
    initializers = {tensor.name for tensor in model.graph.initializer}
    name = next(value.name for value in model.graph.input if value.name not in initializers)
    with np.load(args.calibration) as data:
        samples = data["inputs"]
    reader = Reader(name, samples, args.batch)
    settings = config.StaticQuantConfig(
        reader,
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibration_sampling_size=len(reader.batches),
    )
    quantize(args.model, args.out, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
