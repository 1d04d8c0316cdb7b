"""``onnxsat bench compare``: ONNXSat next to ONNX Runtime alone and the other ONNX optimizers, timed side by side.

The question it answers is the one a user asks before adopting ONNXSat: on *my* model, is the result
faster under ONNX Runtime than the original (which ORT already optimizes on its own), and than what
onnxsim, onnxslim, onnxoptimizer, onnxscript's optimizer or ORT's transformers optimizer give? And is the
difference larger than what this machine's noise alone produces?

Design choices, and why:

- One process, every session created before any is timed, one fixed intra-op thread (printed) and
  spinning off (``timing.timing_session``): an idle session beside a running one then steals no cores, and
  every variant sees the same machine state. Separate processes would each see their own frequency,
  cache and memory-placement luck.
- Rounds, not blocks: each timed round runs every variant once, in an order that rotates and
  reverses every cycle (ABBA-like), so no variant is always first or always after the same one. The
  speedup is the median over rounds of baseline_time / variant_time *in that round*, which cancels
  drift (thermal, other tenants) that a ratio of two medians would keep.
- The noise is measured, not assumed: a second, independent session of the baseline ("original, ORT
  all (again)") is timed like any variant. Its median ratio would be exactly 1.0 on a quiet machine;
  the 90% bootstrap interval of that median, made symmetric around 1.0, is the noise band. A variant
  is "faster" or "slower" only when the 90% bootstrap interval of its own median ratio lies wholly
  outside the band, since both medians are estimates from the same rounds. The per-round 5-95% spread
  of the noise probe is printed too (and every variant's is in the CSV).
- Correctness beside speed: each variant's outputs (under its own ORT level) are compared with the
  original under ORT off on the same seeded inputs (``verify.random_inputs`` / ``compare_outputs``),
  so a peer that is fast because it is wrong shows as a MISMATCH.
- Peers come from ``bench/peers.py`` and are optional: a missing or failing peer is a "skipped" row
  with its reason, never a crash. Optimization wall times are recorded for ONNXSat (including its
  verification gate) and every peer.
- ``--session-settings`` (a file ``onnxsat tune`` wrote) gives every session its tuned thread counts,
  execution mode and providers; each row keeps its own optimization level, since the level is what
  the rows compare.
- Figures are printed, never asserted. The exit code is 1 only when ONNXSat itself failed on a model
  or its result (under ORT off) does not match the original: that is a bug of ours, not a timing.
- Models with external data are loaded whole (after ``model_io.load_model`` checked every reference),
  because the peers need the weights in memory; a model must fit in one protobuf (2 GiB).
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat import model_io
from onnxsat.bench import peers as peer_registry
from onnxsat.bench.writing import model_labels
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.errors import OnnxSatError, RuntimeUnsupportedError, SettingsError
from onnxsat.html import Page, write_page
from onnxsat.html.charts import grouped_bars
from onnxsat.inputs import InputSpec, parse_input_shapes
from onnxsat.normal_form import working_form
from onnxsat.runtime.tune import SessionSettings
from onnxsat.timing import (
    LEVELS,
    NOISE_CONFIDENCE,
    NoiseBand,
    RoundTimes,
    describe_inputs,
    environment_line,
    geometric_mean,
    load_whole,
    noise_band,
    noise_verdict,
    ratios_to,
    time_rounds,
    timing_session,
)
from onnxsat.verification import Reference, Tolerance, compare_outputs, sized_reference_run

DEFAULT_PAIRS = 30
"""Timed rounds per model: with ~10 variants, enough for a steady median in about a minute on ResNet-50."""
DEFAULT_WARMUP = 5
"""Untimed rounds first: ORT allocates its arenas and pre-packs weights on the first runs."""

ORIGINAL_OFF = "original, ORT off"
BASELINE = "original, ORT all"
NOISE = "original, ORT all (again)"
ONNXSAT_OFF = "onnxsat, ORT off"
ONNXSAT_ALL = "onnxsat, ORT all"


@dataclass
class CompareSettings:
    threads: int = 1
    pairs: int = DEFAULT_PAIRS
    warmup: int = DEFAULT_WARMUP
    target: str = "ort"
    cost_model: str | None = None
    """None keeps ``OptimizeOptions``' default cost model."""
    inputs: InputSpec = field(default_factory=InputSpec)
    keep_dir: Path | None = None
    session: SessionSettings | None = None
    """Tuned session settings (``onnxsat tune``) for every session instead of ``threads``."""

    def check(self) -> None:
        if self.threads < 1 or self.pairs < 1 or self.warmup < 0:
            raise SettingsError(
                f"--threads and --pairs must be at least 1 and --warmup at least 0 "
                f"(got {self.threads}, {self.pairs}, {self.warmup})"
            )


@dataclass
class Variant(RoundTimes):
    """One row: a model (original, ONNXSat's or a peer's) run under one ORT optimization level."""

    name: str
    source: str
    """``original``, ``onnxsat`` or a peer's name: which model file this row runs."""
    level: str
    """``off`` (ORT_DISABLE_ALL) or ``all`` (ORT_ENABLE_ALL)."""
    status: str = "ok"
    """``ok`` or ``skipped`` (with ``reason``)."""
    reason: str = ""
    nodes: int | None = None
    optimize_seconds: float | None = None
    max_abs_diff: float | None = None
    outputs_match: bool | None = None
    diff_note: str = ""
    times: list[float] = field(default_factory=list)
    """Seconds of each timed round."""
    ratios: list[float] = field(default_factory=list)
    """Per round: the baseline's time / this variant's time (above 1 = faster than the baseline)."""

    @property
    def timed(self) -> bool:
        return self.status == "ok" and bool(self.times)


@dataclass
class ModelComparison:
    path: str
    label: str
    inputs: str
    """The inputs the runs were fed, e.g. ``data_0 [1,3,224,224] float32``."""
    tolerance: Tolerance
    variants: list[Variant] = field(default_factory=list)
    noise: NoiseBand | None = None
    constant_outputs: bool = False
    """Every output of the original is one value repeated: differences then say little about correctness."""

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    @property
    def onnxsat_ok(self) -> bool:
        """ONNXSat produced a model and, under ORT off, it matches the original."""
        off = self.variant(ONNXSAT_OFF)
        return off is not None and off.status == "ok" and off.outputs_match is not False

    def verdict(self, variant: Variant) -> str:
        """``within noise`` when the variant's interval reaches into the noise band, else faster or slower.

        Both the noise probe's median and the variant's are estimates from the same few rounds, so a
        variant is called faster only if even the low end of its interval is above the band.
        """
        if variant.name == BASELINE:
            return "baseline"
        if variant.name == NOISE:
            return "noise probe"
        if not variant.timed or self.noise is None:
            return ""
        return noise_verdict(variant.interval, self.noise)


# --------------------------------------------------------------------------------------------- inputs


def input_spec(specs: Sequence[str], inputs: str | None = None) -> InputSpec:
    """The inputs ``--input-shape`` specs (``["x:1,3,224,224"]``, as every command spells them) and the
    ``--inputs`` file describe; the ``x=1,3,224,224`` this command once took is refused with the fix."""
    for spec in specs:
        try:
            parse_input_shapes([spec])
        except SettingsError:
            name, sep, dims = spec.rpartition("=")
            if not sep or not name:
                raise
            raise SettingsError(f"--input-shape expects NAME:D1,D2,... (got {spec!r}; write {name}:{dims})") from None
    return InputSpec.from_options(specs, inputs)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:240] if text else type(error).__name__


# ------------------------------------------------------------------------------------------ producers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep a peer's log lines, warnings and prints out of the table (errors still raise)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def run_onnxsat(model: onnx.ModelProto, settings: CompareSettings) -> tuple[onnx.ModelProto, float]:
    """ONNXSat's result for ``model`` and the wall time of ``optimize_model`` (its verification included)."""
    options = OptimizeOptions(target=settings.target, inputs=settings.inputs)
    if settings.cost_model is not None:
        options.cost_model = settings.cost_model
    start = time.perf_counter()
    model, _, _ = working_form(model, settings.inputs.given)  # as `onnxsat optimize` loads it
    optimized, _report = optimize_model(model, options)
    return optimized, time.perf_counter() - start


def run_peer(function: peer_registry.PeerFunction, model: onnx.ModelProto) -> tuple[onnx.ModelProto, float]:
    """A peer's result and its wall time (its import is done first and not counted).

    Raises PeerSkipped with the reason when it is not installed, does not apply, or fails.
    """
    try:
        with _quiet():
            peer_registry.import_requirement(function)
    except ImportError as error:
        raise peer_registry.PeerSkipped(f"not installed ({_one_line(error)}; pip install 'onnxsat[bench]')") from None
    try:
        with _quiet():
            start = time.perf_counter()
            result = function(_copy(model))
            seconds = time.perf_counter() - start
    except peer_registry.PeerSkipped:
        raise
    except Exception as error:  # a peer may raise anything; its row says what
        raise peer_registry.PeerSkipped(f"failed: {_one_line(error)}") from None
    if not isinstance(result, onnx.ModelProto):
        raise peer_registry.PeerSkipped(f"failed: returned {type(result).__name__}, not a ModelProto")
    return result, seconds


def peer_versions(registry: Mapping[str, peer_registry.PeerFunction]) -> str:
    """``onnxsim 0.8.1, ...`` for the settings line; a peer that cannot be imported says so."""
    parts = []
    for name, function in registry.items():
        try:
            with _quiet():
                version = peer_registry.import_requirement(function)
        except ImportError:
            parts.append(f"{name} (not installed)")
            continue
        except Exception as error:  # a package that breaks on import is reported, not fatal
            parts.append(f"{name} (import failed: {type(error).__name__})")
            continue
        package = version.split(" ")[0] if version else ""
        parts.append(version if package == name else f"{name} ({version or 'built in'})")
    return ", ".join(parts) or "none"


# ------------------------------------------------------------------------------------------ the bench


def _feeds_for(sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seeded random feeds this session takes (a peer may drop an input nothing reads)."""
    names = {i.name for i in sess.get_inputs()}
    return {name: value for name, value in feeds.items() if name in names}


def _check_outputs(
    variant: Variant, outputs: list[np.ndarray], original: onnx.ModelProto, reference: Reference, tolerance: Tolerance
) -> None:
    names = [o.name for o in original.graph.output]
    if len(outputs) != len(reference.outputs):
        variant.max_abs_diff, variant.outputs_match = math.inf, False
        variant.diff_note = f"{len(outputs)} outputs, the original has {len(reference.outputs)}"
        return
    comparisons = compare_outputs(names, reference.outputs, outputs, tolerance)
    variant.max_abs_diff = max((c.max_abs_diff for c in comparisons), default=0.0)
    variant.outputs_match = all(c.ok for c in comparisons)
    variant.diff_note = "; ".join(f"{c.name}: {c.note}" for c in comparisons if c.note)


def _constant(output: np.ndarray) -> bool:
    values = np.asarray(output)
    return values.size > 1 and values.dtype.kind in "fiub" and bool(np.all(values == values.flat[0]))


def _keep(models: Mapping[str, onnx.ModelProto], folder: Path, label: str) -> None:
    for source, model in models.items():
        model_io.save_model(model, folder / f"{label}.{source}.onnx")


Made = tuple[onnx.ModelProto, float] | str
"""A variant's model made elsewhere (by a child process) and its optimization seconds, or why there is none."""


def compare_model(
    path: str | Path,
    settings: CompareSettings,
    registry: Mapping[str, peer_registry.PeerFunction] | None = None,
    label: str | None = None,
    made: Mapping[str, Made] | None = None,
) -> ModelComparison:
    """Build every variant of one model, time them side by side, compare their outputs.

    ``made`` gives, by source (``onnxsat`` or a peer's name), models already made elsewhere: those are
    timed as given instead of being made in this process, so a benchmark that measures each tool's own
    process (time, peak memory) still shares this timing loop.
    """
    registry = peer_registry.PEERS if registry is None else registry
    made = {} if made is None else made
    original = load_whole(path)
    settings.inputs.check(original)
    sized, reference = sized_reference_run(original, settings.inputs)  # raises if ORT cannot run the input
    settings = replace(settings, inputs=sized)  # the inputs' line names the sizes every variant runs at
    tolerance = Tolerance().for_model(original)
    result = ModelComparison(str(path), label or Path(path).name, describe_inputs(reference.feeds), tolerance)
    result.constant_outputs = all(_constant(output) for output in reference.outputs)

    models: dict[str, onnx.ModelProto] = {"original": original}
    seconds: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for source, given in made.items():
        if isinstance(given, str):
            skipped[source] = given
        else:
            models[source], seconds[source] = given
    try:
        if "onnxsat" not in made:
            models["onnxsat"], seconds["onnxsat"] = run_onnxsat(original, settings)
    except SettingsError:
        raise  # an unknown --cost or --target: the user's to fix, for every model
    except Exception as error:  # reported in its rows (and by the exit code), the peers still run
        skipped["onnxsat"] = f"failed: {error}" if isinstance(error, OnnxSatError) else f"failed: {_one_line(error)}"
    for name, function in registry.items():
        if name in made:
            continue
        try:
            models[name], seconds[name] = run_peer(function, original)
        except peer_registry.PeerSkipped as why:
            skipped[name] = str(why)

    plan = [
        Variant(ORIGINAL_OFF, "original", "off"),
        Variant(BASELINE, "original", "all"),
        Variant(NOISE, "original", "all"),
        Variant(ONNXSAT_OFF, "onnxsat", "off"),
        Variant(ONNXSAT_ALL, "onnxsat", "all"),
        *(Variant(f"{name}, ORT all", name, "all") for name in registry),
    ]
    runners: list[Callable[[], object]] = []
    timed: list[Variant] = []
    for variant in plan:
        result.variants.append(variant)
        if variant.source in skipped:
            variant.status, variant.reason = "skipped", skipped[variant.source]
            continue
        model = models[variant.source]
        variant.nodes = len(model.graph.node)
        variant.optimize_seconds = seconds.get(variant.source)
        try:
            sess = timing_session(model, LEVELS[variant.level], settings.threads, settings.session)
            feeds = _feeds_for(sess, reference.feeds)
            outputs = sess.run(None, feeds)
        except Exception as error:  # ORT raises several unrelated types
            if variant.source == "original":
                raise RuntimeUnsupportedError(f"ONNX Runtime cannot run the input model: {_one_line(error)}") from None
            variant.status, variant.reason = "skipped", f"ONNX Runtime cannot run its result: {_one_line(error)}"
            continue
        _check_outputs(variant, outputs, original, reference, tolerance)
        runners.append(lambda sess=sess, feeds=feeds: sess.run(None, feeds))
        timed.append(variant)

    if settings.keep_dir is not None:
        _keep(models, settings.keep_dir, result.label)

    times = time_rounds(runners, settings.pairs, settings.warmup)
    baseline_times = times[[v.name for v in timed].index(BASELINE)]
    for variant, own in zip(timed, times, strict=True):
        variant.times = own
        variant.ratios = ratios_to(baseline_times, own)
    noise = result.variant(NOISE)
    if noise is not None and noise.timed:
        result.noise = noise_band(noise.ratios)
    return result


# -------------------------------------------------------------------------------------------- output

_COLUMNS = ("variant", "nodes", "opt s", "median ms", "p95 ms", "speedup", "90% CI", "vs noise", "max |diff|")


def _cells(comparison: ModelComparison, variant: Variant) -> list[str]:
    if variant.status != "ok":
        return [variant.name, f"skipped: {variant.reason}"]
    opt = "-" if variant.optimize_seconds is None else f"{variant.optimize_seconds:.2f}"
    diff = "-" if variant.max_abs_diff is None else f"{variant.max_abs_diff:.1e}"
    if variant.outputs_match is False:
        diff += " MISMATCH" + (f" ({variant.diff_note})" if variant.diff_note else "")
    if not variant.timed:
        return [variant.name, str(variant.nodes), opt, "-", "-", "-", "-", "", diff]
    low, high = variant.interval
    return [
        variant.name,
        str(variant.nodes),
        opt,
        f"{variant.median_ms:.3f}",
        f"{variant.p95_ms:.3f}",
        f"{variant.speedup:.3f}x",
        f"{low:.3f}-{high:.3f}",
        comparison.verdict(variant),
        diff,
    ]


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Plain aligned text: the first column left, the others right; a short row's last cell runs on."""
    full = [r for r in rows if len(r) == len(_COLUMNS)]
    widths = [max(len(r[i]) for r in full) for i in range(len(_COLUMNS))]
    lines = []
    for row in rows:
        if len(row) != len(_COLUMNS):
            lines.append(f"{row[0]:<{widths[0]}}  {' '.join(row[1:])}")
            continue
        cells = [f"{row[0]:<{widths[0]}}"] + [f"{c:>{w}}" for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return lines


def noise_line(comparison: ModelComparison) -> str:
    band = comparison.noise
    if band is None:
        return "noise: not measured"
    low, high = band.bounds
    return (
        f"noise: a second session of the original under ORT all measures {band.median:.3f}x "
        f"({NOISE_CONFIDENCE:.0%} bootstrap interval of its median {band.interval[0]:.3f}-{band.interval[1]:.3f}, "
        f"per-round 5-95% {band.rounds[0]:.2f}-{band.rounds[1]:.2f}); "
        f'a speedup whose own {NOISE_CONFIDENCE:.0%} CI reaches into {low:.3f}x-{high:.3f}x is "within noise"'
    )


def _notes(comparison: ModelComparison) -> list[str]:
    """The lines under a model's table: the noise band, what the differences mean, a warning if needed."""
    tolerance = comparison.tolerance
    notes = [
        noise_line(comparison),
        "max |diff|: against the original under ORT off on the same seeded inputs; MISMATCH beyond "
        f"rtol {tolerance.rtol:g}, atol {tolerance.atol:g}",
    ]
    if comparison.constant_outputs:
        notes.append(
            "warning: every output of the original is one value repeated on these inputs, so output differences "
            "show little (weights of one constant value?)"
        )
    return notes


def model_table(comparison: ModelComparison) -> str:
    rows = [list(_COLUMNS), *(_cells(comparison, v) for v in comparison.variants)]
    header = f"model {comparison.label}: inputs {comparison.inputs}"
    return "\n".join([header, *_aligned(rows), *_notes(comparison)])


def speedup_summary(comparisons: Sequence[ModelComparison]) -> list[tuple[str, float, int]]:
    """(variant, geometric mean of its speedup, models) for each variant timed on every model."""
    names = [v.name for v in comparisons[0].variants] if comparisons else []
    summary = []
    for name in names:
        values = [v.speedup for c in comparisons if (v := c.variant(name)) is not None and v.timed]
        if values:
            summary.append((name, geometric_mean(values), len(values)))
    return summary


def summary_lines(comparisons: Sequence[ModelComparison]) -> list[str]:
    summary = dict((name, (mean, count)) for name, mean, count in speedup_summary(comparisons))
    total = len(comparisons)
    if ONNXSAT_ALL in summary:
        mean, count = summary[ONNXSAT_ALL]
        head = f'geometric mean over {count} of {total} models of the "{ONNXSAT_ALL}" speedup: {mean:.3f}x'
    else:
        head = f'geometric mean of the "{ONNXSAT_ALL}" speedup: not available (ONNXSat failed on every model)'
    others = ", ".join(
        f"{name} {mean:.3f}x" + (f" ({count} models)" if count != total else "")
        for name, (mean, count) in summary.items()
        if name not in (ONNXSAT_ALL, BASELINE)
    )
    return [head, f"  other variants (geometric mean): {others}"] if others else [head]


def settings_line(settings: CompareSettings) -> str:
    cost = settings.cost_model or f"{OptimizeOptions().cost_model} (the default)"
    sessions = f"intra-op threads {settings.threads} (inter-op 1, spinning off)"
    if settings.session is not None:
        sessions = f"tuned sessions ({settings.session.describe()}; each row at its own level, spinning off)"
    return (
        f"settings: {sessions}, {settings.pairs} timed rounds "
        f"after {settings.warmup} warm-up rounds, onnxsat target {settings.target}, cost model {cost}"
    )


def to_csv(comparisons: Sequence[ModelComparison], settings: CompareSettings) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "model",
            "variant",
            "status",
            "reason",
            "nodes",
            "optimize_s",
            "median_ms",
            "p95_ms",
            "speedup",
            "speedup_ci_low",
            "speedup_ci_high",
            "ratio_p5",
            "ratio_p95",
            "vs_noise",
            "noise_low",
            "noise_high",
            "max_abs_diff",
            "outputs_match",
            "threads",
            "rounds",
            "warmup",
        ]
    )
    for comparison in comparisons:
        bounds = comparison.noise.bounds if comparison.noise else (None, None)
        for v in comparison.variants:
            spread = v.ratio_spread if v.timed else (None, None)
            interval = v.interval if v.timed else (None, None)
            writer.writerow(
                [
                    comparison.label,
                    v.name,
                    v.status,
                    v.reason,
                    v.nodes,
                    _num(v.optimize_seconds),
                    _num(v.median_ms if v.timed else None),
                    _num(v.p95_ms if v.timed else None),
                    _num(v.speedup if v.timed else None),
                    _num(interval[0]),
                    _num(interval[1]),
                    _num(spread[0]),
                    _num(spread[1]),
                    comparison.verdict(v),
                    _num(bounds[0]),
                    _num(bounds[1]),
                    _num(v.max_abs_diff),
                    "" if v.outputs_match is None else v.outputs_match,
                    settings.threads,
                    settings.pairs,
                    settings.warmup,
                ]
            )
    return out.getvalue()


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def to_markdown(comparisons: Sequence[ModelComparison], settings: CompareSettings, environment: str) -> str:
    lines = ["# onnxsat bench compare", "", environment, "", settings_line(settings), ""]
    for comparison in comparisons:
        lines += [f"## {comparison.label}", "", f"inputs: {comparison.inputs}", ""]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _COLUMNS) + " |")
        lines.append("| --- | " + " | ".join("---:" for _ in _COLUMNS[1:]) + " |")
        for v in comparison.variants:
            cells = _cells(comparison, v)
            cells += [""] * (len(_COLUMNS) - len(cells))
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines += ["", *(f"- {note}" for note in _notes(comparison)), ""]
    lines += [*(f"- {line.strip()}" for line in summary_lines(comparisons)), ""]
    return "\n".join(lines)


def _page_row(comparison: ModelComparison, variant: Variant) -> tuple[object, ...]:
    diff = None if variant.max_abs_diff is None else f"{variant.max_abs_diff:.1e}"
    if variant.outputs_match is False:
        diff = f"{diff or ''} MISMATCH {variant.diff_note}".strip()
    if variant.status != "ok":
        return (variant.name, None, None, None, None, None, None, f"skipped: {variant.reason}", None)
    if not variant.timed:
        return (variant.name, variant.nodes, variant.optimize_seconds, None, None, None, None, "", diff)
    low, high = variant.interval
    return (
        variant.name,
        variant.nodes,
        variant.optimize_seconds,
        variant.median_ms,
        variant.p95_ms,
        f"{variant.speedup:.3f}x",
        f"{low:.3f}-{high:.3f}",
        comparison.verdict(variant),
        diff,
    )


def compare_page(comparisons: Sequence[ModelComparison], settings: CompareSettings, environment: str) -> Page:
    page = Page("ONNXSat bench compare", environment)
    page.paragraph(settings_line(settings))
    page.paragraph(
        'Speedup: median over rounds of ("original, ORT all" time / variant time); every round runs each session '
        "once, in rotating order.",
        note=True,
    )
    header = [
        "variant",
        "nodes",
        "optimize s",
        "median ms",
        "p95 ms",
        "speedup",
        f"{NOISE_CONFIDENCE:.0%} CI",
        "verdict",
        "max |diff|",
    ]
    for comparison in comparisons:
        page.heading(f"{comparison.label}")
        page.paragraph(f"{comparison.path}: inputs {comparison.inputs}")
        page.table(
            header,
            [_page_row(comparison, v) for v in comparison.variants],
            bad_rows=[i for i, v in enumerate(comparison.variants) if v.outputs_match is False],
        )
        page.paragraph(noise_line(comparison), note=True)
        if comparison.constant_outputs:
            page.paragraph(
                "Warning: every output of the original is one value repeated on these inputs, so output "
                "differences show little.",
                note=True,
            )
        timed = [v for v in comparison.variants if v.timed]
        if timed:
            page.figure(
                grouped_bars(
                    [v.name for v in timed],
                    {"speedup": [v.speedup for v in timed]},
                    '"original, ORT all" time / variant time',
                    f"{comparison.label}: speedup per variant",
                    reference=1.0,
                ),
                alt=f"bar chart of speedup per variant for {comparison.label}",
            )
    summary = speedup_summary(comparisons)
    if summary:
        page.heading("Summary")
        page.table(["variant", "geometric mean speedup", "models"], [(n, f"{m:.3f}x", c) for n, m, c in summary])
        page.figure(
            grouped_bars(
                [name for name, _, _ in summary],
                {"geometric mean speedup": [mean for _, mean, _ in summary]},
                "speedup",
                "Geometric mean speedup over the models",
                reference=1.0,
            ),
            alt="bar chart of the geometric mean speedup per variant",
        )
    failed = [c.label for c in comparisons if not c.onnxsat_ok]
    if failed:
        page.status(False, f"ONNXSat failed or does not match the original on: {', '.join(failed)}")
    return page


# ---------------------------------------------------------------------------------------------- entry


def _check_outputs_paths(models: Sequence[str], *outputs: str | None) -> None:
    for output in outputs:
        if output is None:
            continue
        for model in models:
            model_io.check_output_path(model, output)


def run_compare(
    models: Sequence[str],
    input_shapes: Sequence[str] = (),
    inputs: str | None = None,
    threads: int = 1,
    pairs: int = DEFAULT_PAIRS,
    warmup: int = DEFAULT_WARMUP,
    target: str = "ort",
    cost_model: str | None = None,
    csv_path: str | None = None,
    markdown_path: str | None = None,
    html_path: str | None = None,
    keep: str | None = None,
    registry: Mapping[str, peer_registry.PeerFunction] | None = None,
    session_settings: str | None = None,
) -> int:
    """``onnxsat bench compare``: print a table per model and the summary; exit code (see module doc).

    ``session_settings`` is a JSON file ``onnxsat tune`` wrote; its intra-op threads replace ``threads``.
    ``inputs`` is a ``.npz`` feeds file whose arrays every model is fed (the other inputs are random).
    """
    registry = peer_registry.PEERS if registry is None else registry
    settings = CompareSettings(threads, pairs, warmup, target, cost_model, input_spec(input_shapes, inputs))
    settings.check()
    if session_settings is not None:
        settings.session = SessionSettings.load(session_settings)
        settings.threads = settings.session.intra_op_num_threads  # 0: ORT's choice, as in the CSV's column
    for model in models:
        model_io.check_input_path(model)
    _check_outputs_paths(models, csv_path, markdown_path, html_path)
    settings.keep_dir = model_io.output_folder(keep, "--keep")

    environment = f"environment: {environment_line()}"
    print(f"ONNXSat bench compare ({environment_line()})")
    print(settings_line(settings))
    print(f"peers: {peer_versions(registry)}")
    print(
        f'speedup: median over rounds of ("{BASELINE}" time / variant time); every round runs each session once, '
        "in rotating order"
    )
    comparisons = []
    for path, label in zip(models, model_labels(models), strict=True):
        print(flush=True)
        comparison = compare_model(path, settings, registry, label)
        comparisons.append(comparison)
        print(model_table(comparison), flush=True)
    print()
    for line in summary_lines(comparisons):
        print(line)
    if csv_path is not None:
        model_io.write_text_atomic(to_csv(comparisons, settings), csv_path)
    if markdown_path is not None:
        model_io.write_text_atomic(to_markdown(comparisons, settings, environment), markdown_path)
    if html_path is not None:
        write_page(compare_page(comparisons, settings, environment), html_path)
    failed = [c.label for c in comparisons if not c.onnxsat_ok]
    if failed:
        print(f"ONNXSat failed or does not match the original on: {', '.join(failed)}")
    return 1 if failed else 0
