"""Attribute sets that rules build, computed when the extracted graph is decoded.

A rule writes ``Attrs.computed(kernel, first, second, values)``; the kernel named here receives the
two attribute lists it refers to and the values of some static tensors, and returns the new node's
attributes. Rules only state *which* attributes a rewritten node takes; the arithmetic lives here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx import helper

from onnxsat.eqsat.registry import registrar

AttrList = list[onnx.AttributeProto]
AttributeKernel = Callable[[AttrList, AttrList, list[np.ndarray | None]], AttrList]

ATTRIBUTE_KERNELS: dict[str, AttributeKernel] = {}
"""Kernel name (the string a rule writes in ``Attrs.computed``) -> kernel; filled by :func:`attribute_kernel`."""
attribute_kernel = registrar(ATTRIBUTE_KERNELS, "attribute kernel")
"""``@attribute_kernel("name")`` registers an attribute kernel where it is defined."""


def _ints(attrs: AttrList, name: str) -> list[int] | None:
    for attr in attrs:
        if attr.name == name:
            return [int(v) for v in attr.ints]
    return None


def _int(attrs: AttrList, name: str, default: int) -> int:
    for attr in attrs:
        if attr.name == name:
            return int(attr.i)
    return default


def _replace(attrs: AttrList, *new: onnx.AttributeProto) -> AttrList:
    names = {a.name for a in new}
    return [a for a in attrs if a.name not in names] + list(new)


@attribute_kernel("compose_perm")
def compose_perm(outer: AttrList, inner: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """Transpose(perm=outer) after Transpose(perm=inner) is one Transpose with perm[j] = inner[outer[j]]."""
    perm_outer, perm_inner = _ints(outer, "perm"), _ints(inner, "perm")
    assert perm_outer is not None and perm_inner is not None, "rules require explicit permutations"
    return [helper.make_attribute("perm", [perm_inner[j] for j in perm_outer])]


def inverse_permutations(
    tables: dict[tuple[str, str, tuple[bytes, ...]], int], attributes: list[AttrList]
) -> Iterator[tuple[int, int]]:
    """Pairs ``(outer, inner)`` of default-domain Transpose attribute tables with explicit perms where
    ``compose_perm(outer, inner)`` is the identity: a Transpose pair that returns its input unchanged."""
    perms = {
        index: perm
        for (domain, op_type, _), index in tables.items()
        if domain in ("", "ai.onnx") and op_type == "Transpose" and (perm := _ints(attributes[index], "perm"))
    }
    for outer, perm_outer in perms.items():
        for inner, perm_inner in perms.items():
            if len(perm_outer) == len(perm_inner):
                composed = _ints(compose_perm(attributes[outer], attributes[inner], []), "perm")
                if composed == list(range(len(perm_outer))):
                    yield outer, inner


@attribute_kernel("gemm_flip_a")
def gemm_flip_a(gemm: AttrList, _: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """A transposed first operand absorbed into Gemm: toggle ``transA``."""
    return _replace(gemm, helper.make_attribute("transA", 1 - _int(gemm, "transA", 0)))


@attribute_kernel("gemm_flip_b")
def gemm_flip_b(gemm: AttrList, _: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """A transposed second operand absorbed into Gemm: toggle ``transB``."""
    return _replace(gemm, helper.make_attribute("transB", 1 - _int(gemm, "transB", 0)))


@attribute_kernel("add_spatial_pads")
def add_spatial_pads(conv: AttrList, pad: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """A Pad's spatial pads (zero for batch and channel, checked by the rule) added to the Conv/Pool's own:
    from its ``pads`` input, or without one (opset < 11), from the Pad's ``pads`` attribute."""
    given = values[0] if values else _ints(pad, "pads")
    assert given is not None
    pads = np.asarray(given, dtype=np.int64).reshape(-1)
    rank = pads.size // 2
    spatial = list(pads[2:rank]) + list(pads[rank + 2 :])
    own = _ints(conv, "pads") or [0] * len(spatial)
    merged = [int(a) + int(b) for a, b in zip(own, spatial, strict=True)]
    return _replace(conv, helper.make_attribute("pads", merged))


@attribute_kernel("add_counted_pads")
def add_counted_pads(pool: AttrList, pad: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """A zero Pad taken into an AveragePool: its zeros were counted in the divisor, so the padding now is."""
    return _replace(add_spatial_pads(pool, pad, values), helper.make_attribute("count_include_pad", 1))


@attribute_kernel("last_axis")
def last_axis(_: AttrList, __: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """``axis = -1`` (the Split that separates the outputs of merged MatMuls or Gemms)."""
    return [helper.make_attribute("axis", -1)]


@attribute_kernel("channel_axis")
def channel_axis(_: AttrList, __: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """``axis = 1`` (the Split that separates the outputs of merged convolutions)."""
    return [helper.make_attribute("axis", 1)]


@attribute_kernel("cast_to")
def cast_to(_: AttrList, __: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """``to`` = the element type held in the single static value (a CastLike's target, known from shapes)."""
    (target,) = values
    assert target is not None
    return [helper.make_attribute("to", int(np.asarray(target).reshape(-1)[0]))]


@attribute_kernel("hard_sigmoid_sixth")
def hard_sigmoid_sixth(_: AttrList, __: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """``alpha = 1/6, beta = 0.5``: a HardSigmoid standing for relu6(x + 3) / 6."""
    return [helper.make_attribute("alpha", 1.0 / 6.0), helper.make_attribute("beta", 0.5)]


@attribute_kernel("tanh_approximation")
def tanh_approximation(_: AttrList, __: AttrList, values: list[np.ndarray | None]) -> AttrList:
    """``approximate = "tanh"`` (a Gelu standing for its tanh approximation written out)."""
    return [helper.make_attribute("approximate", "tanh")]
