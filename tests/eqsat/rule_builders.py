"""Small shared builders for the per-family rewrite-rule tests (``test_rules_*.py``; imported as a plain module).

``Graph`` builds a model node by node with seeded random constants kept away from 0 and 1 (so a fold
that forgets a factor or a shift changes the outputs); ``optimized`` runs the pipeline like
``eqsat_helpers.roundtrip`` but with any cost model; ``assert_fired`` / ``assert_not_fired`` read the
per-rule match counts (rule names as ``report_name`` gives them, without egglog's `` [k]`` suffix).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import onnx
from egglog import seq
from eqsat_helpers import RoundTrip, check_and_compare, make_model, op_types, with_inferred_outputs
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.costs import CostModel, NodeSignature, UniformCost
from onnxsat.eqsat.decode import decode
from onnxsat.eqsat.encode import EncodedModel, encode
from onnxsat.eqsat.extract import extract
from onnxsat.eqsat.frozen import freeze
from onnxsat.eqsat.rules import analysis, rulesets_for
from onnxsat.eqsat.rules.patterns import report_name
from onnxsat.eqsat.saturate import SaturationLimits, egraph_size, saturate

FLOAT = TensorProto.FLOAT


def vi(name: str, shape: list[int | str] | None, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def away(rng: np.random.Generator, shape: tuple[int, ...], low: float = 0.2, high: float = 0.8) -> np.ndarray:
    """Random values of random sign with magnitudes in [low, high]: never 0, never +-1 (float32)."""
    magnitude = rng.uniform(low, high, size=shape)
    sign = rng.choice(np.array([-1.0, 1.0]), size=shape)
    return (magnitude * sign).astype(np.float32)


class Graph:
    """A tiny graph builder: inputs, initializers (seeded values) and nodes."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []

    def input(self, name: str, shape: list[int | str], elem: int = FLOAT) -> str:
        self.inputs.append(vi(name, shape, elem))
        return name

    def const(self, name: str, value: np.ndarray | list | float) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, name: str, values: list[int]) -> str:
        return self.const(name, np.asarray(values, dtype=np.int64))

    def weight(self, name: str, *shape: int) -> str:
        """Random float32 weight, magnitudes in [0.2, 0.8], random signs."""
        return self.const(name, away(self.rng, shape))

    def scale(self, name: str, *shape: int) -> str:
        """Random float32 multipliers in +-[1.2, 1.8] (far from 1, so dropping one shows)."""
        return self.const(name, away(self.rng, shape, 1.2, 1.8))

    def node(self, op: str, inputs: list[str], outputs: list[str] | str, **attrs: object) -> str:
        outputs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(helper.make_node(op, inputs, outputs, name=f"{outputs[0]}_node", **attrs))
        return outputs[0]

    def model(
        self, outputs: list[str], opset: int = 17, output_types: Mapping[str, int] | None = None
    ) -> onnx.ModelProto:
        """The model (IR 9); output types and shapes come from shape inference."""
        types = dict(output_types or {})
        model = make_model(
            self.nodes, self.inputs, [vi(o, None, types.get(o, FLOAT)) for o in outputs], self.inits, opset=opset
        )
        return with_inferred_outputs(model)


class OpWeightedCost:
    """Uniform cost (1.0 per node) except for the listed op types: makes a rewrite that trades them win."""

    name = "op_weighted"

    def __init__(self, weights: Mapping[str, float]) -> None:
        self.weights = dict(weights)

    def node_cost(self, node: NodeSignature) -> float:
        return self.weights.get(node.op_type, 1.0)


GUARD_PASSES = 12
GUARD_ENODES = 3000
"""Bounds of the divergence guard in ``optimized``: the test models are tiny (a few hundred e-nodes) and reach
their fixpoint in a few passes (a Transpose sinking below a chain of per-channel ops and folding them into a
Conv takes two per op: nine for Sub, Mul, Add); a diverging rule set quickly grows past any such bound."""


def simplify_to_fixpoint(encoded: EncodedModel, target: str) -> Counter[str]:
    """Run ``target``'s simplifying families one pass at a time until nothing changes; their match counts.

    ``saturate`` runs them to saturation in one egglog call that no limit can interrupt, so a rule set that
    keeps making new terms never returns and takes all the machine's memory with it. Passes are bounded
    here (``GUARD_PASSES``, ``GUARD_ENODES``), so such a model fails its test with an AssertionError instead
    of killing the test run. Reaching the fixpoint this way is exactly what ``saturate``'s first step does.
    """
    one_pass = seq(analysis.saturate(), *rulesets_for(target).simplify)
    counts: Counter[str] = Counter()
    sizes = []
    for _ in range(GUARD_PASSES):
        report = encoded.egraph.run(one_pass)
        for rule_decl, count in report.num_matches_per_rule.items():
            counts[report_name(getattr(rule_decl, "name", None) or str(rule_decl))] += count
        sizes.append(egraph_size(encoded.egraph))
        if not report.updated:
            return counts
        if sizes[-1] > GUARD_ENODES:
            break
    raise AssertionError(f"the simplifying rules do not reach a fixpoint: e-graph size after each pass {sizes}")


def optimized(
    model: onnx.ModelProto,
    target: str = "portable",
    cost: CostModel | None = None,
    limits: SaturationLimits | None = None,
) -> RoundTrip:
    """encode -> saturate (``target``'s rules) -> extract (``cost``, uniform by default) -> decode.

    As ``eqsat_helpers.roundtrip``, with the divergence guard of ``simplify_to_fixpoint`` run first (its
    matches are added to the stats).
    """
    original = model.SerializeToString()
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    encoded = encode(model, typed)
    guarded = simplify_to_fixpoint(encoded, target)
    stats = saturate(encoded.egraph, rulesets_for(target), limits or SaturationLimits())
    stats.rule_matches.update(guarded)
    snapshot = freeze(encoded.egraph)
    choice = extract(snapshot, cost or UniformCost(), encoded).choice
    decoded = decode(encoded, snapshot, choice)
    assert model.SerializeToString() == original, "the pipeline must not modify its input model"
    return RoundTrip(decoded, stats)


def matches(trip: RoundTrip, name: str) -> int:
    assert trip.stats is not None
    return trip.stats.rule_matches[name]


def assert_fired(trip: RoundTrip, *names: str) -> None:
    assert trip.stats is not None
    for name in names:
        assert trip.stats.rule_matches[name] > 0, f"{name!r} never matched; matched: {dict(trip.stats.rule_matches)}"


def assert_not_fired(trip: RoundTrip, *names: str) -> None:
    assert trip.stats is not None
    for name in names:
        assert trip.stats.rule_matches[name] == 0, f"{name!r} matched {trip.stats.rule_matches[name]} times"


def assert_unchanged(model: onnx.ModelProto, *names: str, target: str = "portable", compare: bool = True) -> RoundTrip:
    """None of ``names`` matched, the op multiset is the original's, and (``compare``) the outputs agree."""
    trip = optimized(model, target)
    assert_not_fired(trip, *names)
    before, after = op_types(model), op_types(trip.model)
    assert after == before, f"ops changed: {dict(before)} -> {dict(after)}"
    if compare:
        check_and_compare(model, trip.model)
    else:
        onnx.checker.check_model(trip.model)
    return trip


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    (tensor,) = [t for t in model.graph.initializer if t.name == name]
    return numpy_helper.to_array(tensor)


def only_node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    return node


def ints_attr(node: onnx.NodeProto, name: str) -> list[int] | None:
    for attr in node.attribute:
        if attr.name == name:
            return [int(v) for v in attr.ints]
    return None


def int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(attr.i)
    return default
