"""A model over 2 GB optimizes end to end within 1.5x its size in memory (``make test-large``).

Not part of ``make test``: it writes about 4.5 GB to the temp folder and takes about half a minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxsat.bench.large import GOAL_RATIO, measure_large_model

pytestmark = pytest.mark.large


def test_model_over_2gb_optimizes_within_memory_goal(tmp_path: Path) -> None:
    result = measure_large_model(tmp_path, int(2.2e9))
    assert result.model_bytes > 2**31, "the model is over the protobuf limit"
    assert result.exit_code == 0, result.stderr
    assert result.verified and result.outputs_match and result.input_unchanged
    assert result.output_protobuf_bytes < 1 << 20, "weights went to the data file, not the protobuf"
    assert result.output_data_bytes > 2**31
    assert sum(result.fusions.values()) == 2, result.fusions
    assert result.ratio < GOAL_RATIO, "\n".join(result.lines())
