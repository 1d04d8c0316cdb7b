"""The opset sweep: test models converted to every opset from 7 to the newest, optimized, and checked.

ONNXSat's rules match on op types whose meaning moved between opsets (Clip's bounds became inputs in
opset 11, BatchNormalization lost ``spatial`` in 9, ...), and its encoder and decoder carry the
opset imports through the e-graph. The sweep shows, per (model, opset, target), that the optimized
model keeps the opset it was given and computes what the original computes, and that where ONNX
Runtime cannot run an opset, the error a user gets says which opset it is.

Each model is converted with ``onnx.version_converter``. A model onnx cannot convert is recorded as
"not convertible" with onnx's reason: that is a limit of onnx's converter, not of ONNXSat.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, version_converter

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import TARGETS
from onnxsat.errors import OnnxSatError, RuntimeUnsupportedError
from onnxsat.verification import VerificationResult, session
from onnxsat.zoo.synthetic import IR_VERSION, demo_cnn

FIRST_OPSET = 7
"""The oldest opset swept: ONNX Runtime has had no kernels for several opset-6 ops for years."""

MICROSOFT_DOMAIN = "com.microsoft"
BACKEND_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
BACKEND_SUITES = ("pytorch-converted", "pytorch-operator")
"""PyTorch exports bundled with onnx (opsets 6-12): convolutions, recurrent nets, pads, pools, ... ."""

OK = "ok"
ORT_OPSET = "ORT cannot run the opset"
ORT_MODEL = "ORT cannot run the model"
UNNAMED_OPSET = "ORT cannot load it, the error does not name the opset"
FAILED = "FAILED"
STATUSES = (OK, ORT_OPSET, ORT_MODEL, UNNAMED_OPSET, FAILED)
"""Outcomes of one optimize run. ``ORT_OPSET``: the input is refused with an error naming its opset.
``ORT_MODEL``: ONNX Runtime loads the opset but fails running this model (an input the converter
broke, say), which is no opset limit. ``UNNAMED_OPSET`` and ``FAILED`` are ONNXSat's bugs: the
issue asks that a user whose opset ONNX Runtime cannot load is told so."""


def newest_opset() -> int:
    """The newest default-domain opset the installed onnx defines (not the newest ORT can run)."""
    return onnx.defs.onnx_opset_version()


def default_opsets() -> list[int]:
    return list(range(FIRST_OPSET, newest_opset() + 1))


def default_opset(model: onnx.ModelProto) -> int:
    """The version ``model`` imports for the default domain (``""`` or its alias ``ai.onnx``)."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if len(versions) != 1:
        raise ValueError(f"model imports the default domain {len(versions)} times")
    return versions[0]


def demo_cnn_opset7() -> onnx.ModelProto:
    """``demo_cnn()`` declared at opset 7, so that converting it *up* reaches every opset of the sweep.

    onnx's converter has no BatchNormalization 15->14 adapter, so ``demo_cnn()`` (opset 17) converts
    no lower than 15, and its fusion patterns would go untested at opsets 7-14. Every op it uses means
    the same at opset 7 with the same attributes, except Clip, whose bounds were attributes before
    opset 11: they move from their initializers into attributes. The tests check this model computes
    exactly what ``demo_cnn()`` computes.
    """
    model = demo_cnn()
    weights = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Clip":
            low, high = (float(numpy_helper.to_array(weights[name])) for name in node.input[1:])
            del node.input[1:]
            node.attribute.extend([helper.make_attribute("min", low), helper.make_attribute("max", high)])
    used = {name for node in model.graph.node for name in node.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", FIRST_OPSET))
    onnx.checker.check_model(model)
    return model


def backend_models(suites: Iterable[str] = BACKEND_SUITES) -> list[tuple[str, onnx.ModelProto]]:
    """The bundled backend-test models of ``suites``, named ``suite/test_name``, in a stable order."""
    models = []
    for suite in suites:
        for folder in sorted(p for p in (BACKEND_DATA / suite).iterdir() if (p / "model.onnx").is_file()):
            models.append((f"{suite}/{folder.name}", onnx.load(str(folder / "model.onnx"))))
    return models


def default_models() -> list[tuple[str, onnx.ModelProto]]:
    """demo_cnn (from opset 17 and from opset 7) for the fusion rules, then the PyTorch backend models."""
    return [("demo_cnn", demo_cnn()), ("demo_cnn_opset7", demo_cnn_opset7()), *backend_models()]


class ConversionError(Exception):
    """``onnx.version_converter`` cannot take the model to the requested opset (onnx's limit)."""


def convert(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` converted to ``opset`` and checked; raise :class:`ConversionError` with onnx's reason.

    onnx's converter keeps the IR version, so an IR-3 model (every PyTorch export bundled with onnx)
    turns invalid when an adapter adds an initializer, as Pad 10->11 does for its pads: before IR 4
    every initializer had to be a graph input. The converted model gets at least the IR version its
    opset shipped with, capped at ``IR_VERSION`` as for every model ONNXSat builds, since ONNX
    Runtime 1.31 refuses the IR version onnx 1.23 stamps by default. The sweep varies opsets only.
    """
    try:
        converted = version_converter.convert_version(model, opset)
        shipped_with = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
        converted.ir_version = min(max(converted.ir_version, shipped_with), IR_VERSION)
        onnx.checker.check_model(converted)
    except Exception as error:  # the converter raises RuntimeError, IndexError, ValidationError, ...
        raise ConversionError(conversion_reason(error)) from None
    return converted


def conversion_reason(error: BaseException) -> str:
    """onnx's message without the C++ source location and assertion boilerplate it starts with."""
    text = " ".join(str(error).split()) or type(error).__name__
    text = re.sub(r"^\S+\.(h|cc|cpp):\d+: (\w+: )?", "", text)
    text = text.removeprefix("Assertion `false` failed: ")
    return f"{type(error).__name__}: {text}"


def conversion_category(reason: str) -> str:
    """A reason with version numbers and names of values masked, so alike failures group together."""
    masked = re.sub(r"\$?\d+", "N", reason)
    return re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", masked)[:160]


def names_opset(message: str, opset: int) -> bool:
    """Does an error message tell the user which opset is the problem ("opset 27", "Opset 27")?"""
    return re.search(rf"\bopset\W{{0,3}}{opset}\b", message, re.IGNORECASE) is not None


def ort_load_error(model: onnx.ModelProto) -> str | None:
    """ONNX Runtime's reason for refusing to load ``model`` (opset, kernels), or None if it loads.

    Loading is where ONNX Runtime checks opsets and finds kernels; an error raised later, while
    running, is about this model's data, not about its opset.
    """
    try:
        session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    except Exception as error:  # ORT raises several unrelated exception types
        return " ".join(str(error).split()) or type(error).__name__
    return None


def opset_imports(model: onnx.ModelProto) -> dict[str, int]:
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}


@dataclass(frozen=True)
class SweepCase:
    """One optimize run of the sweep: what happened, and the message or mismatch that says why."""

    model: str
    opset: int
    target: str
    status: str
    detail: str = ""
    seconds: float = 0.0


def check_case(name: str, converted: onnx.ModelProto, target: str) -> SweepCase:
    """Optimize ``converted`` for ``target`` and check the opset is kept and the outputs match.

    For target ``none`` (no rewrites) the outputs must be bit-identical, not merely close. An
    exception other than ONNX Runtime refusing the input is a failure: the sweep's models are valid.
    """
    opset = default_opset(converted)
    start = time.perf_counter()

    def case(status: str, detail: str = "") -> SweepCase:
        return SweepCase(name, opset, target, status, detail, time.perf_counter() - start)

    try:
        optimized, report = optimize_model(converted, OptimizeOptions(target=target), source=name)
    except RuntimeUnsupportedError as error:
        if names_opset(str(error), opset):
            return case(ORT_OPSET, str(error))
        return case(UNNAMED_OPSET if ort_load_error(converted) else ORT_MODEL, str(error))
    except Exception as error:  # any other error on a valid model is ONNXSat's bug
        kind = "OnnxSatError" if isinstance(error, OnnxSatError) else "crash"
        return case(FAILED, f"{kind} {type(error).__name__}: {' '.join(str(error).split())[:300]}")
    problems = []
    expected = opset_imports(converted)
    got = opset_imports(optimized)
    if target == "ort" and MICROSOFT_DOMAIN not in expected:
        got.pop(MICROSOFT_DOMAIN, None)
    if got != expected:
        problems.append(f"opset imports {opset_imports(optimized)} != {expected}")
    if optimized.ir_version != converted.ir_version:
        problems.append(f"IR version {optimized.ir_version} != {converted.ir_version}")
    result = report.verification
    if result is None or not result.ok:
        problems.append(f"outputs differ: {_mismatch(result)}")
    elif target == "none" and any(c.max_abs_diff != 0.0 for c in result.outputs):
        worst = max(c.max_abs_diff for c in result.outputs)
        problems.append(f"target none is not bit-identical (max abs diff {worst:g})")
    return case(FAILED, "; ".join(problems)) if problems else case(OK)


def _mismatch(result: VerificationResult | None) -> str:
    if result is None:
        return "no verification result"
    if result.error:
        return result.error
    bad = [c for c in result.outputs if not c.ok]
    return ", ".join(f"{c.name} max abs {c.max_abs_diff:g}{' ' + c.note if c.note else ''}" for c in bad)


@dataclass
class OpsetSweepResult:
    """Every conversion and every optimize run of a sweep, with the counts and tables that sum it up."""

    opsets: list[int]
    targets: list[str]
    models: list[str]
    conversions: dict[tuple[str, int], str | None] = field(default_factory=dict)
    """(model, opset) -> None when onnx converted it, else onnx's reason."""
    cases: list[SweepCase] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def converted(self) -> int:
        return sum(reason is None for reason in self.conversions.values())

    @property
    def not_convertible(self) -> dict[tuple[str, int], str]:
        return {key: reason for key, reason in self.conversions.items() if reason is not None}

    def counts(self) -> Counter[str]:
        return Counter(case.status for case in self.cases)

    @property
    def failures(self) -> list[SweepCase]:
        """ONNXSat's bugs: wrong or refused results on valid models, and errors that hide the opset."""
        return [case for case in self.cases if case.status in (FAILED, UNNAMED_OPSET)]

    @property
    def ok(self) -> bool:
        return not self.failures

    def ort_reasons(self) -> Counter[str]:
        """ONNX Runtime's messages for the inputs it cannot run, with how many runs gave each."""
        return Counter(case.detail for case in self.cases if case.status in (ORT_OPSET, ORT_MODEL, UNNAMED_OPSET))

    def conversion_categories(self) -> Counter[str]:
        return Counter(conversion_category(reason) for reason in self.not_convertible.values())

    def summary_line(self) -> str:
        counts = self.counts()
        pairs = len(self.conversions)
        return (
            f"opset sweep: {len(self.models)} models x opsets {_span(self.opsets)} = {pairs} pairs, "
            f"{self.converted} converted, {pairs - self.converted} not convertible (onnx); "
            f"{len(self.cases)} runs over targets {', '.join(self.targets)}: {counts[OK]} round-tripped OK, "
            f"{counts[ORT_OPSET]} ORT cannot run the opset (error names it), "
            f"{counts[ORT_MODEL]} ORT cannot run the model (not an opset limit), "
            f"{counts[UNNAMED_OPSET]} ORT cannot load it and the error does not name the opset, "
            f"{counts[FAILED]} FAILED; {self.seconds:.1f} s"
        )

    def to_table(self) -> str:
        """One Markdown row per opset: conversions, then runs OK per target, ORT refusals and failures.

        Runs ONNX Runtime cannot load without the error naming the opset count as FAILED.
        """
        header = ["opset", "converted", "not convertible", *(f"{t} OK" for t in self.targets)]
        header += ["ORT: opset refused", "ORT: model fails", "FAILED"]
        rows = [header, ["---:"] * len(header)]
        for opset in self.opsets:
            reasons = [r for (_, o), r in self.conversions.items() if o == opset]
            cases = [c for c in self.cases if c.opset == opset]
            status = Counter(c.status for c in cases)
            ok_by_target = Counter(c.target for c in cases if c.status == OK)
            row = [opset, reasons.count(None), len(reasons) - reasons.count(None)]
            row += [ok_by_target[t] for t in self.targets]
            row += [status[ORT_OPSET], status[ORT_MODEL], status[FAILED] + status[UNNAMED_OPSET]]
            rows.append([str(cell) for cell in row])
        return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def _span(opsets: Sequence[int]) -> str:
    if list(opsets) == list(range(min(opsets), max(opsets) + 1)):
        return f"{min(opsets)}-{max(opsets)}"
    return ",".join(map(str, opsets))


def run_opset_sweep(
    models: Sequence[tuple[str, onnx.ModelProto]] | None = None,
    opsets: Sequence[int] | None = None,
    targets: Sequence[str] = tuple(TARGETS),
    progress: bool = True,
) -> OpsetSweepResult:
    """Convert every model to every opset and optimize each conversion for every target.

    Defaults: :func:`default_models`, opsets 7 to the newest the installed onnx defines, and every
    target. With ``progress``, one line per model goes to stderr (the sweep takes minutes).
    """
    models = default_models() if models is None else list(models)
    opsets = default_opsets() if opsets is None else list(opsets)
    result = OpsetSweepResult(opsets=opsets, targets=list(targets), models=[name for name, _ in models])
    start = time.perf_counter()
    for index, (name, model) in enumerate(models, 1):
        before = len(result.cases)
        for opset in opsets:
            try:
                converted = convert(model, opset)
            except ConversionError as error:
                result.conversions[name, opset] = str(error)
                continue
            result.conversions[name, opset] = None
            result.cases.extend(check_case(name, converted, target) for target in targets)
        if progress:
            done = Counter(case.status for case in result.cases[before:])
            spelled = ", ".join(f"{done[s]} {s}" for s in STATUSES if done[s]) or "nothing converted"
            print(f"[{index}/{len(models)}] {name}: {spelled}", file=sys.stderr, flush=True)
    result.seconds = time.perf_counter() - start
    return result
