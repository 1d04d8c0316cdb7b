"""Running a model on its real inputs, and how far a candidate's outputs agree with the original's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tools.real_models.catalogue import RealModel
from tools.real_models.samples import Samples


def first_output(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The model's first output on ``feeds``, ORT on CPU with its default optimizations: as users run it."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def feeds_of(model: RealModel, samples: Samples) -> dict[str, np.ndarray]:
    return {model.input_name: samples.batch}


@dataclass(frozen=True)
class Reading:
    """How many of the real inputs the original model reads right (the inputs' own check)."""

    right: int
    total: int

    @property
    def share(self) -> float:
        return self.right / self.total

    def __str__(self) -> str:
        return f"{self.right}/{self.total}"


def original_reading(model: RealModel, path: Path, samples: Samples, output: np.ndarray) -> Reading:
    verdicts = model.reads(path, output, samples.truth)
    return Reading(sum(verdicts), len(verdicts))


def agreement(model: RealModel, original: Path, reference: np.ndarray, candidate: Path, feeds: dict) -> float:
    """``model.agreement`` between the original's output ``reference`` and ``candidate`` run on ``feeds``."""
    return model.agreement(original, reference, first_output(candidate, feeds))
