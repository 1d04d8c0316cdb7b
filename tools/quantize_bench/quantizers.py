"""The quantizers compared, one function each: a case in, a file (or why none) and its own seconds out.

ORT's quantizer is run as its documentation tells a user to: ``quant_pre_process`` first (if it fails,
the raw model is quantized and the row says so), then ``quantize_static`` (QDQ, per-channel int8
weights, uint8 activations, MinMax on the case's calibration samples) or ``quantize_dynamic`` (int8).
``onnxsat quantize`` and onnx-neural-compressor run as subprocesses, so their time, memory and crashes are
their own; the neural compressor needs its own venv (its pins clash with ours) and is skipped, saying
why, when that venv is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from tools.quantize_bench.cases import Case

TIMEOUT = 1800.0
INC_PYTHON = Path(os.environ.get("ONNXSAT_INC_PYTHON", "/tmp/inc/bin/python"))
"""The Python of a venv with ``onnx-neural-compressor`` installed (``pip install onnx-neural-compressor``)."""


@dataclass
class Quantized:
    quantizer: str
    path: Path | None
    """The file written; None when the quantizer wrote none (``note`` says why)."""
    seconds: float | None
    note: str = ""


class SamplesReader(CalibrationDataReader):
    """ORT's calibration reader over ``samples``, ``batch`` at a time."""

    def __init__(self, name: str, samples: np.ndarray, batch: int) -> None:
        self.feeds = [{name: samples[i : i + batch]} for i in range(0, len(samples), batch)]
        self.index = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.index >= len(self.feeds):
            return None
        self.index += 1
        return self.feeds[self.index - 1]

    def rewind(self) -> None:
        self.index = 0


def first_line(error: BaseException | str, limit: int = 140) -> str:
    """The first line of a message or exception; a bare ``assert`` says which function it failed in."""
    if isinstance(error, BaseException) and not str(error).strip() and error.__traceback__ is not None:
        error = f"{type(error).__name__} in {traceback.extract_tb(error.__traceback__)[-1].name}"
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else text)[:limit]


def preprocessed(case: Case, out_dir: Path) -> tuple[Path, str]:
    """``quant_pre_process``'s output, or the raw model and why pre-processing failed. Runs in ``out_dir``:
    its symbolic shape inference leaves a temporary file in the working directory."""
    target = out_dir.resolve() / f"{case.name}.ort_pre.onnx"
    here = Path.cwd()
    try:
        os.chdir(out_dir)
        quant_pre_process(str(here / case.model), str(target))
        return target, ""
    except Exception as error:  # a failing pre-process is a finding: the user then quantizes the raw model
        return case.model, f"pre-process failed ({first_line(error, 80)}), raw model quantized"
    finally:
        os.chdir(here)


def _timed(name: str, out: Path, work: Callable[[], str]) -> Quantized:
    start = time.perf_counter()
    try:
        note = work()
    except Exception as error:  # the quantizer raising is a row of the table, not the end of the run
        return Quantized(name, None, time.perf_counter() - start, f"failed: {first_line(error)}")
    return Quantized(name, out if out.exists() else None, time.perf_counter() - start, note)


def ort_static(case: Case, out_dir: Path) -> Quantized:
    out = out_dir / f"{case.name}.ort_static.onnx"

    def work() -> str:
        source, note = preprocessed(case, out_dir)
        reader = SamplesReader(case.input_name, case.calibration, case.calibration_batch)
        quantize_static(
            str(source),
            str(out),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        return note

    return _timed("ORT static", out, work)


def ort_dynamic(case: Case, out_dir: Path) -> Quantized:
    out = out_dir / f"{case.name}.ort_dynamic.onnx"

    def work() -> str:
        source, note = preprocessed(case, out_dir)
        quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8)
        return note

    return _timed("ORT dynamic", out, work)


def calibration_file(case: Case, out_dir: Path) -> Path:
    """The calibration samples as an .npz (``inputs``): what onnxsat ``--data`` and the neural compressor read."""
    path = out_dir / f"{case.name}.calibration.npz"
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        np.savez(path, inputs=case.calibration)
    return path


def onnxsat_note(report: Path) -> str:
    """The chosen mode, the budget, nodes left in float and the held-out drop, from ``--report``."""
    if not report.exists():
        return ""
    data = json.loads(report.read_text())
    nodes = data.get("nodes") or []
    kept = sum(not node.get("quantized") for node in nodes)
    parts = [f"mode {data.get('chosen')}", f"{len(nodes) - kept}/{len(nodes)} nodes int8"]
    held = data.get("held_out") or {}
    if held.get("drop") is not None:
        parts.append(f"its held-out drop {held['drop']:.2%}")
    speedup = (data.get("latency") or {}).get("speedup")
    if speedup:
        parts.append(f"its own timing {speedup:.2f}x")
    return ", ".join(parts)


def onnxsat(case: Case, out_dir: Path) -> Quantized:
    """``python -m onnxsat quantize`` (auto mode) with ``--data`` the same calibration samples."""
    out, report = out_dir / f"{case.name}.onnxsat.onnx", out_dir / f"{case.name}.onnxsat.json"
    for stale in (out, report):
        stale.unlink(missing_ok=True)
    data = case.onnxsat_data or str(calibration_file(case, out_dir))
    argv = [sys.executable, "-m", "onnxsat", "quantize", str(case.model), "-o", str(out), "--data", data]
    argv += ["--report", str(report), *(["--max-drop", case.max_drop] if case.max_drop else []), *case.extra_args]
    argv += ["--latency-batch", str(case.latency_batch)]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return Quantized("onnxsat quantize", None, time.perf_counter() - start, f"timed out after {TIMEOUT:.0f} s")
    seconds = time.perf_counter() - start
    note = onnxsat_note(report)
    if done.returncode != 0 or not out.exists():
        why = first_line(done.stderr or done.stdout or f"exit {done.returncode}")
        return Quantized("onnxsat quantize", None, seconds, f"exit {done.returncode}: {why}; {note}".rstrip("; "))
    return Quantized("onnxsat quantize", out, seconds, note)


def neural_compressor(case: Case, out_dir: Path, python: Path = INC_PYTHON) -> Quantized:
    """onnx-neural-compressor's static PTQ (same recipe as ORT static) through :mod:`inc_runner`."""
    name = "neural-compressor"
    if not python.exists():
        return Quantized(name, None, None, f"not run: no venv with onnx-neural-compressor at {python}")
    out = out_dir / f"{case.name}.inc.onnx"
    out.unlink(missing_ok=True)
    runner = Path(__file__).with_name("inc_runner.py")
    argv = [str(python), str(runner), str(case.model), str(calibration_file(case, out_dir)), str(out)]
    argv += ["--batch", str(case.calibration_batch)]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": ""}
        )
    except subprocess.TimeoutExpired:
        return Quantized(name, None, time.perf_counter() - start, f"timed out after {TIMEOUT:.0f} s")
    seconds = time.perf_counter() - start
    if done.returncode != 0 or not out.exists():
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return Quantized(name, None, seconds, f"failed: {first_line(lines[-1] if lines else 'no output')}")
    return Quantized(name, out, seconds)


QUANTIZERS: dict[str, Callable[[Case, Path], Quantized]] = {
    "ort-static": ort_static,
    "ort-dynamic": ort_dynamic,
    "onnxsat": onnxsat,
    "inc": neural_compressor,
}
