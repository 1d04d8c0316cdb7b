"""What a surgeon is: a named, configured edit of an ONNX model that never touches its input.

Each surgeon is a dataclass whose fields are its configuration keys (the names Olive's
``GraphSurgeries`` uses), registered under its class name by :func:`register`. A pipeline file or the
Python API builds one from a mapping with :func:`build_surgeon`, which checks every key and type before
anything runs, so a typo fails the whole file up front instead of half-way through a model.

A surgeon whose pattern is absent returns the model unchanged with a notice saying so: a no-op, not an
error. Only a request that cannot be met at all (renaming an input the model does not have) raises
:class:`SurgeryError`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import onnx

from onnxsat.config_check import checked_keys
from onnxsat.errors import SettingsError


class SurgeryError(SettingsError):
    """A surgeon was asked for something the model makes impossible (a name it does not have)."""


@dataclass
class SurgeryOutcome:
    """A surgeon's result: the new model, whether anything changed, and one line saying what (or why not)."""

    model: onnx.ModelProto
    changed: bool
    notice: str


class Surgeon(ABC):
    """Base of every surgeon. Subclasses are dataclasses; their fields are the configuration keys.

    ``exact`` says whether the surgeon keeps every output identical (renames, reshuffles) or
    approximates (``ReplaceErfWithTanh``); approximations state their error bound in their docstring
    and their tests.
    """

    exact: ClassVar[bool] = True

    @abstractmethod
    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        """Return the edited copy of ``model`` (``model`` itself is never modified)."""

    @classmethod
    def name(cls) -> str:
        return cls.__name__


SURGEONS: dict[str, type[Surgeon]] = {}

S = TypeVar("S", bound=type[Surgeon])


def register(cls: S) -> S:
    """Class decorator: make ``cls`` available by its class name in pipeline files."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"surgeon {cls.__name__} must be a dataclass")
    if cls.__name__ in SURGEONS:
        raise TypeError(f"two surgeons named {cls.__name__}")
    SURGEONS[cls.__name__] = cls
    return cls


def surgeons() -> dict[str, type[Surgeon]]:
    """Every registered surgeon by name (importing the catalogue registers them)."""
    import onnxsat.surgery.surgeons  # noqa: F401  (registers the catalogue)

    return dict(SURGEONS)


def build_surgeon(config: Mapping[str, Any], place: str = "surgeon") -> Surgeon:
    """Build the surgeon ``config["surgeon"]`` names from the rest of ``config``.

    Every problem is one :class:`SettingsError` naming ``place`` (e.g. ``passes[0].surgeries[2]``):
    an unknown surgeon, an unknown key, a missing required key, a value of the wrong type.
    """
    catalogue = surgeons()
    if not isinstance(config, Mapping):
        raise SettingsError(f"{place}: expected a mapping with a 'surgeon' key, got {type(config).__name__}")
    name = config.get("surgeon")
    if name not in catalogue:
        raise SettingsError(f"{place}: unknown surgeon {name!r}; known: {', '.join(sorted(catalogue))}")
    cls = catalogue[name]
    return cls(**checked_keys(cls, config, place, name, ignore=("surgeon",)))
