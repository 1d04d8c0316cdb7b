"""A quantized form of the model as the search holds it, and which forms are timing ties.

Several pickers choose among forms (the budget search's orders, then the modes): each takes the fastest,
but a form within timing noise of it may win on something else (fewer nodes in float, a smaller file).
What counts as a tie is decided here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx

from onnxsat.metrics import Score

PAYS_SPEEDUP = 1.03
"""Forms within this speedup of the fastest are timing ties (ratio noise on this machine)."""


@dataclass
class Candidate:
    """One quantized form of the model: its mode, the nodes it leaves in float and why, its score on the data,
    and what was measured on the way."""

    mode: str
    model: onnx.ModelProto
    excluded: dict[str, str]
    """Nodes of the mode's ops left in float, and why."""
    score: Score | None
    sensitivity: dict[str, float] = field(default_factory=dict)
    """Damage per node alone (the outputs' relative change), when the budget needed it."""
    speeds: dict[str, float] = field(default_factory=dict)
    """fp32 time / int8 time per weighted node alone, when timed."""
    latency: dict[str, float] = field(default_factory=dict)
    """Side by side with the float model: measured once, it both ranks the candidates and is the chosen
    one's reported latency."""
    seven_bit: bool = False
    """Whether its int8 weights take 7 bits (where this CPU's int8 kernels clip full-range products)."""

    @property
    def speedup(self) -> float | None:
        return self.latency.get("speedup")


def timing_ties(candidates: Sequence[Candidate], floor: float = 0.0) -> list[Candidate]:
    """The timed candidates within ``PAYS_SPEEDUP`` of the fastest, none slower than ``floor``."""
    fastest = max((c.speedup or 0.0 for c in candidates), default=0.0)
    return [
        c for c in candidates if c.speedup is not None and c.speedup >= floor and c.speedup * PAYS_SPEEDUP >= fastest
    ]
