"""Choose one e-node per e-class so the graph's outputs are computed at least cost.

Bottom-up fixpoint over the frozen e-graph with a worklist: an e-node is priced once all its child
classes are, and a class's choice changes only on a strictly lower cost, so the chosen graph is
acyclic. Children read only for their value at decode time (a folded weight's inputs) must be
extractable but cost nothing: they never run. Ties keep the e-node that came first, which is the
original term, so a graph with nothing to gain is rebuilt as it was.
"""

from __future__ import annotations

from collections import defaultdict, deque

from egglog import bindings

from onnxsat.eqsat.cost import CostModel
from onnxsat.eqsat.frozen import ENode, FrozenEGraph, value_only_children

# Handles and inert plumbing that must never be chosen as a tensor's definition.
UNEXTRACTABLE = frozenset({"TensorRef"})


def extract(snapshot: FrozenEGraph, cost_model: CostModel) -> dict[bindings.Value, ENode]:
    """The cheapest e-node of every e-class that has a finite cost."""
    parents: dict[bindings.Value, list[tuple[bindings.Value, ENode]]] = defaultdict(list)
    best_cost: dict[bindings.Value, int] = {}
    choice: dict[bindings.Value, ENode] = {}
    own_cost: dict[int, int] = {}
    queue: deque[bindings.Value] = deque()

    def consider(eclass: bindings.Value, enode: ENode) -> None:
        total = own_cost[enode.seq]
        free = value_only_children(enode)
        for child in enode.children:
            if child not in best_cost:
                return
            if child not in free:
                total += best_cost[child]
        current = best_cost.get(eclass)
        if current is None or total < current or (total == current and enode.seq < choice[eclass].seq):
            best_cost[eclass] = total
            choice[eclass] = enode
            queue.append(eclass)

    for eclass, enodes in snapshot.classes.items():
        for enode in enodes:
            if enode.op in UNEXTRACTABLE:
                continue
            own_cost[enode.seq] = cost_model.enode_cost(enode)
            for child in set(enode.children):
                parents[child].append((eclass, enode))
            if not enode.children:
                consider(eclass, enode)
    while queue:
        eclass = queue.popleft()
        for parent_class, enode in parents[eclass]:
            consider(parent_class, enode)
    return choice
