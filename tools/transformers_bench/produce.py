"""Each tool's result for one model, made in its own measured child process (:mod:`.child`).

ONNXSat runs as the real ``onnxsat optimize`` command with ``--report``, which gives its e-graph size and
phase seconds; each peer runs through :mod:`.peer`. The children run one after another and before any
timing session exists, so no child shares the machine with another tool or with the benchmark's sessions.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnxsat
from tools.transformers_bench.child import ChildRun, run_child

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout holding ``tools``: put on the children's path so that the peer entry point imports."""
ONNXSAT_ROOT = Path(onnxsat.__file__).resolve().parents[1]
"""Where this process imported onnxsat from: first on the children's path, so that they run the same code."""


@dataclass
class Produced:
    """One tool's result: the file it wrote (None if it made none, with ``reason``) and its measured run."""

    source: str
    path: Path | None
    run: ChildRun | None
    reason: str = ""
    own_seconds: float | None = None
    """The tool's own call inside the child (ONNXSat: its phases after load, up to the save)."""
    report: dict[str, Any] = field(default_factory=dict)
    """ONNXSat's ``--report`` JSON; empty for a peer."""


def child_env() -> dict[str, str]:
    # An installed onnxsat is found anyway; a site-packages folder ahead of the standard library could shadow it.
    source = [] if ONNXSAT_ROOT.name.endswith("-packages") else [str(ONNXSAT_ROOT)]
    paths = [*source, str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def produce_onnxsat(model: Path, work: Path) -> Produced:
    """``onnxsat optimize MODEL -o OUT --report R.json`` in a child."""
    out, report_path = work / f"{model.stem}.onnxsat.onnx", work / f"{model.stem}.onnxsat.json"
    command = [sys.executable, "-m", "onnxsat", "optimize", str(model), "-o", str(out), "--report", str(report_path)]
    run = run_child(command, child_env())
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    phases = report.get("phases", {})
    own = sum(v for k, v in phases.items() if k not in ("load", "save")) if phases else None
    if not run.ok or not out.exists():
        return Produced("onnxsat", None, run, f"failed: {run.failure()}", own, report)
    return Produced("onnxsat", out, run, own_seconds=own, report=report)


def produce_peer(name: str, model: Path, work: Path, model_type: str | None = None) -> Produced:
    """One peer on ``model`` in a child; not installed or not applicable is a result with its reason."""
    out = work / f"{model.stem}.{name}.onnx"
    command = [sys.executable, "-m", "tools.transformers_bench.peer", name, str(model), str(out)]
    if model_type is not None:
        command += ["--model-type", model_type]
    run = run_child(command, child_env())
    said = _last_json(run.stdout)
    if "skipped" in said:
        return Produced(name, None, run, str(said["skipped"]))
    if not run.ok or not out.exists():
        return Produced(name, None, run, f"failed: {run.failure()}")
    return Produced(name, out, run, own_seconds=said.get("seconds"))


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return {}
    return {}
