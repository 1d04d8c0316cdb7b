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
    if wanted is not None:
        for name in dict.fromkeys((wanted.replace("-", "_"), wanted.split("-")[0])):
            if name in _command_names():
                importlib.import_module(f"{__name__}.{name}").add_parser(commands)
                if wanted in commands.choices:
                    return
                commands.choices.clear()
                break
    for module in command_modules():
        module.add_parser(commands)
