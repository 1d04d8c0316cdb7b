"""Two consecutive Slices as one: the parameters of the composed Slice, computed at decode time.

Each axis of a sliced tensor keeps an arithmetic progression of the input's indices, and a slice of an
arithmetic progression is one again, so ``Slice(Slice(x, p1), p2)`` is always a single ``Slice(x, p)``
once the input's shape is known. The kernels replay both slices on index ranges with ONNX's clamping
rules and read ``p`` (starts, ends, axes, steps) off the result; axes neither slice narrows are left out.
"""

from __future__ import annotations

import numpy as np
import onnx

SliceParams = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice's clamping of one axis, as a Python slice of ``range(dim)``."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _apply(index: list[np.ndarray], params: list[np.ndarray | None]) -> None:
    starts, ends, axes, steps = params
    rank = len(index)
    axes = np.arange(len(starts)) if axes is None else axes
    steps = np.ones(len(starts), dtype=np.int64) if steps is None else steps
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = int(axis) + rank if axis < 0 else int(axis)
        index[axis] = index[axis][_onnx_slice(int(start), int(end), int(step), len(index[axis]))]


def composed_slice(args: list[np.ndarray | None]) -> SliceParams:
    """``args``: the input's shape, then the inner Slice's starts, ends, axes, steps, then the outer's
    (absent axes or steps as None). Returns the one Slice that does both."""
    shape = [int(d) for d in args[0]]
    index = [np.arange(d, dtype=np.int64) for d in shape]
    _apply(index, list(args[1:5]))
    _apply(index, list(args[5:9]))
    starts, ends, axes, steps = [], [], [], []
    for axis, (kept, dim) in enumerate(zip(index, shape, strict=True)):
        if len(kept) == dim and np.array_equal(kept, np.arange(dim)):
            continue
        if len(kept) == 0:
            start, end, step = 0, 0, 1
        elif len(kept) == 1:
            start, end, step = int(kept[0]), int(kept[0]) + 1, 1
        else:
            start, step = int(kept[0]), int(kept[1] - kept[0])
            end = int(kept[-1]) + step
            end = -dim - 1 if end < 0 else end  # past index 0 going down: below -dim clamps to "before 0"
        starts.append(start), ends.append(end), axes.append(axis), steps.append(step)
    if not axes:  # both slices kept everything (a no-op rule may remove the result): still a valid Slice
        starts, ends, axes, steps = [0], [shape[0]], [0], [1]
    return tuple(np.array(v, dtype=np.int64) for v in (starts, ends, axes, steps))  # type: ignore[return-value]


def composed_slice_starts(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    return composed_slice(args)[0]


def composed_slice_ends(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    return composed_slice(args)[1]


def composed_slice_axes(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    return composed_slice(args)[2]


def composed_slice_steps(args: list[np.ndarray | None], attrs: dict[str, onnx.AttributeProto]) -> np.ndarray:
    return composed_slice(args)[3]
