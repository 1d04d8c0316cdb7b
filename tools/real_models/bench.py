"""``python -m tools.real_models bench``: every command on every real model, through the command line.

Per model: its real inputs are drawn and written as a feeds file, the original is run on them (and
how many it reads right is said, so a bad input maker is seen before any agreement is trusted), then
each command runs as a subprocess. A written model is run on the same inputs and compared with the
original by the model's own measure; the optimized one is also timed against the original with
``onnxsat.timing`` (ORT all optimizations, one thread, interleaved rounds after a warm-up, median of
per-round ratios), on the real inputs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from onnxsat.timing import LEVELS, environment_line, median_interval, ratios_to, time_rounds, timing_session
from tools.real_models import cache
from tools.real_models.agreement import Reading, agreement, feeds_of, first_output, original_reading
from tools.real_models.catalogue import MODELS, RealModel
from tools.real_models.cli_runs import COMMANDS, CommandRun, run_command
from tools.real_models.samples import write_feeds


@dataclass(frozen=True)
class Row:
    model: str
    command: str
    result: str
    seconds: float | None
    agreement: str
    speedup: str


@dataclass(frozen=True)
class BenchSettings:
    rounds: int = 30
    warmup: int = 5


def latency_ratio(original: Path, candidate: Path, feeds: dict, settings: BenchSettings) -> str:
    """Median over interleaved rounds of original time / candidate time (above 1: the candidate is faster),
    with the bootstrap interval of that median: a ratio whose interval holds 1.0 is no change."""
    sessions = [timing_session(path, LEVELS["all"], threads=1) for path in (original, candidate)]
    runners = [lambda s=s: s.run(None, feeds) for s in sessions]
    before, after = time_rounds(runners, settings.rounds, settings.warmup)
    ratios = ratios_to(before, after)
    low, high = median_interval(ratios)
    return f"{statistics.median(ratios):.2f}x [{low:.2f}-{high:.2f}]"


def result_text(run: CommandRun) -> str:
    if run.outcome == "ok":
        return "ok"
    return f"{run.outcome}: {run.message}"


def bench_model(
    model: RealModel, out_dir: Path, commands: Sequence[str], settings: BenchSettings
) -> tuple[Reading, list[Row]]:
    """The original's reading of its real inputs, and one row per command."""
    original = cache.model_path(model)
    samples = model.make_inputs(original)
    feeds = feeds_of(model, samples)
    feeds_file = write_feeds(out_dir / f"{model.name}.feeds.npz", feeds)
    reference = first_output(original, feeds)
    reading = original_reading(model, original, samples, reference)
    rows = []
    for command in commands:
        run = run_command(command, model, original, out_dir, feeds_file)
        agreed, speedup = "", ""
        if run.wrote_model:
            assert run.output is not None
            try:
                agreed = f"{agreement(model, original, reference, run.output, feeds):.0%} {model.measure_name}"
            except Exception as error:  # a written model ORT cannot run is a finding, not a bench failure
                agreed = f"does not run: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
            if command in ("optimize", "quantize") and not agreed.startswith("does not run"):
                speedup = latency_ratio(original, run.output, feeds, settings)
        rows.append(Row(model.name, command, result_text(run), run.seconds, agreed, speedup))
    return reading, rows


HEADER = (
    "model",
    "command",
    "result",
    "seconds",
    "agreement (real inputs)",
    "ORT speedup (all opts, 1 thread, 90% interval)",
)


def cells(row: Row) -> list[str]:
    seconds = "" if row.seconds is None else f"{row.seconds:.1f}"
    return [row.model, row.command, row.result, seconds, row.agreement, row.speedup]


PLAIN_RESULT_WIDTH = 72
"""A refusal line is cut to this in the plain table (the Markdown one keeps it whole)."""


def shortened(text: str, width: int = PLAIN_RESULT_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render(rows: Sequence[Row], markdown: bool) -> str:
    table = [list(HEADER), *(cells(row) for row in rows)]
    if not markdown:
        table = [[shortened(cell) for cell in line] for line in table]
    if markdown:
        escaped = [[cell.replace("|", "\\|") for cell in line] for line in table]
        lines = ["| " + " | ".join(escaped[0]) + " |", "|" + "---|" * len(HEADER)]
        return "\n".join(lines + ["| " + " | ".join(line) + " |" for line in escaped[1:]])
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table
    )


def run_bench(
    names: Sequence[str], commands: Sequence[str], out_dir: Path, settings: BenchSettings, markdown: bool
) -> int:
    """Print the readings and the table; 1 if a model is not fetched or a command crashed, else 0."""
    rows: list[Row] = []
    notes: list[str] = []
    for name in names:
        model = MODELS[name]
        if not cache.is_cached(model):
            notes.append(f"{name}: not fetched (python -m tools.real_models fetch)")
            rows.append(Row(name, "-", "not fetched", None, "", ""))
            continue
        reading, model_rows = bench_model(model, out_dir, commands, settings)
        notes.append(f"{name}: the original reads {reading} real inputs right ({model.requirement})")
        rows += model_rows
        print(f"{name}: done", flush=True)
    print()
    print(f"{environment_line()}; {settings.rounds} timed rounds after {settings.warmup} warm-up")
    print("\n".join(notes))
    print()
    print(render(rows, markdown))
    failed = any(row.result.startswith(("crash", "not fetched")) for row in rows)
    return 1 if failed else 0


__all__ = ["COMMANDS", "BenchSettings", "run_bench"]
