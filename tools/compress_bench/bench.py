"""``onnxsat compress`` measured the way its goals are stated, side by side in one run per model.

For each model: ``onnxsat compress`` runs as a user would (a child process, ``--data`` the case's
calibration samples, ``--eval-data`` its evaluation samples, which the search never sees), then the
written model and the fp32 original are timed together (ORT all optimizations, 1 thread, batch 1,
interleaved rounds, median of per-round ratios with its bootstrap interval) and scored by the case's own
measure on the evaluation samples: top-1 for the digits ResNets, the catalogue's agreement with the fp32
model for the real models. With ``--ray-check``, the first model is compressed a second time on a local
Ray instance with the same seed, and the two chosen recipes are compared.

Models and data come from the quantization benchmark's cases (:mod:`tools.quantize_bench.cases`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from onnxsat.timing import environment_line, geometric_mean
from tools.quantize_bench.cases import (
    ALL_MODELS,
    CONVOLUTION_NETS,
    DEFAULT_DIGITS_MODEL,
    DIGITS_RESNET,
    Case,
    make_case,
)
from tools.quantize_bench.latency import time_against
from tools.quantize_bench.quantizers import calibration_file, first_line

EVALUATION_FILE = "{name}.evaluation.npz"


@dataclass
class Result:
    model: str
    measure: str
    baseline: float
    score: float | None
    speedup: tuple[float, float, float] | None
    fp32_ms: float | None
    recipe: str
    seconds: float
    evaluations: int
    note: str = ""
    labelled: bool = False


def compress(
    case: Case, out_dir: Path, max_drop: str, minutes: float, extra: Sequence[str] = (), tag: str = ""
) -> tuple[Path | None, dict, float, str]:
    """Run ``onnxsat compress`` on ``case``; (the written model or None, its report, seconds, error line)."""
    out = out_dir / f"{case.name}{tag}.compressed.onnx"
    report = out_dir / f"{case.name}{tag}.compress.json"
    for stale in (out, report):
        stale.unlink(missing_ok=True)
    data = case.onnxsat_data or str(calibration_file(case, out_dir))
    evaluation = out_dir / EVALUATION_FILE.format(name=case.name)
    if case.onnxsat_data is None and not evaluation.exists():
        np.savez(evaluation, inputs=case.evaluation)
    eval_data = "digits-test" if case.name == DIGITS_RESNET else str(evaluation)
    argv = [sys.executable, "-m", "onnxsat", "compress", str(case.model), "-o", str(out), "--report", str(report)]
    argv += ["--data", data, "--eval-data", eval_data, "--max-drop", max_drop, "--budget-minutes", str(minutes)]
    argv += ["--html", str(out.with_suffix(".html")), *extra]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=minutes * 60 * 3 + 600)
    seconds = time.perf_counter() - start
    data_report = json.loads(report.read_text()) if report.exists() else {}
    if done.returncode != 0 or not out.exists():
        return None, data_report, seconds, first_line(done.stderr or done.stdout or f"exit {done.returncode}")
    return out, data_report, seconds, ""


def bench_case(case: Case, out_dir: Path, max_drop: str, minutes: float, rounds: int, warmup: int) -> Result:
    baseline = case.score(case.model)
    out, report, seconds, error = compress(case, out_dir, max_drop, minutes)
    evaluations = len(report.get("candidates", []))
    if out is None:
        return Result(case.name, case.measure, baseline, None, None, None, "-", seconds, evaluations, error)
    timing = time_against(case.model, {"compressed": out}, case.timing_feeds, rounds, warmup)
    held = report.get("held_out") or {}
    note = f"compress's own held-out drop {held['drop']:.2%}" if held.get("drop") is not None else ""
    if report.get("stopped_early"):
        note += "; stopped by the time budget"
    return Result(
        case.name, case.measure, baseline, case.score(out), timing.speedups["compressed"], timing.fp32_ms,
        report.get("chosen", "?"), seconds, evaluations, note, case.labelled,
    )  # fmt: skip


def ray_check(case: Case, out_dir: Path, max_drop: str, minutes: float) -> str:
    """Compress ``case`` again on a local Ray instance; say whether the chosen recipe matches the local run's."""
    local = json.loads((out_dir / f"{case.name}.compress.json").read_text()).get("recipe")
    out, report, seconds, error = compress(case, out_dir, max_drop, minutes, ["--ray", "auto"], tag=".ray")
    if out is None:
        return f"Ray run failed: {error}"
    same = "the same recipe" if report.get("recipe") == local else "a different recipe"
    return f"local and Ray (`--ray auto`, same seed) chose {same}: {report.get('chosen')} ({seconds:.0f} s on Ray)"


def markdown(results: Sequence[Result]) -> str:
    lines = [
        "| model | measure | original | compressed | speedup [interval] | fp32 ms | recipe | seconds | candidates "
        "| note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        score = f"{r.score:.2%}" if r.score is not None else "-"
        speed = f"{r.speedup[0]:.2f}x [{r.speedup[1]:.2f}-{r.speedup[2]:.2f}]" if r.speedup else "-"
        fp32 = f"{r.fp32_ms:.3f}" if r.fp32_ms is not None else "-"
        lines.append(
            f"| {r.model} | {r.measure} | {r.baseline:.2%} | {score} | {speed} | {fp32} | {r.recipe} | "
            f"{r.seconds:.0f} | {r.evaluations} | {r.note} |"
        )
    return "\n".join(lines)


def summary(results: Sequence[Result]) -> list[str]:
    real = [r for r in results if r.model in CONVOLUTION_NETS]
    lines = []
    if real:
        speeds = [r.speedup[0] if r.speedup and r.score is not None and r.score >= 0.99 else 1.0 for r in real]
        lines.append(
            f"real-suite convolution nets ({', '.join(r.model for r in real)}): geometric mean "
            f"{geometric_mean(speeds):.2f}x (a model with no file or agreement under 0.99 counts 1.00x)"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tools.compress_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(ALL_MODELS), choices=ALL_MODELS)
    parser.add_argument("--digits-model", type=Path, default=DEFAULT_DIGITS_MODEL)
    parser.add_argument(
        "--digits-data",
        help="the ResNet's search data (default digits-train, the digits it was trained on; a .validation.npz "
        "that `tools.zoo.digits_resnet --validation N` set apart searches on digits it never saw)",
    )
    parser.add_argument("--max-drop", default=None, help="default: the case's (0.5%% for the ResNet, else 1%%)")
    parser.add_argument("--minutes", type=float, default=20.0, help="compress's --budget-minutes")
    parser.add_argument("--ray-check", action="store_true", help="also compress the first model on local Ray")
    parser.add_argument("--out-dir", type=Path, default=Path("out/compress_bench"))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    notes: list[str] = []
    for index, name in enumerate(args.models):
        case = make_case(name, args.digits_model)
        if name == DIGITS_RESNET and args.digits_data:
            searched = f"{case.measure}, searched on {args.digits_data}"
            case = replace(case, onnxsat_data=args.digits_data, measure=searched)
        max_drop = args.max_drop or case.max_drop or "1%"
        results.append(bench_case(case, args.out_dir, max_drop, args.minutes, args.rounds, args.warmup))
        if args.ray_check and index == 0:
            notes.append(ray_check(case, args.out_dir, max_drop, args.minutes))
        text = "\n".join(
            [
                f"# onnxsat compress benchmark\n\n`python -m tools.compress_bench {' '.join(argv)}`\n",
                environment_line(),
                "",
                "Speedups: ORT all optimizations, 1 thread, batch 1, compressed vs fp32 in one set of interleaved "
                f"rounds ({args.rounds} after {args.warmup} warm-up), median of per-round ratios [bootstrap "
                "interval]. Scores on evaluation samples compress never saw (`--eval-data`).",
                "",
                markdown(results),
                "",
                *summary(results),
                *notes,
            ]
        )
        if args.markdown:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(text + "\n")
        print(markdown(results[-1:]), flush=True)
    print(text)
