"""Session parameter tuning, like Olive's OrtSessionParamsTuning: which ONNX Runtime session settings run
this model fastest on this machine?

The knobs: intra-op threads, inter-op threads, sequential or parallel execution, the graph
optimization level, and the execution providers this ORT build has. Each candidate is a
:class:`SessionSettings`; the best one is written as JSON that ``onnxsat bench compare
--session-settings`` and the Python API (``verify.session(..., settings=...)``) reuse.

Design choices, and why:

- Measured, not guessed, and side by side: every candidate's session lives in one process, and each
  timed round runs every session once in a rotating order (``timing.time_rounds``), after warm-up
  rounds. The speedup is the median over rounds of (ORT default time / candidate time) *in that
  round*, which cancels drift that a ratio of two medians would keep: identical graphs timed in
  separate passes differed by 5-8%, the median of interleaved per-round ratios by 2%.
- The reference is ORT's default session (``SessionOptions()``: intra-op 0 = ORT's choice, level
  all, sequential), measured in the same rounds. A second default session is the noise probe: its
  ratio would be 1.0 on a quiet machine, so its bootstrap interval says which differences are real.
- Spinning is off in every session, the default included: with several sessions alive, idle
  sessions' spinning threads steal the cores from the running one and inflated its time up to 2x
  (ONNX Runtime 1.31, two vCPUs). ``to_session_options`` keeps it off, so a deployment runs what was
  measured.
- Each candidate's outputs are compared with the model's run under ORT off on the same seeded inputs
  (``verify.random_inputs``; ``--input-shape`` sizes dynamic dims): a candidate that is fast because
  a fusion changed the numbers beyond tolerance is ranked last, never chosen. A quantized model (QDQ
  pairs, integer ops) is compared with ORT's default session instead: from its extended level on, ORT
  runs QDQ pairs as integer kernels, which round differently from ORT off by design, and the default is
  what the model was deployed and checked with.
- The default grid is small (about a dozen candidates on two cores, so a small model tunes in
  seconds): optimization levels basic/extended/all, intra-op threads 1, powers of two and the core
  count, sequential and parallel (2 inter-op threads). ``full=True`` adds level ``disabled`` (with
  ONNX Runtime 1.31, level all ran a BERT-base export at 0.91x the speed of no optimization: its fused
  SkipLayerNormalization took 614 us where Add + LayerNormalization took 104 us at [1,128,768]),
  every intra-op count up to the cores and every inter-op count.
- Providers: CPU, and each other provider this build has, with CPU as fallback for the ops it lacks.
  AzureExecutionProvider is left out: it sends requests to a remote endpoint and runs nothing here.
- Every candidate's session is alive at once, with its own copy of pre-packed weights: a model
  should fit in memory about (candidates + 2) times.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import onnxruntime as ort

from onnxsat.errors import RuntimeUnsupportedError, SettingsError
from onnxsat.inputs import InputsLike, InputSpec
from onnxsat.model_io import check_model, load_runnable, model_folder
from onnxsat.quantized_already import runs_in_integers
from onnxsat.runtime.offline import LEVELS
from onnxsat.timing import (
    RoundTimes,
    describe_inputs,
    median_interval,
    noise_band,
    noise_verdict,
    ratios_to,
    readable_form,
    time_rounds,
)
from onnxsat.verification import (
    Tolerance,
    compare_outputs,
    session,
    sized_reference_run,
    tidy_ort_message,
)

SESSION_LEVELS = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, **LEVELS}
"""Graph optimization levels by name, as a settings file spells them."""

EXECUTION_MODES = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL, "parallel": ort.ExecutionMode.ORT_PARALLEL}

CPU = "CPUExecutionProvider"
REMOTE_PROVIDERS = frozenset({"AzureExecutionProvider"})
"""Providers that run nothing on this machine, so there is nothing of theirs to time."""

DEFAULT_ROUNDS = 20
"""Timed rounds: each runs every candidate once. With ~14 sessions, a 20 ms model tunes in about 6 s."""
DEFAULT_WARMUP = 3
"""Untimed rounds first: ORT allocates its arenas and pre-packs weights on the first runs."""


@dataclass(frozen=True)
class SessionSettings:
    """ONNX Runtime session settings, as ``onnxsat tune`` writes them. The defaults are ORT's own.

    Thread counts of 0 let ORT choose (its intra-op default is one thread per physical core).
    ``providers`` are in priority order; ORT falls back to the next for ops a provider lacks.
    """

    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    execution_mode: str = "sequential"
    graph_optimization_level: str = "all"
    providers: tuple[str, ...] = (CPU,)

    def __post_init__(self) -> None:
        for name in ("intra_op_num_threads", "inter_op_num_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SettingsError(f"session setting {name} must be an integer >= 0 (got {value!r})")
        if self.execution_mode not in EXECUTION_MODES:
            raise SettingsError(
                f"session setting execution_mode must be one of {', '.join(EXECUTION_MODES)} "
                f"(got {self.execution_mode!r})"
            )
        if self.graph_optimization_level not in SESSION_LEVELS:
            raise SettingsError(
                f"session setting graph_optimization_level must be one of {', '.join(SESSION_LEVELS)} "
                f"(got {self.graph_optimization_level!r})"
            )
        providers = self.providers
        if isinstance(providers, str) or not providers or not all(isinstance(p, str) for p in providers):
            raise SettingsError(f"session setting providers must be a non-empty list of names (got {providers!r})")
        object.__setattr__(self, "providers", tuple(providers))  # a list read from JSON, kept hashable

    @property
    def optimization_level(self) -> ort.GraphOptimizationLevel:
        return SESSION_LEVELS[self.graph_optimization_level]

    def to_session_options(self) -> ort.SessionOptions:
        """``SessionOptions`` with these settings and spinning off, as they were measured."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_num_threads
        options.inter_op_num_threads = self.inter_op_num_threads
        options.execution_mode = EXECUTION_MODES[self.execution_mode]
        options.graph_optimization_level = self.optimization_level
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return options

    def check_providers(self) -> None:
        """Refuse providers this ORT build lacks: ORT would only warn and quietly run on the CPU."""
        missing = [p for p in self.providers if p not in ort.get_available_providers()]
        if missing:
            raise SettingsError(
                f"session settings name providers this ONNX Runtime does not have: {', '.join(missing)} "
                f"(available: {', '.join(ort.get_available_providers())})"
            )

    def describe(self) -> str:
        """One line for tables and settings lines, e.g. ``level all, intra 2, inter 1, sequential, CPU``."""
        providers = "+".join(p.removesuffix("ExecutionProvider") for p in self.providers)
        return (
            f"level {self.graph_optimization_level}, intra {self.intra_op_num_threads}, "
            f"inter {self.inter_op_num_threads}, {self.execution_mode}, {providers}"
        )

    def to_json(self) -> str:
        data = asdict(self)
        data["providers"] = list(self.providers)
        return json.dumps(data, indent=2)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionSettings:
        """Settings from a mapping; an unknown key is an error (a typo would otherwise be silently ignored)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SettingsError(f"unknown session setting {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SessionSettings:
        """Settings from a JSON file ``onnxsat tune`` wrote, checked against this machine's providers."""
        source = Path(path)
        try:
            data = json.loads(source.read_text())
        except OSError as error:
            raise SettingsError(f"cannot read session settings {source}: {error.strerror or error}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise SettingsError(f"session settings {source} are not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise SettingsError(f"session settings {source} must hold a JSON object, not {type(data).__name__}")
        try:
            settings = cls.from_dict(data)
        except SettingsError as error:
            raise SettingsError(f"{source}: {error}") from None
        settings.check_providers()
        return settings


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def provider_choices() -> list[tuple[str, ...]]:
    """CPU alone, then each other local provider with CPU as its fallback."""
    local = [p for p in ort.get_available_providers() if p != CPU and p not in REMOTE_PROVIDERS]
    return [(CPU,), *((p, CPU) for p in local)]


def candidate_grid(full: bool = False, cores: int | None = None) -> list[SessionSettings]:
    """The settings :func:`tune` measures (see the module doc for what the small and full grids hold)."""
    cores = cores or available_cores()
    if full:
        levels = list(SESSION_LEVELS)
        intra = list(range(1, cores + 1))
        inter = list(range(2, cores + 1))
    else:
        levels = list(LEVELS)
        intra = sorted({1 << k for k in range(cores.bit_length()) if 1 << k <= cores} | {cores})
        inter = [2] if cores > 1 else []
    modes = [("sequential", 1), *(("parallel", n) for n in inter)]
    return [
        SessionSettings(threads, inter_threads, mode, level, providers)
        for providers in provider_choices()
        for level in levels
        for threads in intra
        for mode, inter_threads in modes
    ]


DEFAULT_LABEL = "ORT default"
NOISE_LABEL = "ORT default (again)"


@dataclass
class Candidate(RoundTimes):
    """One measured session: its settings, its times, its per-round ratio to ORT's default session."""

    settings: SessionSettings
    label: str = ""
    """Set for the two reference sessions (``ORT default``, ``ORT default (again)``)."""
    status: str = "ok"
    """``ok`` or ``skipped`` (``reason`` says why: ORT could not make the session, or outputs differ)."""
    reason: str = ""
    max_abs_diff: float | None = None
    times: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.label or self.settings.describe()


@dataclass
class TuneResult:
    model: str
    inputs: str
    rounds: int
    warmup: int
    ranking: list[Candidate]
    """Measured candidates, fastest first (by median speedup over ORT's default), then the skipped ones."""
    default: Candidate
    noise: Candidate
    reference: str = "ORT off"
    """What every candidate's outputs were compared with: ORT with its optimizations off, or its default session
    where that rounds differently by design (integer kernels) or by its own fusions."""

    @property
    def best(self) -> SessionSettings:
        """The fastest candidate's settings when they beat ORT's default beyond the noise probe's band; else
        the default's (a "best" within noise ran 0.89x the default on a second look)."""
        ok = [c for c in self.ranking if c.status == "ok"]
        if ok and self.verdict(ok[0]) in ("faster", ""):  # "": no noise probe to tell (one round)
            return ok[0].settings
        return self.default.settings

    def verdict(self, candidate: Candidate) -> str:
        """``faster``/``slower`` than ORT's default only beyond what a second default session measures."""
        if candidate.status != "ok" or not self.noise.ratios:
            return ""
        return noise_verdict(median_interval(candidate.ratios), noise_band(self.noise.ratios))

    def table(self) -> str:
        """The ranking as aligned text, the two reference sessions last."""
        header = ["rank", "settings", "median ms", "p95 ms", "speedup", "vs noise", "max |diff|"]
        rows = [header]
        for rank, candidate in enumerate(self.ranking, start=1):
            rows.append(self._cells(str(rank), candidate, self.verdict(candidate)))
        rows.append(self._cells("-", self.default, "baseline"))
        rows.append(self._cells("-", self.noise, "noise probe"))
        widths = [max(len(row[i]) for row in rows if len(row) == len(header)) for i in range(len(header))]
        lines = []
        for row in rows:
            if len(row) != len(header):  # a skipped candidate: its reason runs on
                lines.append(f"{row[0]:>{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
                continue
            cells = [f"{row[0]:>{widths[0]}}", f"{row[1]:<{widths[1]}}"]
            cells += [f"{cell:>{width}}" for cell, width in zip(row[2:], widths[2:], strict=True)]
            lines.append("  ".join(cells).rstrip())
        lines.append(f"outputs compared with {self.reference}")
        return "\n".join(lines)

    @staticmethod
    def _cells(rank: str, candidate: Candidate, verdict: str) -> list[str]:
        if candidate.status != "ok":
            return [rank, candidate.name, f"skipped: {candidate.reason}"]
        diff = "-" if candidate.max_abs_diff is None else f"{candidate.max_abs_diff:.1e}"
        return [
            rank,
            candidate.name,
            f"{candidate.median_ms:.3f}",
            f"{candidate.p95_ms:.3f}",
            f"{candidate.speedup:.3f}x",
            verdict,
            diff,
        ]


ROUNDING = 10
"""How many times the verification tolerance ORT's default session may differ from ORT off and still be taken
as the truth (its fusions round differently); beyond that it is refused as it was."""


def _near(names: list[str], expected: list, outputs: list, tolerance: Tolerance) -> bool:
    """Within ``ROUNDING`` times the tolerance: a difference of rounding, not of results."""
    rounding = replace(tolerance, rtol=ROUNDING * tolerance.rtol, atol=ROUNDING * tolerance.atol)
    return all(c.ok for c in compare_outputs(names, expected, outputs, rounding))


def tune(
    model_path: str | os.PathLike[str],
    inputs: InputsLike = None,
    rounds: int = DEFAULT_ROUNDS,
    warmup: int = DEFAULT_WARMUP,
    full: bool = False,
    grid: Sequence[SessionSettings] | None = None,
) -> TuneResult:
    """Measure ``grid`` (default: :func:`candidate_grid`) on the model file side by side; rank the results.

    Sessions load the file themselves, so external data is read from beside it. Raises the usual
    user errors for a missing or unreadable model and RuntimeUnsupportedError when ORT cannot run it.
    """
    if rounds < 1 or warmup < 0:
        raise SettingsError(f"rounds must be at least 1 and warm-up rounds at least 0 (got {rounds}, {warmup})")
    path = Path(model_path)
    model, _ = load_runnable(path)
    check_model(model)
    inputs = InputSpec.of(inputs)
    inputs.check(model)
    # the result's inputs line names the sizes every candidate runs at
    inputs, reference = sized_reference_run(model, inputs, base_dir=model_folder(path))
    tolerance = Tolerance().for_model(model)
    names = [o.name for o in model.graph.output]
    default, noise = Candidate(SessionSettings(), DEFAULT_LABEL), Candidate(SessionSettings(), NOISE_LABEL)
    candidates = [Candidate(settings) for settings in (grid if grid is not None else candidate_grid(full))]

    expected, against = reference.outputs, "ORT off"
    integer = runs_in_integers(model)
    timed: list[Candidate] = []
    runners = []
    readable = readable_form(path)
    for candidate in [default, noise, *candidates]:
        try:
            settings = candidate.settings
            sess = session(readable, settings.optimization_level, settings=settings)
            outputs = sess.run(None, reference.feeds)
        except Exception as error:  # ORT raises several unrelated exception types
            candidate.status = "skipped"
            candidate.reason = "ONNX Runtime cannot run it: " + tidy_ort_message(" ".join(str(error).split()))[:200]
            continue
        if candidate is default and integer:  # rounding differs between levels by design: the default is the truth
            expected, against = outputs, "ORT's default (the model runs in integer kernels there)"
        comparisons = compare_outputs(names, expected, outputs, tolerance)
        if candidate is default and not all(c.ok for c in comparisons) and _near(names, expected, outputs, tolerance):
            # ORT's own fusions round differently from ORT off (2 of 4,608 values of a speech CNN, by 4e-05):
            # the session users run anyway is the truth, rather than no tuning at all
            worst = max((c.max_abs_diff for c in comparisons), default=0.0)
            expected, against = outputs, f"ORT's default (its own fusions differ from ORT off by up to {worst:.1e})"
            comparisons = compare_outputs(names, expected, outputs, tolerance)
        candidate.max_abs_diff = max((c.max_abs_diff for c in comparisons), default=0.0)
        if not all(c.ok for c in comparisons):
            candidate.status = "skipped"
            candidate.reason = (
                f"outputs differ from {against} beyond rtol {tolerance.rtol:g}, atol {tolerance.atol:g} "
                f"(max |diff| {candidate.max_abs_diff:.1e})"
            )
            continue
        timed.append(candidate)
        runners.append(lambda sess=sess: sess.run(None, reference.feeds))
    if default.status != "ok":
        raise RuntimeUnsupportedError(f"ORT's default session cannot run the model: {default.reason}")

    times = time_rounds(runners, rounds, warmup)
    for candidate, own in zip(timed, times, strict=True):
        candidate.times = own
        candidate.ratios = ratios_to(times[0], own)
    measured = sorted((c for c in candidates if c.status == "ok"), key=lambda c: (-c.speedup, c.median_ms))
    skipped = [c for c in candidates if c.status != "ok"]
    inputs_text = describe_inputs(reference.feeds)
    return TuneResult(str(path), inputs_text, rounds, warmup, measured + skipped, default, noise, against)
