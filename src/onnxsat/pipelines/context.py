"""What the passes of one pipeline run share, and what each pass hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from onnxsat.verification import Tolerance, VerificationResult


@dataclass
class Context:
    """Settings every pass sees, and the model later ``verify`` passes compare against.

    ``reference`` starts as the pipeline's input and becomes each lossy pass's result (``sparsify``,
    ``prune``, a surgeon that changes numerics): after a deliberate loss, the next check is that
    nothing *else* changed the outputs.
    """

    base_dir: Path
    input_shapes: dict[str, list[int]]
    tolerance: Tolerance
    data: str | None
    reference: onnx.ModelProto
    reference_name: str = "the input model"


@dataclass
class StepOutcome:
    """One pass's result: the model, what it checked, what it did in a few lines, and its own report
    (as a dict) if it has one."""

    model: onnx.ModelProto
    verification: VerificationResult | None
    notices: list[str] = field(default_factory=list)
    rebase: bool = False
    """Later ``verify`` passes compare against this result (a deliberate loss, or a new interface)."""
    details: dict[str, Any] = field(default_factory=dict)
