"""Which Pad nodes a pool after them can take into its own padding, decided in Python at encode time.

A pool pads differently from a Pad node, so the checks are many and all about values (the pads, the
pad value, the kernel), which a rule body could only test through a quadratic join:

- AveragePool divides by the window size including the padding only with ``count_include_pad=1``; a
  zero Pad before a pool that excludes padding is still absorbed if the pool pads nothing itself (the
  merged pool then counts its padding, as the zeros were counted before).
- MaxPool ignores its padding (as if -inf): the Pad must pad with -inf, or with zeros in front of a
  Relu's output, which no window can then prefer; only the single-output form (indices would differ).
- ONNX Runtime refuses pool pads as wide as the kernel, ceil mode computes other output sizes with
  padding, and dilated windows could see only padding: all three are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx

POOLS = frozenset({"AveragePool", "MaxPool"})


def _attr(node: onnx.NodeProto, name: str) -> onnx.AttributeProto | None:
    return next((a for a in node.attribute if a.name == name), None)


def _ints(node: onnx.NodeProto, name: str) -> list[int]:
    attr = _attr(node, name)
    return [int(v) for v in attr.ints] if attr is not None else []


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    attr = _attr(node, name)
    return int(attr.i) if attr is not None else default


def merged_pool_pads(pad_values: np.ndarray, pool: onnx.NodeProto) -> list[int] | None:
    """The pool's own pads plus the Pad's spatial ones, or None if the pool cannot take them.

    ``pad_values`` is the Pad's ``pads`` input ([begin per axis..., end per axis...]) over N, C and the
    spatial axes; batch and channel must be unpadded.
    """
    pads = np.asarray(pad_values, dtype=np.int64).reshape(-1)
    kernel = _ints(pool, "kernel_shape")
    rank = len(kernel) + 2
    if pads.size != 2 * rank or np.any(pads < 0) or pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
        return None
    auto_pad = _attr(pool, "auto_pad")
    if auto_pad is not None and auto_pad.s != b"NOTSET":
        return None
    if _int(pool, "ceil_mode", 0) != 0 or any(d != 1 for d in _ints(pool, "dilations")):
        return None
    own = _ints(pool, "pads") or [0] * (2 * len(kernel))
    spatial = [int(p) for p in [*pads[2:rank], *pads[rank + 2 :]]]
    merged = [a + b for a, b in zip(own, spatial, strict=True)]
    if any(p >= kernel[i % len(kernel)] for i, p in enumerate(merged)):
        return None
    return merged


def _pad_value_fits(pool: onnx.NodeProto, value: np.ndarray | None, input_producer: str | None) -> bool:
    """The Pad's fill value is what the pool assumes for its own padding (see the module docstring)."""
    fill = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0])
    if pool.op_type == "AveragePool":
        return fill == 0.0 and (_int(pool, "count_include_pad", 0) == 1 or not any(_ints(pool, "pads")))
    if len([o for o in pool.output if o]) != 1:
        return False
    return fill == -np.inf or (fill == 0.0 and input_producer == "Relu")


def _attribute_pads(pad: onnx.NodeProto) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A Pad's pads and fill value before opset 11, where both are attributes (the value defaults to 0)."""
    pads = _attr(pad, "pads")
    value = _attr(pad, "value")
    return (
        np.asarray(pads.ints, dtype=np.int64) if pads is not None else None,
        np.asarray(value.f, dtype=np.float32) if value is not None else None,
    )


def absorbable_pads(
    graph: onnx.GraphProto,
    read_constant: Callable[[str], np.ndarray | None],
    sole_use: Callable[[str], bool],
    opset: int,
) -> Iterable[str]:
    """Outputs of constant-mode Pads whose only reader is a pool that can take their padding."""
    producer = {o: n.op_type for n in graph.node if n.domain in ("", "ai.onnx") for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for pad in graph.node:
        if pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx") or not pad.output or not pad.output[0]:
            continue
        mode = _attr(pad, "mode")
        if (mode is not None and mode.s != b"constant") or len(pad.input) > 3 or not sole_use(pad.output[0]):
            continue
        (pool,) = readers.get(pad.output[0], [None])
        if pool is None or pool.op_type not in POOLS or pool.domain not in ("", "ai.onnx"):
            continue
        if pool.input[0] != pad.output[0]:
            continue
        if opset < 11:  # the pads and the fill value are attributes
            pad_values, value = _attribute_pads(pad)
        else:
            pad_values = read_constant(pad.input[1]) if len(pad.input) > 1 and pad.input[1] else None
            value = read_constant(pad.input[2]) if len(pad.input) > 2 and pad.input[2] else None
            if len(pad.input) > 2 and pad.input[2] and value is None:
                continue
        if pad_values is None:
            continue
        if merged_pool_pads(pad_values, pool) is None:
            continue
        if _pad_value_fits(pool, value, producer.get(pad.input[0])):
            yield pad.output[0]
