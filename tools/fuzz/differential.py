"""Differential check of the optimizer on one model: every target's result against the original.

The original must first prove itself a fair test case: it passes ``onnx.checker`` (full check) and
ONNX Runtime runs it on two seeded input sets. Otherwise the outcome is "invalid": the generator made
something the tools refuse, which says nothing about the optimizer. Then, for every target, the real
pipeline (``optimize_model``) runs and the outcome is "failed" when

- it raises anything (a valid model must optimize),
- its own verification (seed 0) reports a mismatch,
- the outputs differ on a second, independent input seed (one seed can hide a wrong constant),
- target "none" (no rewrites) does not reproduce the original's outputs bit for bit,
- the result fails the full ONNX check, changes the graph outputs, or ("portable") adds a non-standard op,
- the input model was modified, or optimizing it again gives different bytes (nondeterminism).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import TARGETS
from onnxsat.inputs import random_inputs
from onnxsat.op_kinds import DEFAULT_DOMAINS, qualified_op
from onnxsat.proto_fields import bodies_of
from onnxsat.verification import OutputComparison, Tolerance, compare_outputs, run_model

SEEDS = (0, 1)
"""Input seeds: 0 is the one ``optimize_model`` verifies with; 1 is a fresh set it never saw."""

PASSED, INVALID, FAILED = "passed", "invalid", "failed"


@dataclass(frozen=True)
class Outcome:
    """The verdict on one model; for a failure, the target and what kind of failure it was."""

    status: str
    target: str | None = None
    kind: str = ""
    detail: str = ""

    @property
    def signature(self) -> tuple[str, str | None, str]:
        """What a shrunk model must still show to count as the same failure."""
        return (self.status, self.target, self.kind)

    def describe(self) -> str:
        where = f" [{self.target}]" if self.target else ""
        return f"{self.status}{where} {self.kind}: {self.detail}".strip()


def feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """The verifier's seeded inputs, each as an ndarray (ORT refuses a bare numpy scalar)."""
    return {name: np.asarray(value) for name, value in random_inputs(model, seed=seed).items()}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:300] if text else ''}"


def original_problem(model: onnx.ModelProto) -> tuple[str | None, list[list[np.ndarray]]]:
    """Why ``model`` is no fair test case (None if it is), and its outputs on each seed of ``SEEDS``."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as error:  # checker and shape-inference errors, and protobuf ones
        return f"onnx checker: {_first_line(error)}", []
    outputs = []
    for seed in SEEDS:
        try:
            outputs.append(run_model(model, feeds(model, seed), "original model"))
        except Exception as error:
            return f"ONNX Runtime (seed {seed}): {_first_line(error)}", []
    return None, outputs


def _mismatches(comparisons: Iterable[OutputComparison]) -> str:
    bad = [c for c in comparisons if not c.ok]
    return "; ".join(
        f"{c.name}: max abs {c.max_abs_diff:.3g}, max rel {c.max_rel_diff:.3g} {c.note}".rstrip() for c in bad
    )


def _bitwise_differences(names: Sequence[str], expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> str:
    """Outputs that are not identical to the last bit (same dtype, shape and values; NaN equals NaN)."""
    different = []
    for name, want, got in zip(names, expected, actual, strict=True):
        want, got = np.asarray(want), np.asarray(got)
        same_kind = want.dtype == got.dtype and want.shape == got.shape
        nan_ok = want.dtype.kind in "fc"
        if not (same_kind and np.array_equal(want, got, equal_nan=nan_ok)):
            different.append(name)
    return ", ".join(different)


def _foreign_ops(model: onnx.ModelProto) -> set[str]:
    """Ops outside the standard ONNX domain, bodies included (a model may bring its own; "portable" must add
    none, and settling an If may bring a body's call of a model-local function into the main graph)."""
    return _foreign_in(model.graph)


def _foreign_in(graph: onnx.GraphProto) -> set[str]:
    ops = {qualified_op(n.domain, n.op_type) for n in graph.node if n.domain not in DEFAULT_DOMAINS}
    for node in graph.node:
        for body in bodies_of(node):
            ops |= _foreign_in(body)
    return ops


def check_target(
    model: onnx.ModelProto,
    target: str,
    reference: Sequence[Sequence[np.ndarray]],
    determinism: bool = True,
    tolerance: Tolerance | None = None,
) -> Outcome:
    """Optimize ``model`` for ``target`` and hold the result to every rule in the module docstring."""
    tolerance = tolerance or Tolerance()
    before = model.SerializeToString()
    try:
        optimized, report = optimize_model(model, OptimizeOptions(target=target, tolerance=tolerance))
    except Exception as error:
        return Outcome(FAILED, target, f"exception {type(error).__name__}", _first_line(error))
    if model.SerializeToString() != before:
        return Outcome(FAILED, target, "input modified", "optimize_model changed the model it was given")
    names = [o.name for o in model.graph.output]
    if [o.name for o in optimized.graph.output] != names:
        return Outcome(FAILED, target, "outputs changed", f"graph outputs {[o.name for o in optimized.graph.output]}")
    result = report.verification
    if result is None or not result.ok:
        detail = (result.error or _mismatches(result.outputs)) if result else "no verification"
        return Outcome(FAILED, target, "mismatch", f"verification (seed {SEEDS[0]}): {detail}")
    try:
        onnx.checker.check_model(optimized, full_check=True)
    except Exception as error:
        return Outcome(FAILED, target, "invalid result", f"onnx checker: {_first_line(error)}")
    if target == "portable":
        foreign = sorted(_foreign_ops(optimized) - _foreign_ops(model))
        if foreign:
            return Outcome(FAILED, target, "non-standard op", ", ".join(foreign))
    model_tolerance = tolerance.for_model(model)  # the same floor for low-precision models as the gate's
    for seed, expected in zip(SEEDS, reference, strict=True):
        try:
            actual = run_model(optimized, feeds(model, seed), "optimized model")
        except Exception as error:
            return Outcome(FAILED, target, "runtime error", f"seed {seed}: {_first_line(error)}")
        if target == "none":
            different = _bitwise_differences(names, expected, actual)
            if different:
                return Outcome(FAILED, target, "not bit-identical", f"seed {seed}: {different}")
        detail = _mismatches(compare_outputs(names, expected, actual, model_tolerance))
        if detail:
            return Outcome(FAILED, target, "mismatch", f"seed {seed}: {detail}")
    if determinism:
        try:
            again, _ = optimize_model(model, OptimizeOptions(target=target, tolerance=tolerance))
        except Exception as error:
            return Outcome(FAILED, target, "nondeterministic", f"the second run raised {_first_line(error)}")
        if again.SerializeToString() != optimized.SerializeToString():
            return Outcome(FAILED, target, "nondeterministic", "optimizing the same model twice gave different bytes")
    return Outcome(PASSED, target)


def check_model(model: onnx.ModelProto, targets: Sequence[str] | None = None, determinism: bool = True) -> Outcome:
    """The verdict on ``model`` over ``targets`` (default: every target); the first failure wins."""
    problem, reference = original_problem(model)
    if problem is not None:
        return Outcome(INVALID, None, "original rejected", problem)
    for target in targets if targets is not None else TARGETS:
        outcome = check_target(model, target, reference, determinism)
        if outcome.status != PASSED:
            return outcome
    return Outcome(PASSED)
