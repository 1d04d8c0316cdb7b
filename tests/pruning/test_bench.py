"""``bench prune``'s measurements (bench.py): continuous output fidelity, on one input or several."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper
from pruning_helpers import Builder

from onnxsat.pruning.bench import bench_prune, evaluation_for, output_fidelity, to_markdown

MODES = ("tree-level", "single-node")


def test_output_fidelity_is_zero_error_and_cosine_one_for_the_same_outputs() -> None:
    dense = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]])
    assert output_fidelity(dense, dense.copy()) == (0.0, 1.0)
    error, cosine = output_fidelity(dense, np.array([[6.0, 8.0], [0.0, 0.0], [0.0, 1.0]]))
    # per row: error 1 (doubled), 0 (both zero), sqrt(2) (rotated); cosine 1, 1, 0
    assert error == 1.0 and np.isclose(cosine, 2 / 3)
    assert output_fidelity(np.zeros((1, 2)), np.ones((1, 2))) == (np.inf, 0.0)


def two_input_model() -> onnx.ModelProto:
    """Conv over ``x`` plus a second input ``y`` (as BERT's mask beside its ids): no dataset can feed it."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    b.node("Add", [b.conv("c2", r, 8, 4), "y"], "sum")
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
        for name, shape in (("x", [2, 3, 8, 8]), ("y", [2, 4, 8, 8]))
    ]
    output = helper.make_tensor_value_info("sum", TensorProto.FLOAT, [2, 4, 8, 8])
    graph = helper.make_graph(b.nodes, "two_inputs", inputs, [output], b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_model_with_two_inputs_is_measured_by_output_error_on_random_feeds() -> None:
    model = two_input_model()
    evaluation = evaluation_for(model, None, 4)
    assert evaluation.dataset is None and len(evaluation.feeds) == 4
    rows = bench_prune(model, evaluation, rates=[0.0, 0.5], reconstruct=(False,), rounds=0)
    assert [(r.rate, r.mode) for r in rows] == [(rate, mode) for rate in (0.0, 0.5) for mode in MODES]
    assert all(r.top1 is None for r in rows)
    assert [(r.error, r.cosine) for r in rows[:2]] == [(0.0, 1.0)] * 2  # rate 0 changes nothing
    assert all(0 < r.error < 1 and 0 < r.cosine < 1 for r in rows[2:])
    table = to_markdown(rows)
    assert "| rel. error | cosine |" in table and "| 0.5 | tree-level | no |" in table
    assert table.splitlines()[-1].split("|")[7].strip() == "-"  # no top-1 without a class to agree on
