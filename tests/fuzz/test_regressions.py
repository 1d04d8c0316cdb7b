"""Every shrunk model the fuzzer ever failed on must pass the differential check from now on.

A model goes into ``regressions/`` when a campaign finds it (``python -m tools.fuzz graphs --failures-dir``
saves it shrunk), with a line in ``regressions/README.md`` saying what was wrong and how it was
fixed. A bug found but not yet fixed is marked ``xfail(strict=True)`` here until its fix lands.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tools.fuzz.differential import PASSED, check_model

REGRESSIONS = Path(__file__).parent / "regressions"
OPEN: dict[str, str] = {}
"""Regression models of bugs found but not fixed yet, with why: strict xfail until the fix lands."""


def _cases() -> list[object]:
    return [
        pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(reason=OPEN[path.stem], strict=True)])
        if path.stem in OPEN
        else pytest.param(path, id=path.stem)
        for path in sorted(REGRESSIONS.glob("*.onnx"))
    ]


@pytest.mark.parametrize("path", _cases())
def test_regression_model_passes_the_differential_check(path: Path) -> None:
    outcome = check_model(onnx.load(str(path)))
    assert outcome.status == PASSED, outcome.describe()


def test_kept_models_are_small() -> None:
    """Shrunk before they were kept: a regression model is a readable repro, not a fuzzed graph."""
    for path in REGRESSIONS.glob("*.onnx"):
        model = onnx.load(str(path))
        assert len(model.graph.node) <= 8, path.name
