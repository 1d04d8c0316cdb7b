"""The uniform cost model: every node costs 1.0, so extraction simply prefers fewer nodes.

Kept because it is predictable and free to compute, and it is the baseline the other models are judged
against. It ignores shapes entirely.
"""

from __future__ import annotations

from onnxsat.eqsat.costs.signature import NodeSignature


class UniformCost:
    """1.0 per node, whatever the node. Accepts ``default_dim`` so callers can pass one option set to any model."""

    name = "uniform"

    def __init__(self, default_dim: int | None = None) -> None:
        del default_dim  # shapes do not matter here

    def node_cost(self, node: NodeSignature) -> float:
        return 1.0
