"""A registry: things of one kind by name, filled where each is defined, read by name from settings.

Passes, sparsity methods and pruning criteria are registries: a new one is one ``register`` call beside
its definition; a second one of the same name is a programming error (RegistryError at import); an unknown
name from a user's settings is their error (one-line SettingsError listing the known names).
"""

from __future__ import annotations

from typing import TypeVar

from onnxsat.errors import SettingsError

T = TypeVar("T")


class RegistryError(TypeError):
    """A name registered twice, or used without being registered: always a bug in the code that did it."""


def register(table: dict[str, T], name: str, entry: T, what: str) -> T:
    """Put ``entry`` in ``table`` under ``name``; a second entry of one name is refused, not overwritten."""
    if name in table:
        raise RegistryError(f"{what} {name!r} is registered twice")
    table[name] = entry
    return entry


class Registry(dict[str, T]):
    """Name -> thing, in registration order (the order ``--help`` lists the choices)."""

    def __init__(self, kind: str, setting: str) -> None:
        super().__init__()
        self.kind = kind
        """What the things are, for programming errors ("sparsity method")."""
        self.setting = setting
        """How a user names one, for their errors ("method", "criterion")."""

    def register(self, name: str, thing: T) -> T:
        return register(self, name, thing, self.kind)

    def lookup(self, name: str) -> T:
        if name not in self:
            raise SettingsError(f"unknown {self.setting} {name!r}; choose from {', '.join(self)}")
        return self[name]
