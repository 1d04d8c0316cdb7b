"""``--budget-minutes``'s clock, shared by quantize and sparsify: a deadline says once it has passed, keeps
saying so, and halves what is left for a first step that must leave time for a second."""

from __future__ import annotations

import pytest

from onnxsat import time_budget
from onnxsat.errors import SettingsError
from onnxsat.time_budget import Deadline, check_budget_minutes, late


def test_a_deadline_passes_once_and_stays_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 59.0, 61.0, 0.0])
    monkeypatch.setattr(time_budget, "_now", lambda: next(clock))
    deadline = Deadline(1)  # at 60 s
    assert not deadline.passed() and not deadline.reached
    assert deadline.passed() and deadline.reached
    assert deadline.passed(), "a clock read earlier again does not take it back"


def test_halfway_is_half_the_time_left_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(time_budget, "_now", lambda: now[0])
    deadline = Deadline(10)  # at 600 s
    now[0] = 200.0
    assert deadline.halfway().at == 400.0
    now[0] = 700.0
    assert deadline.halfway().at == 700.0 and deadline.halfway().passed()


def test_no_deadline_is_never_late_and_a_limit_must_be_positive() -> None:
    assert not late(None) and not late(Deadline())
    for minutes in (0.0, -1.0, float("nan")):
        with pytest.raises(SettingsError, match="--budget-minutes must be positive"):
            check_budget_minutes(minutes)
