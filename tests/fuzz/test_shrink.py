"""The shrinker: generated graphs reduced to the few nodes a failure needs, and nothing it needs removed."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat import weights
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from tools.fuzz.differential import FAILED, check_model
from tools.fuzz.graphs import generate_model
from tools.fuzz.graphs.bodies import generate_bodies_model
from tools.fuzz.shrink import cleanup, prune_bodies, shrink


def valid(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    return True


def has_tanh(model: onnx.ModelProto) -> bool:
    """The synthetic 'failure': a valid model with a Tanh node."""
    return any(node.op_type == "Tanh" for node in model.graph.node) and valid(model)


def seeds_where(predicate: object, count: int) -> list[int]:
    found = [seed for seed in range(200) if predicate(generate_model(seed))]  # type: ignore[operator]
    assert len(found) >= count
    return found[:count]


@pytest.mark.parametrize("seed", seeds_where(has_tanh, 4))
def test_a_generated_graph_shrinks_to_its_tanh(seed: int) -> None:
    model = generate_model(seed)
    shrunk = shrink(model, has_tanh)
    assert has_tanh(shrunk)
    assert [node.op_type for node in shrunk.graph.node] == ["Tanh"], len(model.graph.node)
    assert len(shrunk.graph.output) == 1
    assert len(shrunk.graph.input) + len(shrunk.graph.initializer) == 1  # the Tanh's one operand


def test_a_model_that_does_not_fail_comes_back_unchanged() -> None:
    model = generate_model(3)
    assert shrink(model, lambda candidate: False) is model


def test_the_check_budget_bounds_the_work() -> None:
    calls = []

    def only_the_original_fails(candidate: onnx.ModelProto) -> bool:
        calls.append(1)
        return len(calls) == 1  # no candidate keeps the failure: the shrinker would try them all

    model = generate_model(5)
    assert shrink(model, only_the_original_fails, max_checks=7) is model
    assert len(calls) == 8  # the original, then at most max_checks candidates


def test_an_unread_input_that_causes_the_failure_survives() -> None:
    """Cleanup is a step like any other: an unread 0-D bool input can be the whole bug."""

    def has_scalar_bool_input(model: onnx.ModelProto) -> bool:
        scalar_bools = [
            v
            for v in model.graph.input
            if v.type.tensor_type.elem_type == TensorProto.BOOL and not v.type.tensor_type.shape.dim
        ]
        return bool(scalar_bools) and valid(model)

    (seed,) = seeds_where(has_scalar_bool_input, 1)
    shrunk = shrink(generate_model(seed), has_scalar_bool_input)
    assert has_scalar_bool_input(shrunk)
    assert not shrunk.graph.node
    assert len(shrunk.graph.input) + len(shrunk.graph.initializer) <= 2  # the bool, and what the output returns


def test_a_real_differential_failure_shrinks_to_conv_and_batchnorm(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a broken weight-folding kernel, a fuzzed graph's failure comes down to Conv -> BN."""
    portable = OptimizeOptions(target="portable")
    seed = next(
        s
        for s in range(100)
        if "Conv+BatchNormalization -> Conv" in optimize_model(generate_model(s), portable)[1].fusions
        and len(generate_model(s).graph.node) >= 10
    )
    real = weights.KERNELS["scale_conv_weight"]
    monkeypatch.setitem(weights.KERNELS, "scale_conv_weight", lambda args, attrs: real(args, attrs) * 1.05)
    model = generate_model(seed)
    outcome = check_model(model, ["portable"], determinism=False)
    assert outcome.status == FAILED

    def same_failure(candidate: onnx.ModelProto) -> bool:
        return check_model(candidate, ["portable"], determinism=False).signature == outcome.signature

    shrunk = shrink(model, same_failure)
    ops = [node.op_type for node in shrunk.graph.node if node.op_type != "Constant"]
    assert same_failure(shrunk)
    assert ops == ["Conv", "BatchNormalization"], (len(model.graph.node), ops)


def test_cleanup_drops_dead_nodes_and_unread_tensors_only() -> None:
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Relu", ["x"], ["live"]),
        helper.make_node("Neg", ["x"], ["dead"]),
        helper.make_node("Add", ["dead", "unused_weight"], ["dead2"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [vi("x", TensorProto.FLOAT, [2]), vi("spare", TensorProto.FLOAT, [2])],
        [vi("live", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "unused_weight")],
        value_info=[vi("dead", TensorProto.FLOAT, [2]), vi("live", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, ir_version=9)
    clean = cleanup(model)
    assert [n.op_type for n in clean.graph.node] == ["Relu"]
    assert [v.name for v in clean.graph.input] == ["x"]
    assert not clean.graph.initializer
    assert [v.name for v in clean.graph.value_info] == ["live"]
    assert len(model.graph.node) == 3, "cleanup works on a copy"


def test_dead_nodes_inside_bodies_are_shrunk_away() -> None:
    """A failure in a control-flow model shrinks into its bodies too: their dead nodes and initializers go."""
    model = generate_bodies_model(3)
    bodies = [a.g for n in model.graph.node for a in n.attribute if a.HasField("g")]
    before = sum(len(g.node) for g in bodies)

    def body_nodes(candidate: onnx.ModelProto) -> int:
        return sum(len(a.g.node) for n in candidate.graph.node for a in n.attribute if a.HasField("g"))

    def still_fails(candidate: onnx.ModelProto) -> bool:  # "the failure": a valid model with a non-empty body
        try:
            onnx.checker.check_model(candidate, full_check=True)
        except Exception:
            return False
        return body_nodes(candidate) > 0

    assert prune_bodies(model) is not None
    shrunk = shrink(model, still_fails)
    assert 0 < body_nodes(shrunk) < before
    assert prune_bodies(shrunk) is None
