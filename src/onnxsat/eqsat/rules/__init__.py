"""Rewrite rules, one module per family, and which families each ``--target`` runs.

- ``analysis``: facts derived inside the e-graph (static argument lists and shapes, made constants).
- ``constant_folding``: initializer-only subgraphs and shapes of static tensors computed ahead of time.
- ``noop_removal``: ops that return their input (Identity, Dropout, same-type Cast, same-shape Reshape...).
- ``consecutive``: Transpose+Transpose, reshape chains, LogSoftmax twice, nested Concats.
- ``layout_sinking``: Transpose/Reshape/Squeeze/Unsqueeze/Flatten moved below elementwise ops, so pairs
  of them meet and cancel.
- ``slice_composition``: Slice+Slice with constant parameters as one Slice.
- ``cse``: pure nodes with the same inputs and attributes computed once.
- ``bn_folding``: BatchNormalization folded into the Conv before it, or the unpadded Conv after it, and
  per-channel Mul/Add after it folded into its parameters.
- ``weight_folding``: Mul/Add by constants folded into Conv, Gemm and MatMul weights (Conv+Add bias).
- ``pad_folding``: Pad folded into the padding of the Conv, AveragePool or MaxPool after it.
- ``linear``: MatMul+Add -> Gemm, Transpose folded into Gemm.
- ``reassociation``: elementwise chains with constants reassociated so the constants fold.
- ``lrn_decomposition``: LRN as Mul + banded 1x1 Conv + Pow + Mul (ORT's LRN kernel is slow).
- ``parallel_merge``: MatMuls, Gemms or Convs sharing an input merged into one, then Split (grows the e-graph).
- ``activation_fusion``: Conv+Relu/Clip and Gemm+Relu into ONNX Runtime's com.microsoft fused ops.
- ``ort_guards``: forms ONNX Runtime's load-time fusions leave alone (a residual Add written as Sum), for
  when the cost model says ORT's fused kernel is the slower one.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from egglog import Ruleset

from onnxsat.eqsat.rules.activation_fusion import activation_fusion
from onnxsat.eqsat.rules.analysis import analysis
from onnxsat.eqsat.rules.bn_folding import bn_folding
from onnxsat.eqsat.rules.consecutive import consecutive
from onnxsat.eqsat.rules.constant_folding import constant_folding
from onnxsat.eqsat.rules.cse import cse
from onnxsat.eqsat.rules.layout_sinking import has_layout_chain, layout_sinking
from onnxsat.eqsat.rules.linear import linear
from onnxsat.eqsat.rules.lrn_decomposition import lrn_decomposition
from onnxsat.eqsat.rules.noop_removal import noop_removal
from onnxsat.eqsat.rules.ort_guards import ort_guards
from onnxsat.eqsat.rules.pad_folding import pad_folding
from onnxsat.eqsat.rules.parallel_merge import parallel_merge
from onnxsat.eqsat.rules.reassociation import reassociation
from onnxsat.eqsat.rules.slice_composition import slice_composition
from onnxsat.eqsat.rules.weight_folding import weight_folding
from onnxsat.errors import SettingsError


@dataclass(frozen=True)
class RuleSchedule:
    """What a target runs: cheap rules that only simplify, run to saturation in every iteration, and
    rules that grow the e-graph, run once per iteration under the search limits with back-off."""

    simplify: tuple[Ruleset, ...] = ()
    grow: tuple[Ruleset, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.simplify and not self.grow


STANDARD_SIMPLIFY: tuple[Ruleset, ...] = (
    constant_folding,
    noop_removal,
    consecutive,
    layout_sinking,
    slice_composition,
    cse,
    bn_folding,
    weight_folding,
    pad_folding,
    linear,
    reassociation,
    lrn_decomposition,
)
"""Families that emit standard ONNX only and never enlarge the graph they extract to."""

TARGETS: dict[str, RuleSchedule] = {
    "none": RuleSchedule(),
    "portable": RuleSchedule(simplify=STANDARD_SIMPLIFY, grow=(parallel_merge,)),
    "ort": RuleSchedule(simplify=(*STANDARD_SIMPLIFY, activation_fusion, ort_guards), grow=(parallel_merge,)),
}
"""``none`` runs no rewrite (a lossless round trip that drops dead nodes); ``portable`` emits standard
ONNX only; ``ort`` may emit com.microsoft ops that ONNX Runtime runs."""


def rulesets_for(target: str) -> RuleSchedule:
    if target not in TARGETS:
        raise SettingsError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    return TARGETS[target]


REQUIRED_OP: tuple[tuple[Ruleset, str], ...] = (
    (lrn_decomposition, "LRN"),
    (bn_folding, "BatchNormalization"),
    (slice_composition, "Slice"),
)
"""Families that start from one op type: skipped for models without that op."""


def applicable(schedule: RuleSchedule, graph: onnx.GraphProto, has_parallel_pairs: bool) -> RuleSchedule:
    """``schedule`` without the families that cannot apply to a model with these op types.

    egglog compiles and plans every rule of a family for each new e-graph, and some plans cost seconds
    on graphs of a few hundred nodes even with nothing to match (the 1,500-block Conv chain: 45 s with
    them, 4.8 s without); on the small graphs of the test suite the compiling alone is a quarter second.
    No rule creates the node a family starts from (a BatchNormalization, an LRN, a Slice), so a model
    without one never needs it. The growing family applies only to the pairs the encoder found, layout
    sinking only where a layout op reaches another through elementwise ops.
    """
    op_types = {node.op_type for node in graph.node}
    simplify = tuple(r for r in schedule.simplify if all(r is not f or op in op_types for f, op in REQUIRED_OP))
    if not has_layout_chain(graph):
        simplify = tuple(r for r in simplify if r is not layout_sinking)
    return RuleSchedule(simplify=simplify, grow=schedule.grow if has_parallel_pairs else ())


__all__ = ["TARGETS", "RuleSchedule", "analysis", "applicable", "rulesets_for"]
