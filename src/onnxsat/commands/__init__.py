"""The ``onnxsat`` subcommands, one module each: its flags (mostly its pass's options), its pass, its printer.

Each module defines ``ORDER`` (its place in ``onnxsat --help``) and ``add_parser(commands)``, which adds
the subcommand and sets its handler; :func:`add_all` finds every module here, so a new command is a new
module in this folder.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from types import ModuleType

_HELPERS = {"arguments", "printing"}
"""Modules here that are shared plumbing, not commands."""


def command_modules() -> list[ModuleType]:
    """Every command module, in ``ORDER``."""
    modules = [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if info.name not in _HELPERS
    ]
    return sorted(modules, key=lambda module: module.ORDER)


def add_all(commands: argparse._SubParsersAction) -> None:
    for module in command_modules():
        module.add_parser(commands)
