"""Common subexpressions: two pure nodes with the same op, attributes and inputs compute one value.

Hash-consing already shares identical terms, but every node term carries its own node id (so that
decoding can restore names), which keeps duplicates apart. This rule gives each pure node's outputs a
second name without the id, ``Tensor.pure_key(op, attrs, inputs, n, i)``; equal keys are one term, so
duplicates fall into one e-class by congruence, in time linear in the graph (a rule joining two nodes
on their inputs was quadratic in egglog's join). Only
``pure`` nodes qualify (standard, deterministic, no subgraphs: see ``facts.attribute_flags``).
Constant initializers with equal type, dims and bytes under different names are written by the encoder
as one term (``facts.equal_initializers``), so the nodes that read them merge here too.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, rule, ruleset, union

from onnxsat.eqsat.language import Args, Attrs, Node, Tensor, out
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, unique

cse: Ruleset = ruleset(name="cse")


@cse.register
def _same_node(y: Tensor, op: String, attrs: Attrs, inputs: Args, node_id: String, n: i64, i: i64) -> object:
    node = Node(op, "", attrs, inputs, Args.nil(), node_id, n)
    yield rule(eq(y).to(out(node, i)), attr_flag(attrs, "pure"), name=unique("common subexpression")).then(
        union(y).with_(Tensor.pure_key(op, attrs, inputs, n, i))
    )


register_family(cse, stage="simplify", order=60, targets=STANDARD)
