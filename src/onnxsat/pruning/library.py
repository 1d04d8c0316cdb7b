"""The node attribute library (ONNXPruner, Table II): which role each ONNX op plays in a node association tree.

The walk in ``trees.py`` never guesses what an op does to channels: it asks this table. Four categories:

- ``pruned``: Conv, ConvTranspose, Gemm, MatMul, LSTM, GRU, RNN. With constant weights such a node is a
  **root** (its output channels, a recurrent node's hidden units, are what gets pruned) and, when it reads
  a tracked tensor, a **stop-process leaf** (its input channels shrink: the input columns of a recurrent
  node's ``W``). A depthwise Conv is the exception, decided per node: its channels follow its input's, so
  it is handled as next-process.
- ``next-no-process``: the channels pass through unchanged in number and order, maybe on another axis
  (activations, pools, Flatten, Reshape, Transpose, Squeeze, Slice on another axis, an Einsum
  elementwise in the channels' letter, ...). Ops that would mix channels (Softmax over the channel axis,
  a Reduce over it, an Einsum contracting it) end the group as unprunable instead.
- ``next-process``: the channels pass through but the node holds per-channel data that must be sliced
  too (BatchNormalization parameters, Add/Mul/... by per-channel constants) or ties channel spaces
  together (Add of two branches, Concat offsets, the Q, K and V of an Attention node).
- ``stop-process``: the branch ends and nothing needs changing (Shape, Size: their values follow the
  pruned shape at run time).

A user extends the table with a JSON object ``{"op_type": "category"}`` (``load_library``); an op of
another domain is named with it, ``{"com.example.Foo": "stop-process"}``, so it is never taken for a
standard op of the same name. Only the two categories that need no op-specific code can be given to new
ops: ``next-no-process`` (the op must be elementwise on its first input: ``trees.py`` checks the inferred
shapes agree) and ``stop-process``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from onnxsat.errors import SettingsError
from onnxsat.op_kinds import ELEMENTWISE_UNARY

PRUNED = "pruned"
NEXT_NO_PROCESS = "next-no-process"
NEXT_PROCESS = "next-process"
STOP_PROCESS = "stop-process"
CATEGORIES = (PRUNED, NEXT_NO_PROCESS, NEXT_PROCESS, STOP_PROCESS)
USER_CATEGORIES = (NEXT_NO_PROCESS, STOP_PROCESS)
"""What an extra op may be declared as: the others need code that knows the op's parameters."""

_PRUNED = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN")
_NEXT_NO_PROCESS = (
    # elementwise activations and math: same shape, channel for channel
    *ELEMENTWISE_UNARY,
    "IsNaN",
    "IsInf",
    "Pow",
    "Identity",
    "Dropout",
    # axis-aware: the walk follows or refuses the channel axis through them
    "Softmax",
    "LogSoftmax",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "GlobalLpPool",
    "Flatten",
    "Pad",
    "Reshape",
    "Transpose",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceSum",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ArgMax",
    "ArgMin",
    "Unsqueeze",
    "Squeeze",
    "Resize",
    "Upsample",
    "Slice",
    "Split",
    "Einsum",
    "RotaryEmbedding",
    "Expand",
)
_NEXT_PROCESS = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "PRelu",
    "Sum",
    "Max",
    "Min",
    "Mean",
    "Where",
    "Concat",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "RMSNormalization",
    "GroupNormalization",
    "LRN",
    "MeanVarianceNormalization",
    "Gather",
    "Attention",
)
_STOP_PROCESS = ("Shape", "Size")

KEPT_WHOLE: Mapping[str, str] = {
    "DepthToSpace": "moves blocks of channels into space (a super-resolution net's pixel shuffle): pruning through "
    "it would need whole blocks of channels",
    "SpaceToDepth": "moves space into blocks of channels: pruning through it would need whole blocks of channels",
}
"""Ops no library entry can describe (their channels are not kept one for one, nor ignored): the group they read
stays whole, for this reason, where an unknown op's message would point to a library entry that is refused."""

BUILTIN: Mapping[str, str] = {
    **dict.fromkeys(_PRUNED, PRUNED),
    **dict.fromkeys(_NEXT_NO_PROCESS, NEXT_NO_PROCESS),
    **dict.fromkeys(_NEXT_PROCESS, NEXT_PROCESS),
    **dict.fromkeys(_STOP_PROCESS, STOP_PROCESS),
}
"""The built-in library: op type (default ONNX domain) -> category."""


def load_library(extra: Path | str | None = None) -> dict[str, str]:
    """The built-in library merged with the JSON object in ``extra`` (op type, ``domain.OpType`` outside the
    standard domain -> category).

    A new op may only be ``next-no-process`` or ``stop-process`` (see the module docstring); a built-in
    op keeps its category, since the walk's handling of it is code, not data.
    """
    library = dict(BUILTIN)
    if extra is None:
        return library
    path = Path(extra)
    try:
        entries = json.loads(path.read_text())
    except OSError as error:
        raise SettingsError(f"--library {path}: cannot read it: {error.strerror or error}") from None
    except ValueError as error:
        raise SettingsError(f"--library {path}: not valid JSON: {error}") from None
    if not isinstance(entries, dict):
        raise SettingsError(f'--library {path}: expected a JSON object {{"OpType": "category"}}')
    for op_type, category in entries.items():
        if category not in CATEGORIES:
            raise SettingsError(f"--library {path}: {op_type!r} has unknown category {category!r}")
        known = BUILTIN.get(op_type)
        if known is not None and known != category:
            raise SettingsError(f"--library {path}: {op_type} is built in as {known}; its category cannot change")
        if known is None and category not in USER_CATEGORIES:
            raise SettingsError(
                f"--library {path}: a new op ({op_type}) can only be {' or '.join(USER_CATEGORIES)}; "
                f"{category} needs code that knows its parameters"
            )
        library[op_type] = category
    return library
