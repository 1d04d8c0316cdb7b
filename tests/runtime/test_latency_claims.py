"""The speedup a side-by-side timing prints never says faster where the medians printed beside it say slower."""

from __future__ import annotations

import time

import pytest

from onnxsat.latency import agreed_speedup


def test_the_claimed_speedup_is_the_lower_of_the_two_estimators() -> None:
    before, after = [1.0, 2.0, 3.0], [0.9, 3.2, 2.8]  # per-round ratios 1.11, 0.63, 1.07: median 1.07
    assert agreed_speedup(before, after) == pytest.approx(2.0 / 2.8)  # the medians: 2.0 -> 2.8 ms, slower
    steady = [1.0, 1.0, 1.0]
    assert agreed_speedup(steady, [0.5, 0.5, 0.5]) == pytest.approx(2.0)


def test_a_slow_model_gets_the_rounds_that_fit_the_timing_time_and_a_fast_one_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """60 pairs of a graph network's 0.28 s runs, at two optimization levels, made a 2 s optimize take 2 minutes."""
    from onnxsat import latency

    monkeypatch.setattr(latency, "TIMING_SECONDS", 0.3)
    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.005)

    assert 15 <= latency.affordable_rounds([slow, slow], 60, 4) <= 30  # 0.3 s of rounds of at least 0.01 s
    assert len(calls) == 8  # the warm-up ran (timed), nothing more
    monkeypatch.setattr(latency, "TIMING_SECONDS", 0.01)
    assert latency.affordable_rounds([slow, slow], 60, 4) == latency.LEAST_ROUNDS  # never fewer
    monkeypatch.setattr(latency, "TIMING_SECONDS", 20.0)
    assert latency.affordable_rounds([lambda: None, lambda: None], 60, 2) == 60
