"""Hooks for the e-graph tests: a one-line summary of the ONNX backend-model round trip."""

from __future__ import annotations

import pytest

_BACKEND_FILE = "test_roundtrip_backend.py"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = {}
    for outcome in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"):
        reports = terminalreporter.stats.get(outcome, [])
        counts[outcome] = sum(
            1
            for report in reports
            if _BACKEND_FILE in getattr(report, "nodeid", "") and getattr(report, "when", "call") in ("call", "setup")
        )
    total = sum(counts.values())
    if not total:
        return
    ran = total - counts["skipped"]
    terminalreporter.write_sep("-", "ONNX backend-model round trip")
    terminalreporter.write_line(
        f"{total} tests: {ran} ran ({counts['passed']} passed, {counts['failed'] + counts['error']} failed), "
        f"{counts['skipped']} skipped (ONNX Runtime cannot load the original model)"
    )
