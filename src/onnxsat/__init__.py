"""ONNXSat: make a pre-trained ONNX model smaller and faster without retraining, and prove it did no harm.

import onnxsat
report = onnxsat.optimize("in.onnx", "out.onnx")                      # fuse, verify, write
report = onnxsat.optimize("in.onnx", "out.onnx", target="portable", report="report.json")
report = onnxsat.sparsify("in.onnx", "out.onnx", max_drop=0.01, data="digits-test", sparsity=None)
report = onnxsat.prune("in.onnx", "out.onnx", rate=0.3, reconstruct=True, data="digits-train")
report = onnxsat.run_pipeline("pipeline.yaml")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from onnxsat.errors import OnnxSatError, VerificationFailedError

__version__ = "0.1.0"

_LAZY = {
    "optimize": "onnxsat.api",
    "sparsify": "onnxsat.api",
    "prune": "onnxsat.api",
    "quantize": "onnxsat.api",
    "compress": "onnxsat.api",
    "run_pipeline": "onnxsat.api",
    "OptimizeOptions": "onnxsat.eqsat.optimizer",
    "optimize_model": "onnxsat.eqsat.optimizer",
    "OptimizeReport": "onnxsat.report",
    "SparsifyOptions": "onnxsat.sparsity.sparsify",
    "PruneOptions": "onnxsat.pruning.prune",
    "QuantizeOptions": "onnxsat.quantization.quantize",
    "CompressOptions": "onnxsat.compression.compress",
    "Tolerance": "onnxsat.verification",
    "VerificationResult": "onnxsat.verification",
    "verify": "onnxsat.verification",
}
"""Public name -> the module defining it, imported on first use: the optimizer's engine (egglog) takes
about 0.4 s to import and pulls in graphviz, which a script that only sparsifies or prunes never needs."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnxsat' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


if TYPE_CHECKING:
    from onnxsat.api import compress, optimize, prune, quantize, run_pipeline, sparsify
    from onnxsat.compression.compress import CompressOptions
    from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
    from onnxsat.pruning.prune import PruneOptions
    from onnxsat.quantization.quantize import QuantizeOptions
    from onnxsat.report import OptimizeReport
    from onnxsat.sparsity.sparsify import SparsifyOptions
    from onnxsat.verification import Tolerance, VerificationResult, verify

__all__ = [
    "CompressOptions",
    "OnnxSatError",
    "OptimizeOptions",
    "OptimizeReport",
    "PruneOptions",
    "QuantizeOptions",
    "SparsifyOptions",
    "Tolerance",
    "VerificationFailedError",
    "VerificationResult",
    "__version__",
    "compress",
    "optimize",
    "optimize_model",
    "prune",
    "quantize",
    "run_pipeline",
    "sparsify",
    "verify",
]
