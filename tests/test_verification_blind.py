"""Verification on random inputs says which outputs those inputs leave unchanged: there it sees little."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.inputs import InputSpec
from onnxsat.verification import BLIND_NOTE, verify


def saturating(shift: float) -> onnx.ModelProto:
    """``dead = Relu(x - shift)``: zeros for any random x when ``shift`` is large, as a sigmoid map of a text
    detector on noise is; ``live = x + 1``; ``anchors``: a constant no input reaches."""
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["x", "shift"], ["d"]),
            helper.make_node("Relu", ["d"], ["dead"]),
            helper.make_node("Add", ["x", "one"], ["live"]),
            helper.make_node("Identity", ["grid"], ["anchors"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("dead", "live", "anchors")],
        [
            numpy_helper.from_array(np.array(shift, np.float32), "shift"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
            numpy_helper.from_array(np.arange(4, dtype=np.float32), "grid"),
        ],
    )
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def notes(result: object) -> dict[str, str]:
    return {output.name: output.note for output in result.outputs}  # type: ignore[attr-defined]


def test_an_output_random_inputs_leave_unchanged_is_said_and_still_passes() -> None:
    """PP-OCRv4's text and seal detectors give a map of exact zeros for any random image: a rewrite that moved
    them on real pages would pass unseen. An output no input reaches is checked whole by any run: not said."""
    model = saturating(shift=100.0)
    result = verify(model, model)
    assert result.ok
    assert notes(result) == {"dead": BLIND_NOTE, "live": "", "anchors": ""}
    assert not any(notes(verify(saturating(shift=0.0), saturating(shift=0.0))).values())


def test_given_inputs_are_not_varied() -> None:
    """Inputs the user gave are what the check runs on: nothing random to vary, nothing said."""
    model = saturating(shift=100.0)
    given = InputSpec(given={"x": np.full((1, 8), 3.0, np.float32)})
    assert not any(notes(verify(model, model, given)).values())
    assert not any(notes(verify(model, model, blind_spots=False)).values())


def test_an_output_a_body_computes_from_the_inputs_is_reached_through_the_body() -> None:
    """An If's branches read the input by name from outside (ONNX lists no such input on the node): its output
    is computed from the random inputs too."""
    branch = helper.make_graph(
        [helper.make_node("Sub", ["x", "shift"], ["d"]), helper.make_node("Relu", ["d"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["dead"], then_branch=branch, else_branch=branch)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("dead", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(np.array(100.0, np.float32), "shift"),
        ],
    )
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    assert notes(verify(model, model)) == {"dead": BLIND_NOTE}
