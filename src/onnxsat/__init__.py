"""ONNXSat: make a pre-trained ONNX model smaller and faster without retraining, and prove it did no harm.

import onnxsat
report = onnxsat.optimize("in.onnx", "out.onnx")            # fuse, verify, write
report = onnxsat.optimize("in.onnx", "out.onnx", target="portable", report="report.json")
"""

from __future__ import annotations

from pathlib import Path

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.errors import OnnxSatError, VerificationFailedError
from onnxsat.report import OptimizeReport
from onnxsat.verification import Tolerance, VerificationResult, verify

__version__ = "0.1.0"


def optimize(
    input_path: str | Path,
    output_path: str | Path,
    *,
    target: str = "ort",
    report: str | Path | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    rtol: float = Tolerance.rtol,
    atol: float = Tolerance.atol,
    force: bool = False,
) -> OptimizeReport:
    """Optimize ``input_path`` into ``output_path``; verified against the original before writing."""
    from onnxsat.eqsat.optimizer import optimize as run

    options = OptimizeOptions(
        target=target, input_shapes=input_shapes or {}, tolerance=Tolerance(rtol, atol), force=force
    )
    return run(input_path, output_path, options, report_path=report)


__all__ = [
    "OnnxSatError",
    "OptimizeOptions",
    "OptimizeReport",
    "Tolerance",
    "VerificationFailedError",
    "VerificationResult",
    "__version__",
    "optimize",
    "optimize_model",
    "verify",
]
