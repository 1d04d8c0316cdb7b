"""The registry of rule families: each family's module registers its ruleset with :func:`register_family`.

A family states in one place what ``rules/__init__.py`` needs to schedule it: its stage, which targets
run it, where it runs among the others, and when a model cannot use it. The targets' schedules and
:func:`onnxsat.eqsat.rules.applicable` are built from this registry, so a new family is one module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import onnx
from egglog import Ruleset

from onnxsat.eqsat.registry import RegistryError

Stage = Literal["simplify", "grow"]

TARGET_NAMES: tuple[str, ...] = ("none", "portable", "ort")
"""``none`` runs no rewrite (a lossless round trip that drops dead nodes); ``portable`` emits standard
ONNX only; ``ort`` may emit com.microsoft ops that ONNX Runtime runs. In this order in ``--help``."""
STANDARD: tuple[str, ...] = ("portable", "ort")
"""Targets of a family that emits standard ONNX only."""
ORT_ONLY: tuple[str, ...] = ("ort",)
"""Targets of a family that emits com.microsoft ops or guards against ONNX Runtime's own fusions."""


@dataclass(frozen=True)
class ModelOutline:
    """What :func:`RuleFamily.can_apply` may look at: the graph, its op types, and the encoder's parallel pairs."""

    graph: onnx.GraphProto
    op_types: frozenset[str]
    has_parallel_pairs: bool


@dataclass(frozen=True)
class RuleFamily:
    """One rule family and how it is scheduled.

    ``order`` places it among the families of its stage: egglog runs a schedule's rulesets in sequence,
    and which rewrite reaches a node first can change the extracted graph, so the order is explicit and
    unique rather than left to module import order. ``requires_op`` skips the family for models without
    that op type (no rule creates it), ``applies`` for any other cheap test of the model; both exist
    because egglog compiles and plans every rule of a scheduled family, even with nothing to match.
    """

    name: str
    ruleset: Ruleset
    stage: Stage
    order: int
    targets: tuple[str, ...]
    requires_op: str | None = None
    applies: Callable[[ModelOutline], bool] | None = None

    def can_apply(self, outline: ModelOutline) -> bool:
        if self.requires_op is not None and self.requires_op not in outline.op_types:
            return False
        return self.applies is None or self.applies(outline)


FAMILIES: dict[str, RuleFamily] = {}
"""Family name -> family, in registration (module import) order; :func:`ordered` gives run order."""


def ruleset_name(ruleset: Ruleset) -> str:
    """The egglog name a ruleset was made with (``ruleset(name=...)``), "" for an unnamed one."""
    return ruleset.ident.name if ruleset.ident is not None else ""


def register_family(
    ruleset: Ruleset,
    *,
    stage: Stage,
    order: int,
    targets: tuple[str, ...],
    requires_op: str | None = None,
    applies: Callable[[ModelOutline], bool] | None = None,
) -> RuleFamily:
    """Register ``ruleset`` (named by its egglog name) as a family; called at the bottom of its module.

    Refuses a second family of one name or one ``order``, an unknown stage, and unknown targets (or
    ``none``, which runs nothing), so a mistake fails when the package is imported.
    """
    name = ruleset_name(ruleset)
    if not name:
        raise RegistryError("a rule family's ruleset needs a name: ruleset(name=...)")
    if name in FAMILIES:
        raise RegistryError(f"rule family {name!r} is registered twice")
    if stage not in ("simplify", "grow"):
        raise RegistryError(f"rule family {name!r}: unknown stage {stage!r}")
    unknown = [t for t in targets if t not in TARGET_NAMES or t == "none"]
    if unknown or not targets:
        raise RegistryError(f"rule family {name!r}: targets {targets!r} must be among {STANDARD!r}")
    taken = {f.order: f.name for f in FAMILIES.values()}
    if order in taken:
        raise RegistryError(f"rule family {name!r}: order {order} is taken by {taken[order]!r}")
    family = RuleFamily(name, ruleset, stage, order, tuple(targets), requires_op, applies)
    FAMILIES[name] = family
    return family


def ordered(target: str, stage: Stage) -> tuple[RuleFamily, ...]:
    """The families ``target`` runs in ``stage``, in run order."""
    chosen = [f for f in FAMILIES.values() if target in f.targets and f.stage == stage]
    return tuple(sorted(chosen, key=lambda f: f.order))


def family_of(ruleset: Ruleset) -> RuleFamily | None:
    """The registered family of ``ruleset``, or None for one built elsewhere (a test's own schedule)."""
    return next((f for f in FAMILIES.values() if f.ruleset is ruleset), None)
