"""The lookups the Python-side matchers share (``attention_sites``, ``layer_norm_sites``, ``gelu_sites``): who
writes and who reads each tensor of the main graph, and the small constant values the facts can read.

Those patterns span too many nodes for one egglog rule body; each matcher walks the original graph once
with these, and the rule families add the fused op from the sites it finds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from onnxsat.op_kinds import DEFAULT_DOMAINS

Reader = Callable[[str], "np.ndarray | None"]
"""A small constant's value by tensor name (``facts._small_constant_reader``), None when it is no such constant."""


class SiteGraph:
    """Producers (with their positions) and readers of the main graph's tensors, and ``read``."""

    def __init__(self, graph: onnx.GraphProto, read: Reader) -> None:
        self.producer: dict[str, tuple[int, onnx.NodeProto]] = {
            name: (position, node) for position, node in enumerate(graph.node) for name in node.output if name
        }
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in dict.fromkeys(node.input):
                if name:
                    self.readers.setdefault(name, []).append(node)
        self.read = read

    def node(self, name: str, *op_types: str) -> onnx.NodeProto | None:
        """The standard-domain node of one of ``op_types`` that writes ``name``, or None."""
        found = self.producer.get(name)
        if found is None or found[1].op_type not in op_types or found[1].domain not in DEFAULT_DOMAINS:
            return None
        return found[1]

    def sole_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The one node reading ``name`` when it is a standard-domain ``op_type``, or None."""
        nodes = self.readers.get(name, [])
        if len(nodes) != 1 or nodes[0].op_type != op_type or nodes[0].domain not in DEFAULT_DOMAINS:
            return None
        return nodes[0]

    def single(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a one-element constant, or None."""
        value = self.read(name)
        return None if value is None or value.size != 1 else value

    def is_value(self, name: str, wanted: float, tolerance: float = 0.0, kinds: str = "f") -> bool:
        """``name`` is a one-element constant of a numpy kind in ``kinds`` within ``tolerance`` (relative) of
        ``wanted``."""
        value = self.single(name)
        if value is None or value.dtype.kind not in kinds:
            return False
        return abs(float(value.reshape(-1)[0]) - wanted) <= tolerance * abs(wanted)


def other_operand(node: onnx.NodeProto, name: str) -> str | None:
    """The operand of a binary ``node`` that is not ``name`` (None when both are, or ``node`` is not binary)."""
    if len(node.input) != 2:
        return None
    first, second = node.input
    if first == name and second != name:
        return second
    if second == name and first != name:
        return first
    return None
