"""A registry: things of one kind by name, filled where each is defined, read by name from settings.

Passes, sparsity methods and pruning criteria are registries: a new one is one ``register`` call beside
its definition; a second one of the same name is a programming error (TypeError at import); an unknown
name from a user's settings is their error (one-line SettingsError listing the known names).
"""

from __future__ import annotations

from typing import TypeVar

from onnxsat.errors import SettingsError

T = TypeVar("T")


class Registry(dict[str, T]):
    """Name -> thing, in registration order (the order ``--help`` lists the choices)."""

    def __init__(self, kind: str, setting: str) -> None:
        super().__init__()
        self.kind = kind
        """What the things are, for programming errors ("sparsity method")."""
        self.setting = setting
        """How a user names one, for their errors ("method", "criterion")."""

    def register(self, name: str, thing: T) -> T:
        if name in self:
            raise TypeError(f"{self.kind} {name!r} is registered twice")
        self[name] = thing
        return thing

    def lookup(self, name: str) -> T:
        if name not in self:
            raise SettingsError(f"unknown {self.setting} {name!r}; choose from {', '.join(self)}")
        return self[name]
