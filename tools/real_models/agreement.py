"""Running a model on its real inputs, and how far a candidate's outputs agree with the original's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tools.real_models.catalogue import RealModel, StreamModel
from tools.real_models.samples import Samples, Streams


def first_output(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The model's first output on ``feeds``, ORT on CPU with its default optimizations: as users run it."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def first_outputs(path: Path, name: str, batch: np.ndarray) -> np.ndarray:
    """The first output on each sample of ``batch`` fed alone to input ``name``, stacked: for an export
    whose batch is fixed at 1 (``RealModel.batch_fixed``) and more samples than one."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([np.asarray(session.run(None, {name: batch[i : i + 1]})[0]) for i in range(len(batch))])


def stream_outputs(model: StreamModel, path: Path, streams: Streams) -> np.ndarray:
    """The first output at every step [streams, steps, ...]: all streams as one batch, step after step,
    each state output fed back as its state input (zeros first), the fixed inputs the same throughout."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    state = {pair.input: pair.initial(streams.count) for pair in model.state}
    outputs = []
    for step in range(streams.length):
        feeds = {model.input_name: streams.steps[:, step], **model.fixed, **state}
        results = dict(zip(names, session.run(None, feeds), strict=True))
        outputs.append(np.asarray(results[names[0]]))
        state = {pair.input: results[pair.output] for pair in model.state}
    return np.stack(outputs, axis=1)


def step_feeds(model: StreamModel, streams: Streams, step: int = 0) -> dict[str, np.ndarray]:
    """One step's feeds, every input named, the state at zeros (a stream's first step): what a command that
    runs the model once (``--inputs``) can be given."""
    return {
        model.input_name: np.ascontiguousarray(streams.steps[:, step]),
        **{name: np.asarray(value) for name, value in model.fixed.items()},
        **{pair.input: pair.initial(streams.count) for pair in model.state},
    }


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
