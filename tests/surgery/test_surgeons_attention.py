"""ReplaceAttentionMaskValue: the document's three constant kinds, and softmax outputs kept."""

from __future__ import annotations

import numpy as np
from catalogue_checks import applied, feeds, make_model, run
from onnx import TensorProto, helper, numpy_helper

from onnxsat.surgery.surgeons.attention import ReplaceAttentionMaskValue

LOWEST = float(np.finfo(np.float32).min)


def test_document_example_and_softmax_outputs() -> None:
    lowest = helper.make_tensor("", TensorProto.FLOAT, [1], [LOWEST])
    masks = {"output1": "y1", "Constant_output": "y2", "init": "y3"}  # each masks row 0 but column 0
    model = make_model(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["output1"], name="ConstantOfShape", value=lowest),
            helper.make_node(
                "Constant", [], ["Constant_output"], name="Constant", value=helper.make_tensor("", 1, [], [LOWEST])
            ),
            *[
                node
                for mask, out in masks.items()
                for node in (
                    helper.make_node("Mul", [mask, "keep"], [f"{out}_mask"]),
                    helper.make_node("Add", ["x", f"{out}_mask"], [f"{out}_scores"]),
                    helper.make_node("Softmax", [f"{out}_scores"], [out], axis=-1),
                )
            ],
        ],
        {"x": [2, 4]},
        {out: [2, 4] for out in masks.values()},
        {
            "shape": np.array([2, 4], dtype=np.int64),
            "keep": np.array([[0, 1, 1, 1], [0, 0, 0, 0]], dtype=np.float32),
            "init": np.full((), LOWEST, dtype=np.float32),
        },
    )
    result = applied(ReplaceAttentionMaskValue(), model).model
    constants = [numpy_helper.to_array(node.attribute[0].t) for node in result.graph.node[:2]]
    inits = {t.name: numpy_helper.to_array(t) for t in result.graph.initializer}
    assert [value.tolist() for value in constants] == [[-10000.0], -10000.0]
    assert inits["init"] == -10000.0
    inputs = feeds(model)
    for got, want in zip(run(result, inputs), run(model, inputs), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert want[0, 0] == 1.0


def test_values_above_the_threshold_or_read_by_other_ops_stay() -> None:
    model = make_model(
        [helper.make_node("MatMul", ["x", "big"], ["y"])],
        {"x": [1, 2]},
        {"y": [1, 2]},
        {"big": np.full((2, 2), LOWEST, dtype=np.float32)},
    )
    outcome = ReplaceAttentionMaskValue().apply(model)
    assert not outcome.changed and "no mask value" in outcome.notice
