"""``--budget-minutes``: the time limit of the budgeted searches (quantize, sparsify, compress), checked and
reported alike, so the commands cannot drift apart in what they accept or how they say they stopped."""

from __future__ import annotations

import math
import time

from onnxsat.errors import SettingsError

BUDGET_MINUTES = 20.0
"""The default limit: a search that runs longer keeps the best model found by then."""
OUT_OF_TIME = "the search stopped at --budget-minutes"


def check_budget_minutes(minutes: float) -> None:
    """Refuse a limit no search could keep: zero, negative, or NaN (which compares false with everything, so a
    ``minutes <= 0`` test lets it through and the search then never stops)."""
    if not minutes > 0:
        raise SettingsError(f"--budget-minutes must be positive, got {minutes:g}")


TIMING_SHARE = 0.02
"""Share of a search's time budget one side-by-side timing run may take (at least ``LEAST_TIMING_SECONDS``): a
search times its candidates again and again, and a model of 0.7 s per run spent 49 s in one run of 35 rounds."""
LEAST_TIMING_SECONDS = 10.0


def seconds_per_run(minutes: float) -> float:
    """How long one timing run (``timing.time_rounds``'s ``seconds``) may take in a search of ``minutes``."""
    return max(LEAST_TIMING_SECONDS, TIMING_SHARE * minutes * 60)


def out_of_time(minutes: float) -> str:
    """The start of the report's note for a search cut short: ``OUT_OF_TIME`` with the limit it kept."""
    return f"{OUT_OF_TIME} ({minutes:g} min)"


_now = time.monotonic
"""The clock ``--budget-minutes`` is kept by (a test moves it)."""


def now() -> float:
    """The time on the clock ``--budget-minutes`` is kept by: what a search measures its own pace on."""
    return _now()


class Deadline:
    """When a search stops starting evaluations, and whether it had to: an evaluation runs the data through a
    model, so the limit is checked before each one, never in the middle of one."""

    def __init__(self, minutes: float = math.inf, at: float | None = None) -> None:
        self.at = _now() + minutes * 60 if at is None else at
        self.reached = False
        """Set once ``passed`` said so: some evaluation a search would have made was not made."""

    def passed(self) -> bool:
        """Whether the time is out; asked before an evaluation, which is skipped when it is."""
        self.reached = self.reached or _now() >= self.at
        return self.reached

    def seconds_left(self) -> float:
        """Seconds until the limit (0 once it has passed)."""
        return max(0.0, self.at - _now())

    def halfway(self) -> Deadline:
        """Half the time left, from now: a first step that must leave the rest for a second."""
        return Deadline(at=_now() + self.seconds_left() / 2)


def late(deadline: Deadline | None) -> bool:
    """Whether a search given ``deadline`` (None: no limit, as the Python API's callers may have it) must stop."""
    return deadline is not None and deadline.passed()
