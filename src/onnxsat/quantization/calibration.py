"""Calibration data for ONNX Runtime's static quantizer, from the user's data or seeded random inputs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from onnxsat.data.sources import Dataset
from onnxsat.memory import batch_slices

if TYPE_CHECKING:
    from onnxruntime.quantization import CalibrationDataReader


def calibration_reader(
    input_name: str,
    dataset: Dataset,
    given: Mapping[str, np.ndarray],
    dtype: type,
    batch_size: int,
    fixed_batch: int | None = None,
    equal_batches: bool = False,
) -> CalibrationDataReader:
    """A ``CalibrationDataReader`` over ``dataset`` in batches, the user's fixed inputs (``--inputs``)
    beside every batch, and the rows of the inputs given per sample. A model whose batch dim is fixed gets
    batches of exactly that size (the last one filled up by repeating its samples, which leaves the ranges
    as they are). ``equal_batches`` (ORT's entropy and percentile calibrators stack their per-batch
    activations, and refuse batches of two sizes): a last, smaller batch is left out when a full one came
    before it. Otherwise a dynamic batch starts with one sample, then two, and takes the rest in batches of
    what memory allows (``memory.batch_slices``), measured by what the calibrator's run of two added
    (the reader is asked for a batch after the last one ran): the ranges are the same whatever the batches."""
    from onnxruntime.quantization import CalibrationDataReader

    step = fixed_batch or batch_size

    class DatasetReader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches: Iterator[dict[str, np.ndarray]] = self._batches()

        def _batches(self) -> Iterator[dict[str, np.ndarray]]:
            size = fixed_batch or (step if equal_batches else None)  # None: as memory allows
            for index, (start, stop) in enumerate(batch_slices(len(dataset.inputs), step, size)):
                inputs = dataset.inputs[start:stop]
                if equal_batches and index and len(inputs) < step:
                    return
                if fixed_batch is not None and len(inputs) < fixed_batch:
                    inputs = np.resize(inputs, (fixed_batch, *inputs.shape[1:]))
                yield {**given, **dataset.rows(start, stop), input_name: np.asarray(inputs).astype(dtype, copy=False)}

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    return DatasetReader()
