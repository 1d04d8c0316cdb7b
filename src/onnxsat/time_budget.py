"""``--budget-minutes``: the time limit of the budgeted searches (quantize, sparsify, compress), checked and
reported alike, so the commands cannot drift apart in what they accept or how they say they stopped."""

from __future__ import annotations

from onnxsat.errors import SettingsError

BUDGET_MINUTES = 20.0
"""The default limit: a search that runs longer keeps the best model found by then."""
OUT_OF_TIME = "the search stopped at --budget-minutes"


def check_budget_minutes(minutes: float) -> None:
    """Refuse a limit no search could keep: zero, negative, or NaN (which compares false with everything, so a
    ``minutes <= 0`` test lets it through and the search then never stops)."""
    if not minutes > 0:
        raise SettingsError(f"--budget-minutes must be positive, got {minutes:g}")


def out_of_time(minutes: float) -> str:
    """The start of the report's note for a search cut short: ``OUT_OF_TIME`` with the limit it kept."""
    return f"{OUT_OF_TIME} ({minutes:g} min)"
