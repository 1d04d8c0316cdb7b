"""Cost models: what extraction minimizes. Pluggable by name (``--cost``).

A cost model prices one e-node from its constructor and literal fields; the extractor adds children.
Costs are Python integers, so sums over deep graphs stay exact instead of saturating at 2**64.
"""

from __future__ import annotations

from typing import Protocol

from onnxsat.eqsat.frozen import ENode
from onnxsat.errors import SettingsError


class CostModel(Protocol):
    name: str

    def enode_cost(self, enode: ENode) -> int:
        """Cost of this e-node alone (children are priced separately)."""


class UniformCost:
    """The seed design: every ONNX node costs 1, so extraction prefers fewer nodes.

    Everything else (tensor plumbing, attribute terms, weights folded at decode time) is free.
    """

    name = "uniform"

    def enode_cost(self, enode: ENode) -> int:
        return 1 if enode.op == "Node" else 0


COST_MODELS: dict[str, type[UniformCost]] = {UniformCost.name: UniformCost}


def get_cost_model(name: str) -> CostModel:
    if name not in COST_MODELS:
        raise SettingsError(f"unknown cost model {name!r}; choose from {', '.join(sorted(COST_MODELS))}")
    return COST_MODELS[name]()
