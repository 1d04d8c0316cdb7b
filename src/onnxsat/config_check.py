"""Checking a mapping read from a JSON/YAML file against a dataclass, before anything runs.

Pipeline files and surgeon configurations are both "a mapping whose keys are a dataclass's fields".
One checker gives them the same messages: an unknown key (with the valid ones listed), a missing
required key, a value of the wrong type, each naming its place in the file (``passes[2].rate``).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable as CallableABC
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from onnxsat.errors import SettingsError
from onnxsat.options import percent


def checked_keys(
    cls: type,
    config: Mapping[str, Any],
    place: str,
    what: str,
    ignore: Collection[str] = (),
    hidden: Collection[str] = (),
) -> dict[str, Any]:
    """The keyword arguments ``config`` gives for dataclass ``cls``, every key and value checked.

    ``what`` names the thing in messages ("RenameInputs", "the prune pass"); keys in ``ignore`` (such as
    ``surgeon`` or ``type``) are skipped; fields in ``hidden`` are not keys of the file (set elsewhere,
    like a pipeline's shared ``input_shapes``). Raises one :class:`SettingsError` naming ``place``.
    """
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init and field.name not in hidden}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(config) - set(fields) - set(ignore))
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise SettingsError(f"{place}: {what} has no key {unknown[0]!r} (its keys: {known})")
    config = {key: _as_the_flag_reads(value, fields.get(key), f"{place}.{key}") for key, value in config.items()}
    for key, field in fields.items():
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if required and key not in config:
            raise SettingsError(f"{place}: {what} needs the key {key!r}")
        if key in config and not matches(config[key], hints[key]):
            value = config[key]
            raise SettingsError(f"{place}.{key}: expected {describe(hints[key])}, got {type(value).__name__} {value!r}")
    return {key: value for key, value in config.items() if key in fields}


def _as_the_flag_reads(value: Any, field: dataclasses.Field[Any] | None, place: str) -> Any:
    """A string given for a number its flag parses (``max_drop: "1%"``, as ``--max-drop 1%``) parsed the same
    way; any other value as it is."""
    parser = field.metadata.get("cli", {}).get("type") if field is not None else None
    if not isinstance(value, str) or parser is not percent:
        return value
    try:
        return percent(value)
    except argparse.ArgumentTypeError:
        raise SettingsError(f"{place}: not a fraction or percentage: {value!r}") from None


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` (parsed JSON/YAML) fits the annotation ``hint``: str, int, float, bool, Path (a
    string), lists, mappings and unions of these."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint in (str, Path):
        return isinstance(value, str)
    if origin in (list, tuple, Sequence):
        item = (typing.get_args(hint) or (Any,))[0]
        return isinstance(value, list | tuple) and all(matches(entry, item) for entry in value)
    if origin in (dict, Mapping):
        key_hint, value_hint = typing.get_args(hint) or (Any, Any)
        return isinstance(value, Mapping) and all(
            matches(k, key_hint) and matches(v, value_hint) for k, v in value.items()
        )
    if origin is CallableABC:  # the Python API may pass a function; a file cannot hold one
        return False
    raise TypeError(f"configuration annotation {hint!r} is not supported by the checker")


def describe(hint: Any) -> str:
    """``hint`` as a reader of a configuration file would say it: ``list[str] or null``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(option) for option in typing.get_args(hint))
    if origin is CallableABC:
        return "function (Python API only)"
    if origin is not None:
        args = ", ".join(describe(arg) for arg in typing.get_args(hint))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if hint is Path:
        return "str (a path)"
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))
