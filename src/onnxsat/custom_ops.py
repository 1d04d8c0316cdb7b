"""Custom-op libraries ONNX Runtime must load to run a model.

A model with onnxruntime-extensions' ops (tokenizers, image decoding, string ops, in the domains
``ai.onnx.contrib`` and ``com.microsoft.extensions``: pre- and post-processing merged into the model) runs
only once that package's library is registered with each session; it is registered by itself when the
model uses such an op. Other libraries of custom ops are named in ``ONNXSAT_CUSTOM_OPS`` (paths separated
by ``os.pathsep``). The libraries in use are kept in that variable, so the processes ONNXSat starts
(compress's workers, the isolated crash check) register the same ones.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path

import onnx
import onnxruntime as ort

from onnxsat.errors import SettingsError
from onnxsat.extras import require
from onnxsat.proto_fields import all_nodes

ENVIRONMENT = "ONNXSAT_CUSTOM_OPS"
EXTENSIONS_DOMAINS = frozenset({"ai.onnx.contrib", "com.microsoft.extensions"})
"""The domains onnxruntime-extensions defines its ops in."""


def libraries() -> list[str]:
    """The custom-op libraries every session registers."""
    return [path for path in os.environ.get(ENVIRONMENT, "").split(os.pathsep) if path]


def register(options: ort.SessionOptions) -> ort.SessionOptions:
    """``options`` with every library of :func:`libraries` registered; a named file that is missing or that
    ONNX Runtime cannot load is one clear error."""
    for path in libraries():
        shown = path if len(path) <= 200 else f"{path[:200]}..."  # the message stays one readable line
        if not Path(path).is_file():
            raise SettingsError(f"{ENVIRONMENT} names {shown}, which is not a file")
        try:
            options.register_custom_ops_library(path)
        except Exception as error:  # ORT raises its own types for a library it cannot load
            reason = " ".join(str(error).split())[:200]
            raise SettingsError(
                f"{ENVIRONMENT}: ONNX Runtime cannot load the custom-op library {shown}: {reason}"
            ) from None
    return options


def _extensions_library() -> str | None:
    """The library onnxruntime-extensions ships (its ``get_library_path()``), found without importing the
    package, which takes seconds; None when it is not installed."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = Path(folder) / f"_extensions_pydll{suffix}"
            if candidate.is_file():
                return str(candidate)
    return None


def use_for(model: onnx.ModelProto) -> str | None:
    """Register onnxruntime-extensions' library for the sessions to come when ``model`` uses its ops; a note
    saying so, or None. Without the package: one line naming it."""
    ops = sorted({f"{n.domain}.{n.op_type}" for n in all_nodes(model.graph) if n.domain in EXTENSIONS_DOMAINS})
    if not ops:
        return None
    listed = ", ".join(ops[:3]) + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")
    path = _extensions_library()
    if path is None:
        require("onnxruntime_extensions", f"the model uses onnxruntime-extensions' ops ({listed})")  # raises
        raise SettingsError(f"onnxruntime-extensions has no library of ops for ONNX Runtime here (needed for {listed})")
    if path not in libraries():
        os.environ[ENVIRONMENT] = os.pathsep.join([*libraries(), path])
    return f"onnxruntime-extensions' library registered with ONNX Runtime for {listed}"
