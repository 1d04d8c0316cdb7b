"""What a real-input maker returns, and the feeds file it becomes.

The feeds file holds only the model's inputs, keyed by input name, so it can be handed to a command as
is (``--inputs FEEDS.npz``); what each sample really is (the text drawn, the file's type) stays here,
for checking that the original model reads the inputs right.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Samples:
    """A batch for one model input and, per sample, what it shows (a string, an angle, boxes)."""

    batch: np.ndarray
    truth: tuple[object, ...]

    def __post_init__(self) -> None:
        if len(self.batch) != len(self.truth):
            raise ValueError(f"{len(self.batch)} samples but {len(self.truth)} truths")


@dataclass(frozen=True)
class Streams:
    """Streams of real inputs fed one step at a time, all streams as one batch per step.

    ``steps[s, t]`` is what stream ``s`` feeds the model at step ``t`` (one sample of the model's stepped
    input, without the batch axis); ``truth[s]`` is what stream ``s`` holds, per step (speech or not).
    """

    steps: np.ndarray
    truth: tuple[object, ...]

    def __post_init__(self) -> None:
        if len(self.steps) != len(self.truth):
            raise ValueError(f"{len(self.steps)} streams but {len(self.truth)} truths")

    @property
    def count(self) -> int:
        return int(self.steps.shape[0])

    @property
    def length(self) -> int:
        """Steps per stream."""
        return int(self.steps.shape[1])


def write_feeds(path: Path, feeds: dict[str, np.ndarray]) -> Path:
    """``feeds`` as an uncompressed ``.npz`` at ``path`` (folders made); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        np.savez(handle, **feeds)
    return path


def read_feeds(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
