"""The speedup a side-by-side timing prints never says faster where the medians printed beside it say slower."""

from __future__ import annotations

import pytest

from onnxsat.latency import agreed_speedup


def test_the_claimed_speedup_is_the_lower_of_the_two_estimators() -> None:
    before, after = [1.0, 2.0, 3.0], [0.9, 3.2, 2.8]  # per-round ratios 1.11, 0.63, 1.07: median 1.07
    assert agreed_speedup(before, after) == pytest.approx(2.0 / 2.8)  # the medians: 2.0 -> 2.8 ms, slower
    steady = [1.0, 1.0, 1.0]
    assert agreed_speedup(steady, [0.5, 0.5, 0.5]) == pytest.approx(2.0)
