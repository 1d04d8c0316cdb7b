"""Small constructors shared by the rule families: a plain single-output node and its output.

Rules match nodes of the default domain without subgraphs; writing that once keeps every rule to
the part that differs (op type, inputs, conditions).
"""

from __future__ import annotations

from collections import Counter

from egglog import StringLike

from onnxsat.eqsat.language import Args, Attrs, Node, Tensor, out


def plain(op_type: StringLike, attrs: Attrs, inputs: Args, node_id: StringLike) -> Node:
    """A default-domain node with one output and no subgraph captures."""
    return Node(op_type, "", attrs, inputs, Args.nil(), node_id, 1)


def result(op_type: StringLike, attrs: Attrs, inputs: Args, node_id: StringLike) -> Tensor:
    """The output of :func:`plain`."""
    return out(plain(op_type, attrs, inputs, node_id), 0)


_NAMES: Counter[str] = Counter()


def unique(name: str) -> str:
    """``name``, made unique for egglog (which refuses two rules of one name) by a `` [k]`` suffix.

    One rewrite is often several egglog rules (operand orders, optional inputs); they share a name in
    reports, where :func:`report_name` strips the suffix again.
    """
    _NAMES[name] += 1
    count = _NAMES[name]
    return name if count == 1 else f"{name} [{count}]"


def report_name(name: str) -> str:
    """The rewrite a rule belongs to: its name without :func:`unique`'s suffix."""
    base, bracket, rest = name.rpartition(" [")
    return base if bracket and rest.endswith("]") and rest[:-1].isdigit() else name
