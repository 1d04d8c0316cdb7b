"""Choose one e-node per e-class so the graph's outputs are computed at least cost, shared work paid once.

Two passes over the frozen e-graph:

1. **Bottom-up** (a worklist fixpoint): every class gets the e-node with the least *tree* value
   ``(cost, size)``, where size counts the term's e-nodes, value-only children included. Sizes are at
   least one, so a chosen e-node's children always have strictly smaller values than their parent and
   the choice is acyclic, even through zero-cost constants (a folded tensor whose node reads the class
   it belongs to). Ties keep the e-node that came first, the original term, so a graph with nothing to
   gain is rebuilt as it was.
2. **DAG improvement**: a tree value pays a shared subgraph once per use. Starting from the bottom-up
   choice, each class with alternatives tries them against the *DAG* cost of the whole extracted graph
   (the sum over distinct classes reachable from the outputs), kept incrementally with reference counts,
   and switches when the total drops. An alternative that is one output of a multi-output node (a
   merged product's Split) is also tried together with that node's other outputs offered to other
   classes: a merge pays only when every product it replaces switches at once. A switch to an e-node
   whose children all have a smaller tree value than the class cannot close a cycle; for any other
   that would pay, a search of the chosen graph checks (only then: the search is linear in the graph).

Children read only for their value at decode time (a folded weight's inputs) must be extractable but
cost nothing: they never run.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from egglog import bindings

from onnxsat.eqsat.costs import CostModel, NodeSignature
from onnxsat.eqsat.encode import EncodedModel
from onnxsat.eqsat.frozen import ENode, FrozenEGraph, value_only_children
from onnxsat.eqsat.signatures import SignatureReader

# Handles and inert plumbing that must never be chosen as a tensor's definition.
UNEXTRACTABLE = frozenset({"TensorRef", "TensorPureKey"})

DAG_PASSES = 3
"""Improvement passes over the classes with alternatives; later passes rarely find anything."""

Value = tuple[float, int]


@dataclass
class Extraction:
    choice: dict[bindings.Value, ENode]
    cost: float
    """The extracted graph's cost under the cost model, each class paid once."""
    tree_cost: float
    """What the bottom-up pass alone would have paid for the same outputs (shared work counted per use)."""
    dag_switches: int
    ort_kept_apart: int = 0
    """Add+LayerNormalization pairs written so that ONNX Runtime does not fuse them (the fused kernel costs more)."""


class _Extractor:
    def __init__(self, snapshot: FrozenEGraph, cost_model: CostModel, encoded: EncodedModel) -> None:
        self.snapshot = snapshot
        self.cost_model = cost_model
        self.signatures = SignatureReader(snapshot, encoded)
        self.own: dict[int, float] = {}
        self.value: dict[bindings.Value, Value] = {}
        self.choice: dict[bindings.Value, ENode] = {}
        self.descending = True
        """Every chosen e-node's children have smaller tree values than its class (true after pass 1)."""
        self.roots = [
            snapshot.tensor_class[encoded.tensor_ids[o.name]]
            for o in encoded.model.graph.output
            if encoded.tensor_ids.get(o.name) in snapshot.tensor_class
        ]

    def own_cost(self, eclass: bindings.Value, enode: ENode) -> float:
        if enode.seq not in self.own:
            cost = 0.0
            if enode.op == "Node":
                cost = float(self.cost_model.node_cost(self.signatures.signature(eclass, enode)))
            self.own[enode.seq] = cost
        return self.own[enode.seq]

    # ---- pass 1: bottom-up tree values -----------------------------------------------------------
    def bottom_up(self) -> None:
        parents: dict[bindings.Value, list[tuple[bindings.Value, ENode]]] = defaultdict(list)
        queue: deque[bindings.Value] = deque()

        def consider(eclass: bindings.Value, enode: ENode) -> None:
            cost, size = self.own_cost(eclass, enode), 1
            free = value_only_children(enode)
            for child in enode.children:
                if child not in self.value:
                    return
                child_cost, child_size = self.value[child]
                size += child_size
                if child not in free:
                    cost += child_cost
            current = self.value.get(eclass)
            candidate = (cost, size)
            if current is None or candidate < current or (candidate == current and enode.seq < self.choice[eclass].seq):
                self.value[eclass] = candidate
                self.choice[eclass] = enode
                queue.append(eclass)

        for eclass, enodes in self.snapshot.classes.items():
            for enode in enodes:
                if enode.op in UNEXTRACTABLE:
                    continue
                for child in set(enode.children):
                    parents[child].append((eclass, enode))
                if not enode.children:
                    consider(eclass, enode)
        while queue:
            eclass = queue.popleft()
            for parent_class, enode in parents[eclass]:
                consider(parent_class, enode)

    # ---- pass 2: DAG-aware improvement -----------------------------------------------------------
    @staticmethod
    def runtime_children(enode: ENode) -> list[bindings.Value]:
        free = value_only_children(enode)
        return [c for c in enode.children if c not in free]

    def dag_improve(self) -> tuple[float, int]:
        refs: dict[bindings.Value, int] = defaultdict(int)
        total = 0.0
        for root in self.roots:
            total += self.acquire(root, refs, [])
        switches = 0
        candidates = [
            c for c, enodes in self.snapshot.classes.items() if sum(e.op not in UNEXTRACTABLE for e in enodes) > 1
        ]
        candidates.sort(key=lambda c: self.value.get(c, (0.0, 0)))
        siblings = self.sibling_outputs(candidates)
        for _ in range(DAG_PASSES):
            improved = False
            for eclass in candidates:
                if refs.get(eclass, 0) == 0 or eclass not in self.value:
                    continue
                for enode in self.snapshot.classes[eclass]:
                    if enode is self.choice[eclass] or enode.op in UNEXTRACTABLE:
                        continue
                    if not all(c in self.value for c in enode.children):
                        continue
                    delta = self.try_switch([(eclass, enode)], refs)
                    if delta >= -1e-9 and enode.op == "Out":
                        delta = self.try_switch(self.with_siblings(eclass, enode, siblings, refs), refs)
                    if delta < -1e-9:
                        total += delta
                        switches += 1
                        improved = True
            if not improved:
                break
        return total, switches

    def reaches(self, starts: tuple[bindings.Value, ...], target: bindings.Value) -> bool:
        """Whether the current choice leads from any of ``starts`` to ``target`` (a cycle check).

        Needed only when the cheap test fails, i.e. an alternative's children have larger tree values
        than the class, which happens when tree values count a shared input twice."""
        seen: set[bindings.Value] = set()
        stack = list(starts)
        while stack:
            current = stack.pop()
            if current == target:
                return True
            if current in seen or current not in self.choice:
                continue
            seen.add(current)
            stack.extend(self.choice[current].children)
        return False

    def acquire(self, eclass: bindings.Value, refs: dict[bindings.Value, int], log: list) -> float:
        """Add one reference to ``eclass``; returns the cost of every class this brings into the graph."""
        added = 0.0
        stack = [eclass]
        while stack:
            current = stack.pop()
            refs[current] += 1
            log.append((current, 1))
            if refs[current] == 1:
                enode = self.choice[current]
                added += self.own_cost(current, enode)
                stack.extend(self.runtime_children(enode))
        return added

    def release(self, eclass: bindings.Value, refs: dict[bindings.Value, int], log: list) -> float:
        """Drop one reference to ``eclass``; returns the cost of every class that leaves the graph."""
        removed = 0.0
        stack = [eclass]
        while stack:
            current = stack.pop()
            refs[current] -= 1
            log.append((current, -1))
            if refs[current] == 0:
                enode = self.choice[current]
                removed += self.own_cost(current, enode)
                stack.extend(self.runtime_children(enode))
        return removed

    def sibling_outputs(
        self, candidates: list[bindings.Value]
    ) -> dict[bindings.Value, list[tuple[bindings.Value, ENode]]]:
        """Node class -> the alternatives ``Out(node, i)`` of classes with a choice: the outputs of one
        multi-output node (a merged product's Split) that are offered to several classes."""
        siblings: dict[bindings.Value, list[tuple[bindings.Value, ENode]]] = defaultdict(list)
        for eclass in candidates:
            for enode in self.snapshot.classes[eclass]:
                if enode.op == "Out":
                    siblings[enode.children[0]].append((eclass, enode))
        return siblings

    def with_siblings(
        self,
        eclass: bindings.Value,
        enode: ENode,
        siblings: dict[bindings.Value, list[tuple[bindings.Value, ENode]]],
        refs: dict[bindings.Value, int],
    ) -> list[tuple[bindings.Value, ENode]]:
        """``enode`` with every other output of its node offered to a class in the graph: a merge (one
        product, then Split) pays only when all the products it replaces switch to it together."""
        group = [(eclass, enode)]
        for other_class, other in siblings.get(enode.children[0], []):
            offered = refs.get(other_class, 0) > 0 and self.choice.get(other_class) is not other
            extractable = all(c in self.value for c in other.children)
            if offered and extractable and all(c != other_class for c, _ in group):
                group.append((other_class, other))
        return group

    def try_switch(self, switches: list[tuple[bindings.Value, ENode]], refs: dict[bindings.Value, int]) -> float:
        """Switch each class to its e-node if together that lowers the DAG cost; returns the change (0 if undone)."""
        log: list[tuple[bindings.Value, int]] = []
        previous: list[tuple[bindings.Value, ENode]] = []
        delta = 0.0
        for eclass, enode in switches:
            old = self.choice[eclass]
            delta += self.own_cost(eclass, enode) - self.own_cost(eclass, old)
            # Acquire the new children before releasing the old ones, so shared classes never drop to zero.
            for child in self.runtime_children(enode):
                delta += self.acquire(child, refs, log)
            for child in self.runtime_children(old):
                delta -= self.release(child, refs, log)
            previous.append((eclass, old))
            self.choice[eclass] = enode
        # Chosen edges descend in tree value until a switch breaks that; from then on only a search proves
        # that a switch closes no cycle.
        descends = self.descending and all(
            self.value[c] < self.value[eclass] for eclass, enode in switches for c in enode.children
        )
        if delta < -1e-9 and (descends or not any(self.reaches(enode.children, eclass) for eclass, enode in switches)):
            self.descending = descends
            return delta
        for eclass, old in reversed(previous):
            self.choice[eclass] = old
        for current, change in reversed(log):
            refs[current] -= change
        return 0.0

    # ---- pass 3: what ONNX Runtime will fuse at load time ----------------------------------------
    def ort_lookahead(self) -> int:
        """Keep ORT from fusing Add+LayerNormalization into SkipLayerNormalization where that is slower.

        ORT rewrites every residual ``Add`` feeding a ``LayerNormalization`` when it loads the model, so
        the pair the extractor priced is not what will run. For each such pair in the extracted graph,
        price the fused kernel with the cost model; when it costs more than the two ops, choose the
        ``Sum`` form the ``ort_guards`` rules offered, which ORT leaves alone. Returns the pairs kept apart.
        """
        kept_apart = 0
        for eclass, enode in list(self.choice.items()):
            if enode.op != "Node" or enode.literals[:2] != ("LayerNormalization", ""):
                continue
            inputs = self.signatures.arguments(enode.children[1])
            if not inputs or self.choice.get(inputs[0]) is None or self.choice[inputs[0]].op != "Out":
                continue
            add_class = self.choice[inputs[0]].children[0]
            add = self.choice.get(add_class)
            sums = [
                e
                for e in self.snapshot.classes[inputs[0]]
                if e.op == "Out"
                and self.choice.get(e.children[0]) is not None
                and self.choice[e.children[0]].literals[:1] == ("Sum",)
            ]
            if add is None or add.literals[:2] != ("Add", "") or not sums:
                continue
            ln_signature = self.signatures.signature(eclass, enode)
            add_signature = self.signatures.signature(add_class, add)
            fused = NodeSignature(
                op_type="SkipLayerNormalization",
                domain="com.microsoft",
                attributes=tuple(a for a in ln_signature.attributes if a.name == "epsilon"),
                inputs=(*add_signature.inputs, *ln_signature.inputs[1:]),
                outputs=ln_signature.outputs[:1],
                opset=1,
            )
            separate = self.own_cost(add_class, add) + self.own_cost(eclass, enode)
            if self.cost_model.node_cost(fused) > separate:
                self.choice[inputs[0]] = sums[0]
                kept_apart += 1
        return kept_apart


def extract(
    snapshot: FrozenEGraph, cost_model: CostModel, encoded: EncodedModel, ort_lookahead: bool = False
) -> Extraction:
    """The cheapest e-node of every e-class with a finite cost, DAG-improved for ``encoded``'s outputs.

    ``ort_lookahead`` (target ``ort``) also accounts for the fusions ONNX Runtime applies at load time.
    """
    extractor = _Extractor(snapshot, cost_model, encoded)
    extractor.bottom_up()
    tree_cost = sum(extractor.value[r][0] for r in set(extractor.roots) if r in extractor.value)
    cost, switches = extractor.dag_improve()
    kept_apart = extractor.ort_lookahead() if ort_lookahead else 0
    return Extraction(
        choice=extractor.choice, cost=cost, tree_cost=tree_cost, dag_switches=switches, ort_kept_apart=kept_apart
    )
