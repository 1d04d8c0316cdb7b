"""The pipeline report: every pass's checks and notices gathered in one place."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StepRecord:
    place: str
    kind: str
    seconds: float
    ok: bool
    """The pass's own verification passed (for lossy passes: the result passes the checker and runs)."""
    notices: list[str] = field(default_factory=list)
    verification: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class PipelineReport:
    pipeline: str
    input: str
    output: str
    steps: list[StepRecord] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    """Passes skipped because an earlier one failed verification."""
    written: bool = False

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps) and not self.not_run

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)

    def to_table(self) -> str:
        lines = [f"pipeline {self.pipeline}: {self.input} -> {self.output}"]
        for step in self.steps:
            status = "ok" if step.ok else "FAILED verification"
            lines.append(f"{step.place:<11} {step.kind:<20} {step.seconds:>8.2f} s  {status}")
            lines.extend(f"    {notice}" for notice in step.notices)
            if not step.ok and step.verification:
                lines.append(f"    {_failure(step.verification)}")
        lines.extend(f"{place:<11} not run (an earlier pass failed)" for place in self.not_run)
        lines.append(f"written: {self.output}" if self.written else "nothing was written")
        return "\n".join(lines)


def _failure(verification: dict[str, Any]) -> str:
    if verification.get("error"):
        return str(verification["error"])
    bad = [o for o in verification.get("outputs", []) if not o["ok"]]
    return "; ".join(f"{o['name']}: max abs diff {o['max_abs_diff']:.3g}" for o in bad) or "failed"
