"""Rewrite rules, one module per family, and which families each ``--target`` runs.

Importing this package imports every module in it; each family's module registers its ruleset at its
bottom (``families.register_family``: stage, targets, order, when it applies), and the schedules below
are built from that registry. A new family is a new module here; see its registry test in
``tests/eqsat/test_registries.py``. Each module's docstring gives its family's rewrites, their
conditions and why they are sound; ``analysis`` (facts derived inside the e-graph) runs before every
iteration of every target and is no family.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import onnx
from egglog import Ruleset

from onnxsat.eqsat.rules.analysis import analysis
from onnxsat.eqsat.rules.families import (
    FAMILIES,
    TARGET_NAMES,
    ModelOutline,
    RuleFamily,
    family_of,
    ordered,
    register_family,
)
from onnxsat.eqsat.rules.layout_sinking import has_layout_chain
from onnxsat.errors import SettingsError

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# Each family's ruleset under its name, as before the registry (``from onnxsat.eqsat.rules import
# bn_folding`` gives the ruleset); it shadows the submodule attribute, which ``sys.modules`` still holds.
globals().update({family.name: family.ruleset for family in FAMILIES.values()})


@dataclass(frozen=True)
class RuleSchedule:
    """What a target runs: cheap rules that only simplify, run to saturation in every iteration, and
    rules that grow the e-graph, run once per iteration under the search limits with back-off."""

    simplify: tuple[Ruleset, ...] = ()
    grow: tuple[Ruleset, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.simplify and not self.grow


def _schedule(target: str) -> RuleSchedule:
    return RuleSchedule(
        simplify=tuple(f.ruleset for f in ordered(target, "simplify")),
        grow=tuple(f.ruleset for f in ordered(target, "grow")),
    )


TARGETS: dict[str, RuleSchedule] = {target: _schedule(target) for target in TARGET_NAMES}
"""``none`` runs no rewrite (a lossless round trip that drops dead nodes); ``portable`` emits standard
ONNX only; ``ort`` may emit com.microsoft ops that ONNX Runtime runs."""


def rulesets_for(target: str) -> RuleSchedule:
    if target not in TARGETS:
        raise SettingsError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    return TARGETS[target]


def applicable(schedule: RuleSchedule, graph: onnx.GraphProto, has_parallel_pairs: bool) -> RuleSchedule:
    """``schedule`` without the families that cannot apply to a model with these op types.

    egglog compiles and plans every rule of a family for each new e-graph, and some plans cost seconds
    on graphs of a few hundred nodes even with nothing to match (the 1,500-block Conv chain: 45 s with
    them, 4.8 s without); on the small graphs of the test suite the compiling alone is a quarter second.
    Each family says when it applies (``RuleFamily.can_apply``): no rule creates the node a family starts
    from (a BatchNormalization, an LRN, a Slice), so a model without one never needs it; the growing
    family applies only to the pairs the encoder found, layout sinking only where a layout op reaches
    another through elementwise ops. A ruleset registered as no family is kept.
    """
    outline = ModelOutline(graph, frozenset(node.op_type for node in graph.node), has_parallel_pairs)

    def keep(rulesets: tuple[Ruleset, ...]) -> tuple[Ruleset, ...]:
        return tuple(r for r in rulesets if (family := family_of(r)) is None or family.can_apply(outline))

    return RuleSchedule(simplify=keep(schedule.simplify), grow=keep(schedule.grow))


__all__ = [
    "FAMILIES",
    "TARGETS",
    "RuleFamily",
    "RuleSchedule",
    "analysis",
    "applicable",
    "has_layout_chain",
    "register_family",
    "rulesets_for",
]
