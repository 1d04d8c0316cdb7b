"""Control flow and calls: If branches that capture outer-scope tensors, and model-local function calls."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tools.fuzz.graphs.builder import BOOL, FLOAT, Builder, Value
from tools.fuzz.graphs.catalog import OpFamily

FUNCTION_DOMAIN = "onnxsat.fuzz"
"""The domain of the model-local functions a graph calls (``Builder.functions``)."""

OPS = OpFamily()


@OPS.register("If", 0.8, 11)
def _if(b: Builder) -> object:
    return if_reading(b, b.floats())


def if_reading(b: Builder, value: Value) -> object:
    """An If whose branches read ``value`` from the outer scope (a capture, not a listed input).

    The encoder must count a capture as a read, keep the captured tensor and its name, and the
    condition comes from an exact tensor (a perturbed condition would flip the branch).
    """
    source = b.floats(exact=True)
    if source is None or not source.exact:
        return False
    total = b.emit("ReduceSum", [source], (), mag=source.mag * source.size, keepdims=0)
    condition = b.emit("Greater", [total, b.scalar(0.0)], (), elem=BOOL)
    branches, mag = [], value.mag
    for branch in ("then", "else"):
        op = str(b.choice(["Relu", "Neg", "Abs", "Tanh", "Identity"]))
        out = b.fresh(branch)
        nodes = [helper.make_node(op, [value.name], [out], name=b.fresh(op))]
        if b.chance(0.5):  # also read a constant: an outer one (captured too) or the branch's own
            array = b.normal(tuple(1 if b.chance(0.5) else d for d in value.shape))
            if b.chance(0.5):
                constant = b.constant(array).name
                b.reads[constant] += 1
            else:
                constant = b.fresh("inner")
                nodes.append(helper.make_node("Constant", [], [constant], value=numpy_helper.from_array(array)))
            nodes.append(helper.make_node("Add", [out, constant], [out + "_plus"], name=b.fresh("Add")))
            out += "_plus"
            mag = max(mag, value.mag + float(np.abs(array).max()) + 0.1)
        output = helper.make_tensor_value_info(out, FLOAT, [None] * value.rank)
        branches.append(helper.make_graph(nodes, b.fresh(branch), [], [output]))
    (name,) = b.node("If", [condition], 1, then_branch=branches[0], else_branch=branches[1])
    b.reads[value.name] += 1
    return b.add(Value(name, FLOAT, value.shape, mag=mag, exact=value.exact))


@OPS.register("ScaledResidual", 0.5, 13)
def _local_function(b: Builder) -> object:
    """A call of a model-local function: ONNX Runtime inlines it; the optimizer must pass it through."""
    x = b.floats()
    if "ScaledResidual" not in b.functions:
        body = [
            helper.make_node("Constant", [], ["half"], value_float=0.5),
            helper.make_node("Mul", ["x", "half"], ["scaled"]),
            helper.make_node("Tanh", ["scaled"], ["squashed"]),
            helper.make_node("Add", ["squashed", "x"], ["y"]),
        ]
        opsets = [helper.make_opsetid("", b.opset)]
        b.functions["ScaledResidual"] = helper.make_function(
            FUNCTION_DOMAIN, "ScaledResidual", ["x"], ["y"], body, opsets
        )
    return b.emit("ScaledResidual", [x], x.shape, mag=x.mag + 1, domain=FUNCTION_DOMAIN)
