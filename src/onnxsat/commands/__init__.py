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
    modules = [importlib.import_module(f"{__name__}.{name}") for name in _command_names()]
    return sorted(modules, key=lambda module: module.ORDER)


def _command_names() -> list[str]:
    return [info.name for info in pkgutil.iter_modules(__path__) if info.name not in _HELPERS]


def add_all(commands: argparse._SubParsersAction, wanted: str | None = None) -> None:
    """Add every command, or only ``wanted``'s when the module of that name (or of the name's first word:
    ``show-egraph`` is in ``show``) defines it. Each command module imports its whole pass, so importing all of
    them costs about a second that a run of one command, or a refusal of a bad file, does not need."""
    module = _module_of(wanted) if wanted is not None else None
    for each in [module] if module is not None else command_modules():
        each.add_parser(commands)


def _module_of(command: str) -> ModuleType | None:
    """The command module that defines ``command``, tried on a scratch parser; None when none by its name does."""
    names = _command_names()
    for name in dict.fromkeys((command.replace("-", "_"), command.split("-")[0])):
        if name in names:
            module = importlib.import_module(f"{__name__}.{name}")
            scratch = argparse.ArgumentParser().add_subparsers()
            module.add_parser(scratch)
            if command in scratch.choices:
                return module
    return None
