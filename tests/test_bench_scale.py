"""Smoke test of ``onnxsat bench scale`` at tiny sizes: it runs, exits 0, prints a row per workload.

Timings are machine-dependent, so nothing here asserts on them (benchmarks print figures only).
"""

from __future__ import annotations

import pytest

from onnxsat.bench.scale import Measurement, Workload, goal_line
from onnxsat.cli import main


def test_bench_scale_runs_both_workloads_in_children(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "scale", "--blocks", "20", "--dense-layers", "8"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("chain(", "densenet("))}
    assert set(rows) == {"chain(20)", "densenet(8)"}
    chain = rows["chain(20)"].split()
    assert chain[1:3] == ["60", "20"]  # 60 nodes before; each Conv-BN-Relu block becomes one FusedConv
    assert rows["densenet(8)"].split()[1] == "32"  # 4 nodes per layer
    assert all(row.endswith("PASSED") for row in rows.values())
    assert "not evaluated" in out  # the goal is stated for --blocks 2000 only


def test_goal_line_says_not_met_honestly() -> None:
    slow = Measurement(Workload("chain", 2000), end_to_end_seconds=12.5, peak_rss_mib=300.0, verified=True)
    assert "NOT MET" in goal_line(slow) and "12.50 s" in goal_line(slow)
    fine = Measurement(Workload("chain", 2000), end_to_end_seconds=8.0, peak_rss_mib=300.0, verified=True)
    assert ": MET" in goal_line(fine)
    unverified = Measurement(Workload("chain", 2000), end_to_end_seconds=8.0, peak_rss_mib=300.0, verified=False)
    assert "NOT MET" in goal_line(unverified)


def test_bad_sizes_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "scale", "--blocks", "0"]) == 9
    assert "--blocks" in capsys.readouterr().err
