"""Assembling a model: opset, graph inputs, ops drawn from the catalog, outputs.

``generate_model(seed)`` builds one model from ``numpy.random.default_rng(seed)`` alone, so a seed is a complete
bug report. A graph mixes ~115 op types with numpy broadcasting, random attributes, constants (initializers, some
in typed fields, and Constant nodes), shared tensors, multi-output nodes, dead nodes, intermediate tensors exposed
as graph outputs, If branches that capture outer tensors, model-local function calls, symbolic dimensions and odd
tensor names, over opsets 7..21 (mostly 13..21).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tools.fuzz.graphs import control, elementwise, nn, patterns, reductions, shapes
from tools.fuzz.graphs.builder import BOOL, INT64, Builder, Value
from tools.fuzz.graphs.catalog import weighted
from tools.fuzz.graphs.control import FUNCTION_DOMAIN

IR_VERSION = 9
"""ONNX Runtime 1.31 rejects the IR version onnx 1.23 writes by default."""

FAMILIES = (elementwise.OPS, reductions.OPS, shapes.OPS, nn.OPS, control.OPS, patterns.OPS)
"""The catalog the ops are drawn from. Its order (and each family's) is part of what a seed means: reordering or
inserting ops changes the model of every seed, and the regression tests and documented seeds with it."""


def _opset(rng: np.random.Generator) -> int:
    """Mostly 13..21; sometimes 11..12, or 7..10 (Clip's attribute form, older op signatures)."""
    roll = rng.random()
    if roll < 0.8:
        return int(rng.integers(13, 22))
    if roll < 0.88:
        return int(rng.integers(11, 13))
    return int(rng.integers(7, 11))


def _outputs(b: Builder) -> list[Value]:
    """Most unread values (the rest stay dead), the near-miss intermediates, sometimes more."""
    inputs = {v.name for v in b.inputs}
    unread = [v for v in b.pool if b.reads[v.name] == 0 and v.name not in inputs]
    chosen = {v.name: v for v in unread if b.chance(0.9 if v.name in b.pattern_results else 0.7)}
    if not chosen and unread:
        chosen[unread[-1].name] = unread[-1]
    chosen.update(b.exposed)
    read = [v for v in b.pool if b.reads[v.name] > 0 and v.name not in inputs]
    if read and b.chance(0.15):
        extra = read[int(b.rng.integers(len(read)))]
        chosen[extra.name] = extra
    if b.chance(0.03) and b.pool:  # a graph input returned as it is
        first = b.pool[0]
        chosen[first.name] = first
    if b.chance(0.03):  # an initializer returned as it is
        value = b.constant(b.normal((2,)), as_node=False)
        chosen[value.name] = value
    if not chosen:
        value = b.pool[-1] if b.pool else b.graph_input((2,))
        chosen[value.name] = value
    order = [int(i) for i in b.rng.permutation(len(chosen))]
    values = list(chosen.values())
    return [values[i] for i in order]


def _value_info(value: Value, shaped: bool) -> onnx.ValueInfoProto:
    """A declared type: the static shape, or just the rank (dims unknown: a symbolic input's model)."""
    dims = list(value.shape) if shaped else [None] * value.rank
    return helper.make_tensor_value_info(value.name, value.elem, dims)


def generate_model(seed: int) -> onnx.ModelProto:
    """A random valid model, the same bytes for the same seed (see the module docstring)."""
    rng = np.random.default_rng(seed)
    b = Builder(rng, _opset(rng))
    catalog = weighted(FAMILIES, b.opset)
    for _ in range(b.randint(1, 2)):
        b.graph_input(b.random_shape(), symbolic=b.chance(0.1))
    if b.chance(0.3):
        b.graph_input((b.randint(1, 3),), INT64)
    if b.chance(0.2):
        b.graph_input(b.random_shape(2), BOOL)
    for _ in range(b.randint(3, 14)):
        for _attempt in range(10):
            if catalog[int(rng.integers(len(catalog)))](b) is not False:
                break
    outputs = _outputs(b)
    shaped = not b.symbolic and b.chance(0.9)
    graph = helper.make_graph(
        b.nodes,
        f"fuzz_{seed}",
        b.inputs,
        [_value_info(v, shaped) for v in outputs],
        b.initializers,
    )
    if shaped and b.chance(0.2):
        produced = {o for n in b.nodes for o in n.output} - {v.name for v in outputs}
        graph.value_info.extend(_value_info(v, True) for v in b.pool if v.name in produced and b.chance(0.5))
    opsets = [helper.make_opsetid("", b.opset)] + [helper.make_opsetid(FUNCTION_DOMAIN, 1)] * bool(b.functions)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, functions=list(b.functions.values()))
    model.producer_name = "onnxsat-fuzz"
    return model
