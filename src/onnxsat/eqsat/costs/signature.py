"""What a cost model sees of one candidate node: its ``NodeSignature``.

The extractor prices e-nodes that do not exist as ONNX nodes yet, so a cost model cannot be handed a
``NodeProto`` in a graph. It gets everything that decides run time instead: the op, its attributes, and
the shape, element type and constness of every input and output. Two nodes with equal signatures cost
the same, which is what lets the measured model benchmark each signature once and cache it by ``key()``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import onnx

Dim = int | str | None
"""A dimension: an int is static, a str is symbolic (a named dynamic dim), None is unknown."""


@dataclass(frozen=True)
class TensorInfo:
    """Static facts about one tensor.

    ``shape`` is None when even the rank is unknown. ``constant`` marks an initializer or a weight folded at
    optimization time: it is already in memory when the model runs, so nothing has to produce it (a cost
    model still counts reading it).
    """

    shape: tuple[Dim, ...] | None
    elem_type: int | None
    constant: bool = False

    def key(self) -> str:
        """Compact and unambiguous: ``1[1,"N",?]c`` is a constant float tensor of shape (1, N, unknown)."""
        elem = "?" if self.elem_type is None else str(self.elem_type)
        dims = "*" if self.shape is None else "[" + ",".join(_dim_key(d) for d in self.shape) + "]"
        return elem + dims + ("c" if self.constant else "")


def _dim_key(dim: Dim) -> str:
    if dim is None:
        return "?"
    if isinstance(dim, str):
        return json.dumps(dim)  # quoted, so a symbolic name can never look like a number or a separator
    return str(dim)


@dataclass(frozen=True)
class NodeSignature:
    """One ONNX node as a cost model sees it: op, attributes, and the facts about its tensors.

    ``inputs`` holds None for an omitted optional input. ``opset`` is the opset of the node's own domain in
    the model. Signatures hash and compare by value (via ``key()``), so they can key dictionaries even
    though ``onnx.AttributeProto`` itself is unhashable.
    """

    op_type: str
    domain: str
    attributes: tuple[onnx.AttributeProto, ...]
    inputs: tuple[TensorInfo | None, ...]
    outputs: tuple[TensorInfo, ...]
    opset: int = 17

    def key(self) -> str:
        """A stable string naming the signature, the same across processes and runs (for on-disk caches).

        Attributes enter as a digest of their deterministic serialization, sorted by name, so a large
        tensor attribute does not make the key large.
        """
        cached = self.__dict__.get("_key")
        if cached is None:
            inputs = ",".join("-" if t is None else t.key() for t in self.inputs)
            outputs = ",".join(t.key() for t in self.outputs)
            op = f"{self.domain or 'ai.onnx'}:{self.op_type}:{self.opset}"
            cached = f"{op}|{self.attributes_digest()}|{inputs}|{outputs}"
            object.__setattr__(self, "_key", cached)
        return cached

    def attributes_digest(self) -> str:
        if not self.attributes:
            return "-"
        digest = hashlib.sha256()
        for attribute in sorted(self.attributes, key=lambda a: a.name):
            data = attribute.SerializeToString(deterministic=True)
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        return digest.hexdigest()[:24]

    def attribute(self, name: str, default: object = None) -> object:
        """The Python value of attribute ``name`` (ints, floats, strings, lists), or ``default``."""
        for attribute in self.attributes:
            if attribute.name == name:
                return onnx.helper.get_attribute_value(attribute)
        return default

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeSignature):
            return NotImplemented
        return self.key() == other.key()


@runtime_checkable
class CostModel(Protocol):
    """Prices one node alone; the extractor adds up the nodes of a candidate graph."""

    name: str

    def node_cost(self, node: NodeSignature) -> float:
        """Estimated run time of this node alone, in microseconds; always > 0."""
        ...
