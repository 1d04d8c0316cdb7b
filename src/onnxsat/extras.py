"""Optional parts of ONNXSat: which extra installs each third-party module a command may need.

The core (optimize, sparsify, prune, surgery, pipelines, ORT, profile) needs only the core dependencies.
Plots and HTML pages, data loaders, benchmarks and model builders live behind extras, and a command that
needs a missing one stops with one line naming the extra to install, never an ImportError traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from onnxsat.errors import MissingExtraError

EXTRA_OF: dict[str, tuple[str, str]] = {
    "matplotlib": ("report", "matplotlib"),
    "sklearn": ("data", "scikit-learn"),
    "PIL": ("data", "pillow"),
    "tqdm": ("bench", "tqdm"),
    "ray": ("ray", "ray"),
    "onnxsim": ("bench", "onnxsim"),
    "onnxoptimizer": ("bench", "onnxoptimizer"),
    "onnxslim": ("bench", "onnxslim"),
    "torch": ("zoo", "torch"),
    "torchvision": ("zoo", "torchvision"),
    "transformers": ("zoo", "transformers"),
    "onnxruntime_extensions": ("extensions", "onnxruntime-extensions"),
}
"""Top-level module -> (extra that installs it, its distribution name)."""


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` (e.g. ``matplotlib.figure``), or raise :class:`MissingExtraError` saying which extra
    ``purpose`` ("--html pages", "scikit-learn's digits") needs."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        extra, distribution = EXTRA_OF.get(top, ("all", top))
        raise MissingExtraError(f"{purpose}: {distribution} is not installed; pip install 'onnxsat[{extra}]'") from None
