"""Options dataclasses as the single source of a pass's settings: Python keywords, pipeline keys, CLI flags.

A pass's options are a dataclass. Its fields are the keyword arguments of the Python API and the keys of
the pass in a pipeline file (checked by ``config_check.checked_keys``); a field declared with
:func:`option` is also a command-line flag, named after the field (``max_drop`` -> ``--max-drop``) unless
the option says otherwise, with the field's default and the help text written next to the field. So a new
setting is one field in one place, and the three faces cannot drift apart.

Settings a whole run shares (``inputs``, ``tolerance``, ``force``, ``run_timeout``, ``restated_inputs``) are fields too,
for callers of the pass functions, but :data:`RUN_SETTINGS` keeps them out of pass keys and flags: the
runner supplies them once (``--inputs``, ``--input-shape``, ``--rtol``, a pipeline's top-level keys).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

RUN_SETTINGS = ("inputs", "tolerance", "force", "run_timeout", "restated_inputs")
"""Fields every pass may carry but the runner sets for the whole run: never a pass key or a pass's flag."""


def percent(text: str) -> float:
    """``1%`` or ``0.01`` -> 0.01."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction or percentage: {text!r}") from None


def float_list(text: str) -> list[float]:
    """``0.5,0.4,0.3`` -> [0.5, 0.4, 0.3]."""
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    flag: str | None = None,
    type: Callable[[str], Any] | None = None,
    choices: Callable[[], Iterable[str]] | Sequence[str] | None = None,
    metavar: str | None = None,
    negate: bool = False,
    nargs: str | None = None,
    parse: Callable[[Any], Any] | None = None,
    default_factory: Callable[[], Any] | None = None,
    cli_default: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field that is also a command-line flag.

    ``flag`` overrides the flag's name; ``type`` parses one argument (``percent``); ``choices`` may be a
    callable returning a registry's names, read when the parser is built; ``negate`` makes a bool field a
    flag that sets it to False (``per_layer`` <- ``--uniform-only``); ``parse`` turns the parsed value into
    the field's value (``["a=0.3"]`` -> ``{"a": 0.3}``); ``cli_default`` is the flag's default when it
    differs from the field's (``--sparsity`` must be asked for; a pipeline's sparsify pass defaults to 0.5).
    """
    metadata = {
        "cli": {
            "help": help,
            "flag": flag,
            "type": type,
            "choices": choices,
            "metavar": metavar,
            "negate": negate,
            "nargs": nargs,
            "parse": parse,
            "default": cli_default,
        }
    }
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(field: dataclasses.Field[Any]) -> str:
    spec = field.metadata["cli"]
    return spec["flag"] or "--" + field.name.replace("_", "-")


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.metadata["cli"]["default"] is not dataclasses.MISSING:
        return field.metadata["cli"]["default"]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _is_list(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(arg) for arg in typing.get_args(hint) if arg is not type(None))
    return origin in (list, Sequence, tuple)


def cli_fields(options_class: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``options_class`` that are command-line flags, in declaration order."""
    return [f for f in dataclasses.fields(options_class) if "cli" in f.metadata and f.name not in RUN_SETTINGS]


def add_arguments(parser: argparse.ArgumentParser, options_class: type) -> None:
    """Add one flag per :func:`option` field of ``options_class`` to ``parser``."""
    hints = typing.get_type_hints(options_class)
    for field in cli_fields(options_class):
        spec = field.metadata["cli"]
        kwargs: dict[str, Any] = {"dest": field.name, "help": spec["help"]}
        hint = hints[field.name]
        if hint is bool:
            kwargs["action"] = "store_false" if spec["negate"] else "store_true"
            kwargs["default"] = _default(field)
        else:
            kwargs["default"] = _default(field)
            choices = spec["choices"]
            if choices is not None:
                kwargs["choices"] = list(choices() if callable(choices) else choices)
            if spec["type"] is not None:
                kwargs["type"] = spec["type"]
            elif hint in (int, float):
                kwargs["type"] = hint
            if spec["nargs"] is not None:
                kwargs["nargs"] = spec["nargs"]
            elif _is_list(hint) and spec["type"] is None:
                kwargs["nargs"] = "+"
            if spec["metavar"] is not None:
                kwargs["metavar"] = spec["metavar"]
            if spec["parse"] is not None and kwargs["default"] is not None:
                kwargs["default"] = _unparsed(kwargs["default"])
        parser.add_argument(flag_name(field), **kwargs)


def _unparsed(default: Any) -> Any:
    """The command-line form of a parsed field's default: an empty mapping is an empty list of specs."""
    return [] if isinstance(default, dict) and not default else default


def from_arguments(options_class: type, args: argparse.Namespace, **run_settings: Any) -> Any:
    """``options_class`` built from parsed ``args`` (the flags :func:`add_arguments` added) and
    ``run_settings`` (``inputs=...``)."""
    values: dict[str, Any] = {}
    for field in cli_fields(options_class):
        value = getattr(args, field.name)
        parse = field.metadata["cli"]["parse"]
        values[field.name] = parse(value) if parse is not None else value
    return options_class(**values, **run_settings)


def pass_keys(options_class: type) -> list[str]:
    """The keys a pipeline file may give this pass: every field but the run's shared settings."""
    return [f.name for f in dataclasses.fields(options_class) if f.init and f.name not in RUN_SETTINGS]
