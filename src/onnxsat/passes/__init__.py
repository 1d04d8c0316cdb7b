"""The passes: one module per capability, each registering its pass classes where they are defined.

``onnxsat.core`` says what a pass is; :func:`catalogue` imports every module here, which registers its
passes, so a new pass is a new module (or class) in this folder and nothing else to edit.
"""

from __future__ import annotations

import importlib
import pkgutil

from onnxsat.core import PASSES, Model, Pass, PassContext, PassResult


def catalogue() -> dict[str, type[Pass]]:
    """Every registered pass by kind (importing the modules of this package registers them)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(PASSES)


__all__ = ["PASSES", "Model", "Pass", "PassContext", "PassResult", "catalogue"]
