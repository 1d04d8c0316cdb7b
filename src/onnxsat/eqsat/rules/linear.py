"""Matrix products rewritten into Gemm (Olive's peephole checklist).

    MatMul(a, B) + c       ==>  Gemm(a, B, c)        a and B of rank 2, the sum keeps the [M,N] shape
    Gemm(Transpose(a), B)  ==>  Gemm(a, B, transA flipped)   for a rank-2 swap
    Gemm(a, Transpose(B))  ==>  Gemm(a, B, transB flipped)

Gemm computes the product and the bias in one kernel pass; a transposed operand is read in place
instead of being copied first. ONNX Runtime fuses MatMul+Add itself when it runs; doing it here gives
the same graph to every runtime and lets the weight-folding rules see a Gemm.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, i64, relation, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Tensor,
    args_of,
    dims_of,
    has_shape,
    is_float32,
    sole_use,
)
from onnxsat.eqsat.rules.analysis import operands
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import attr_flag, computed, result, unique

linear: Ruleset = ruleset(name="linear")


gemm_candidate = relation("GemmCandidate", Tensor, Tensor, Tensor, Tensor, Tensor)
"""(y, product, a, w, c): ``y = Add(product, c)`` (either order) with ``product = MatMul(a, w)`` float32 and
read only by the Add. The shapes are checked by a second rule that joins from this short relation: in one
rule, egglog's planner paired the four ``HasShape`` facts through their shared dims first, every two
rank-2 tensors with a dimension in common (half a second per iteration on a small Llama). Both nodes are
read from ``Operands`` (``analysis``), not node patterns, which the planner joined through the whole Node
table (0.3-0.6 s per iteration on MaxViT-T and Swin-V2-T once weight folding no longer joined them first)."""


@linear.register
def _matmul_add_to_gemm(
    y: Tensor,
    product: Tensor,
    a: Tensor,
    w: Tensor,
    c: Tensor,
    attrs: Attrs,
    add_attrs: Attrs,
    node_id: String,
    add_id: String,
    m: i64,
    k: i64,
    n: i64,
) -> object:
    for first, second in ((product, c), (c, product)):
        yield rule(
            operands(y, "Add", first, second, add_attrs, add_id),
            operands(product, "MatMul", a, w, attrs, node_id),
            sole_use(product),
            is_float32(product),
            name=unique("MatMul+Add -> Gemm candidates"),
        ).then(gemm_candidate(y, product, a, w, c))
    yield rule(
        gemm_candidate(y, product, a, w, c),
        operands(product, "MatMul", a, w, attrs, node_id),
        has_shape(y, dims_of(m, n)),
        has_shape(product, dims_of(m, n)),
        has_shape(a, dims_of(m, k)),
        has_shape(w, dims_of(k, n)),
        name="MatMul+Add -> Gemm",
    ).then(union(y).with_(result("Gemm", Attrs.none(), args_of(a, w, c), node_id)))


@linear.register
def _transpose_into_gemm(
    y: Tensor,
    a: Tensor,
    t: Tensor,
    other: Tensor,
    rest: Args,
    attrs: Attrs,
    t_attrs: Attrs,
    node_id: String,
    t_id: String,
    d0: i64,
    d1: i64,
) -> object:
    swapped = (eq(t).to(result("Transpose", t_attrs, args_of(a), t_id)), attr_flag(t_attrs, "swap_2d"))
    rank2 = has_shape(a, dims_of(d0, d1))
    flip_a = computed("gemm_flip_a", attrs, Attrs.none(), Args.nil())
    flip_b = computed("gemm_flip_b", attrs, Attrs.none(), Args.nil())
    yield rule(
        eq(y).to(result("Gemm", attrs, Args.cons(t, Args.cons(other, rest)), node_id)),
        *swapped,
        rank2,
        sole_use(t),
        name=unique("Transpose+Gemm(A) -> Gemm"),
    ).then(union(y).with_(result("Gemm", flip_a, Args.cons(a, Args.cons(other, rest)), node_id)))
    yield rule(
        eq(y).to(result("Gemm", attrs, Args.cons(other, Args.cons(t, rest)), node_id)),
        *swapped,
        rank2,
        sole_use(t),
        name=unique("Transpose+Gemm(B) -> Gemm"),
    ).then(union(y).with_(result("Gemm", flip_b, Args.cons(other, Args.cons(a, rest)), node_id)))


register_family(linear, stage="simplify", order=100, targets=STANDARD)
