"""The reliability commands: `python -m tools.fuzz graphs|bodies|bytes|opsets` run real campaigns and print counts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.fuzz.command import main


def run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


def test_fuzz_graphs_prints_the_counts(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(["graphs", "--count", "4", "--seed", "7", "--failures-dir", str(tmp_path / "f")], capfd)
    assert code == 0
    counts = re.search(r"(\d+) generated, (\d+) ran, (\d+) passed, (\d+) rejected as invalid, (\d+) failed", out)
    assert counts is not None, out
    generated, ran, passed, invalid, failed = map(int, counts.groups())
    assert generated == 4 and ran + invalid == 4 and passed == ran and failed == 0
    assert not list((tmp_path / "f").iterdir()), "no failure was kept"


def test_fuzz_bodies_prints_the_counts_and_the_control_flow_census(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["bodies", "--count", "2", "--seed", "11"], capfd)
    assert code == 0
    counts = r"control-flow graphs fuzzed: 2 generated, \d+ ran, \d+ passed, \d+ rejected as invalid, 0 failed"
    assert re.search(counts, out), out
    census = re.search(r"control flow \(.*\): (.*)", out)
    assert census is not None and re.search(r"\b(If|Loop|Scan) \d+", census.group(1)), out


def test_fuzz_bytes_prints_the_counts(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["bytes", "--count", "6", "--seed", "3"], capfd)
    assert code == 0
    counts = re.search(r"(\d+) tried, (\d+) processed, (\d+) refused .* (\d+) failed", out)
    assert counts is not None, out
    tried, processed, refused, failed = map(int, counts.groups())
    assert tried == 6 and processed + refused == 6 and failed == 0


def test_fuzz_opsets_prints_the_table_and_counts(capfd: pytest.CaptureFixture[str]) -> None:
    # the demo CNN from opset 17 and from 7, and two backend models: the whole sweep is a campaign of its own
    code, out, _ = run(["opsets", "--opsets", "17", "--table", "--limit", "4"], capfd)
    assert code == 0
    assert "| 17 |" in out
    assert re.search(r"opset sweep: 4 models x opsets 17-17 .* 0 FAILED", out), out


@pytest.mark.parametrize(
    "argv",
    [
        ["graphs", "--count", "0"],
        ["bodies", "--count", "0"],
        ["bytes", "--count", "5", "--timeout", "0"],
        ["opsets", "--opsets", "9-7"],
        ["opsets", "--opsets", "seven"],
        ["opsets", "--limit", "0"],
    ],
)
def test_fuzz_bad_settings_are_one_line_errors(argv: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(argv, capfd)
    assert code == 9
    assert err.startswith("onnxsat: error: ") and err.count("\n") == 1


def test_the_module_entry_runs_from_the_repository_root() -> None:
    """`make fuzz` runs `python -m tools.fuzz` from the repository root: the entry itself, in its own process."""
    root = Path(__file__).resolve().parents[1]

    def fuzz(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tools.fuzz", "graphs", *args]
        return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300, check=False)

    done = fuzz("--count", "1", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert re.search(r"1 generated, \d+ ran, \d+ passed, \d+ rejected as invalid, 0 failed", done.stdout), done.stdout
    bad = fuzz("--count", "0")
    assert bad.returncode == 9 and bad.stderr == "onnxsat: error: --count must be at least 1 (got 0)\n"
