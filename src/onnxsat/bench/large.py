"""``onnxsat bench large``: optimize a model over 2 GB end to end and measure its peak memory.

The goal: a model whose weights live in external data optimizes end to end, is written with
external data, and the optimizer's peak memory stays under 1.5x the model's size on disk.

How it is measured, and why:
- The model is written straight to disk by ``zoo.large`` (never held in memory).
- ``onnxsat optimize`` runs as the real command in a child process; its peak RSS comes from the
  kernel's accounting for that child (``os.wait4``), so the parent's own memory is not counted.
- Afterwards the parent checks what a user would: the input files are byte-for-byte unchanged, the
  output has a data file and a small protobuf, and the output computes what the input computes under
  ONNX Runtime (loaded from the files, one session at a time).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from onnxsat.errors import SettingsError
from onnxsat.inputs import random_inputs
from onnxsat.model_io import load_model, output_folder
from onnxsat.timing import environment_line
from onnxsat.verification import Tolerance, compare_outputs, session
from onnxsat.zoo.large import write_large_model

GOAL_RATIO = 1.5


@dataclass
class LargeModelResult:
    model_bytes: int
    build_seconds: float
    optimize_seconds: float
    peak_rss_bytes: int
    exit_code: int
    stderr: str
    verified: bool
    outputs_match: bool
    input_unchanged: bool
    output_protobuf_bytes: int
    output_data_bytes: int
    fusions: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.peak_rss_bytes / self.model_bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.verified and self.outputs_match and self.input_unchanged

    def lines(self) -> list[str]:
        gib = 2**30
        verdict = "MET" if self.ok and self.ratio < GOAL_RATIO else "NOT MET"
        return [
            f"model on disk      {self.model_bytes / gib:.2f} GiB ({self.model_bytes:,} bytes; built in "
            f"{self.build_seconds:.1f} s)",
            f"onnxsat optimize   exit {self.exit_code}, {self.optimize_seconds:.1f} s, fusions {self.fusions}",
            f"peak RSS           {self.peak_rss_bytes / gib:.2f} GiB = {self.ratio:.2f}x the model's size",
            f"output             protobuf {self.output_protobuf_bytes:,} bytes + data file "
            f"{self.output_data_bytes / gib:.2f} GiB",
            f"checks             verified by onnxsat: {self.verified}; outputs equal under ORT: "
            f"{self.outputs_match}; input unchanged: {self.input_unchanged}",
            f"goal: peak memory < {GOAL_RATIO}x the model's size, result verified: {verdict}",
        ]


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(16 * 2**20):
            digest.update(chunk)
    return digest.hexdigest()


def _outputs_match(original: Path, optimized: Path) -> bool:
    """Run both files under ORT (optimizations off) on the same inputs, one session alive at a time,
    and compare them as the verification gate does, on a seed the gate did not use."""
    model = load_model(original)
    feeds = random_inputs(model, seed=7)
    expected, actual = (
        session(path, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, lean=True).run(None, feeds)
        for path in (original, optimized)
    )
    names = [o.name for o in model.graph.output]
    return all(c.ok for c in compare_outputs(names, expected, actual, Tolerance()))


def measure_large_model(folder: Path, target_bytes: int) -> LargeModelResult:
    """Build the model in ``folder``, optimize it in a child process, and check the result."""
    source, output, report = folder / "large.onnx", folder / "out" / "large.opt.onnx", folder / "report.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model_bytes = write_large_model(source, target_bytes)
    built = time.perf_counter()
    before = {p: _digest(p) for p in (source, source.with_name(f"{source.name}.data"))}
    command = [sys.executable, "-m", "onnxsat", "optimize", str(source), "-o", str(output), "--report", str(report)]
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        stderr = errors.read().decode(errors="replace").strip()
    finished = time.perf_counter()
    written = child.returncode == 0 and output.exists()
    data = json.loads(report.read_text()) if report.exists() else {}
    return LargeModelResult(
        model_bytes=model_bytes,
        build_seconds=built - start,
        optimize_seconds=finished - built,
        peak_rss_bytes=usage.ru_maxrss * 1024,  # KiB on Linux
        exit_code=child.returncode,
        stderr=stderr,
        verified=bool(data.get("verification", {}).get("ok")),
        outputs_match=written and _outputs_match(source, output),
        input_unchanged=all(_digest(p) == digest for p, digest in before.items()),
        output_protobuf_bytes=output.stat().st_size if written else 0,
        output_data_bytes=output.with_name(f"{output.name}.data").stat().st_size if written else 0,
        fusions=dict(data.get("fusions", {})),
    )


def run_large_benchmark(size_gb: float, folder: str | None) -> int:
    """Print the measurement; exit 0 when the result is correct (the memory goal is reported in words)."""
    if size_gb <= 0:
        raise SettingsError(f"--size-gb must be positive (got {size_gb})")
    if folder is not None:
        folder = str(output_folder(folder, "--dir"))
    print(f"ONNXSat large-model benchmark ({environment_line()})", flush=True)
    with tempfile.TemporaryDirectory(prefix="onnxsat-large-", dir=folder) as work:
        result = measure_large_model(Path(work), int(size_gb * 1e9))
    for line in result.lines():
        print(line)
    if result.stderr:
        print(f"stderr of onnxsat optimize: {result.stderr}")
    return 0 if result.ok else 1
