"""Two consecutive Slices as one.

    Slice(Slice(x, p1), p2), constant params, x of static shape  ==>  Slice(x, p)

The composed parameters are computed at decode time (``eqsat/slicing.py``): each axis keeps an
arithmetic progression of the input's indices, so both slices replayed on index ranges give ``p``.
A family of its own so that models without Slices do not pay for compiling its nine rules.
"""

from __future__ import annotations

from egglog import Ruleset, String, eq, ne, rule, ruleset, union

from onnxsat.eqsat.language import (
    Args,
    Attrs,
    Dims,
    Tensor,
    args_of,
    has_shape,
    opset_at_least,
    sole_use,
    static_args,
    static_dims,
)
from onnxsat.eqsat.rules.families import STANDARD, register_family
from onnxsat.eqsat.rules.patterns import derived, result, unique
from onnxsat.eqsat.slicing import (
    composed_slice_axes,
    composed_slice_ends,
    composed_slice_starts,
    composed_slice_steps,
)
from onnxsat.eqsat.weights import weight_kernel

slice_composition: Ruleset = ruleset(name="slice_composition")

# The composed Slice's parameters, computed at decode time from both Slices' parameters and x's shape.
weight_kernel("composed_slice_starts")(composed_slice_starts)
weight_kernel("composed_slice_ends")(composed_slice_ends)
weight_kernel("composed_slice_axes")(composed_slice_axes)
weight_kernel("composed_slice_steps")(composed_slice_steps)


SLICE_PARAM_FORMS = (2, 3, 4)
"""Slice (opset 10 on) takes starts and ends, then optional axes and steps."""
SLICE_PARTS = ("starts", "ends", "axes", "steps")


@slice_composition.register
def _slices(
    y: Tensor,
    z: Tensor,
    x: Tensor,
    a1: Attrs,
    a2: Attrs,
    r1: Args,
    r2: Args,
    id1: String,
    id2: String,
    d: Dims,
    s1: Tensor,
    e1: Tensor,
    c1: Tensor,
    p1: Tensor,
    s2: Tensor,
    e2: Tensor,
    c2: Tensor,
    p2: Tensor,
) -> object:
    inner_params, outer_params = (s1, e1, c1, p1), (s2, e2, c2, p2)
    for inner_count in SLICE_PARAM_FORMS:
        for outer_count in SLICE_PARAM_FORMS:
            # Omitted axes or steps reach the kernel as absent tensors (None): all axes, unit steps.
            inner = inner_params[:inner_count] + (Tensor.absent(),) * (4 - inner_count)
            outer = outer_params[:outer_count] + (Tensor.absent(),) * (4 - outer_count)
            kernel_args = args_of(Tensor.ints(d), *inner, *outer)
            params = [derived(f"composed_slice_{part}", kernel_args, a1) for part in SLICE_PARTS]
            yield rule(
                eq(y).to(result("Slice", a1, Args.cons(z, r1), id1)),
                eq(r1).to(args_of(*outer_params[:outer_count])),
                sole_use(z),
                eq(z).to(result("Slice", a2, Args.cons(x, r2), id2)),
                eq(r2).to(args_of(*inner_params[:inner_count])),
                # A no-op Slice removed elsewhere puts a Slice in its own input's class; composing
                # through that self-loop would nest new parameters forever.
                ne(y).to(z),
                ne(z).to(x),
                static_args(r1),
                static_args(r2),
                has_shape(x, d),
                static_dims(d),
                opset_at_least(10),
                name=unique("Slice+Slice -> Slice"),
            ).then(union(y).with_(result("Slice", a1, args_of(x, *params), id1)))


register_family(slice_composition, stage="simplify", order=50, targets=STANDARD, requires_op="Slice")
