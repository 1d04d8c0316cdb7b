"""Name tables that rules refer to by string, filled where each entry is defined.

Rules name decode-time kernels and attribute flags by string literals inside egglog terms. The tables
here let each kernel register next to its definition (``@weight_kernel(...)`` in ``weights.py`` or in
the rule module that needs it), and let rule constructors check a name when the rule is built, so a
typo fails at the first use of the family (and in the registry tests) instead of when a decoded graph
happens to contain the term.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from onnxsat.registry import RegistryError, register

T = TypeVar("T")


def registrar(table: dict[str, T], what: str) -> Callable[[str], Callable[[T], T]]:
    """A decorator factory: ``@kernel("name")`` registers the decorated object under ``name``."""

    def named(name: str) -> Callable[[T], T]:
        def decorate(entry: T) -> T:
            return register(table, name, entry, what)

        return decorate

    return named


def require(known: Mapping[str, object] | Iterable[str], name: str, what: str) -> str:
    """``name`` itself if it is registered; otherwise an error naming the closest registered names."""
    names = known.keys() if isinstance(known, Mapping) else set(known)
    if name not in names:
        close = difflib.get_close_matches(name, sorted(names), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise RegistryError(f"unknown {what} {name!r}{hint}")
    return name


__all__ = ["RegistryError", "register", "registrar", "require"]
