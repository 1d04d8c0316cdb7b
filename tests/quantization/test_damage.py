"""Each node's damage: the error a node adds in one run of the float and the quantized model, and the order
the budget search gives nodes back to float in."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.quantization import damage
from onnxsat.quantization.candidate import Candidate
from onnxsat.quantization.damage import error_jumps


def test_error_jumps_blame_the_node_that_adds_the_error() -> None:
    """A node whose quantized output is far off while its input is exact gets the damage; its consumer,
    which only passes the error on, gets none."""

    def relu_chain(scale_first: float) -> onnx.ModelProto:
        graph = helper.make_graph(
            [
                helper.make_node("Mul", ["x", "k"], ["a"], name="first"),
                helper.make_node("Relu", ["a"], ["b"], name="second"),
            ],
            "chain",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4])],
            [numpy_helper.from_array(np.array(scale_first, dtype=np.float32), "k")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 9
        return model

    prepared, damaged = relu_chain(1.0), relu_chain(1.5)  # "first" computes 1.5x: 50% error it adds itself

    class Scorer:
        feed_names = frozenset({"x"})

        def sample_feeds(self, count: int) -> dict[str, np.ndarray]:
            return {"x": np.abs(np.random.default_rng(0).normal(size=(count, 4))).astype(np.float32) + 0.1}

    damage = error_jumps(prepared, damaged, ["first", "second"], Scorer())  # type: ignore[arg-type]
    assert damage["first"] == pytest.approx(0.5, rel=1e-5) and damage["second"] == pytest.approx(0.0, abs=1e-6)

    # The quantizer may reuse a name for a tensor of another shape (tf_efficientnet_lite0's padded maps):
    # such a pair tells nothing and is left out, where it had stopped quantize with numpy's broadcast error.
    padded = relu_chain(1.5)
    padded.graph.node[0].input[1] = "k4"
    padded.graph.initializer.append(numpy_helper.from_array(np.full((1, 1), 1.5, np.float32), "k4"))
    padded.graph.node.insert(0, helper.make_node("Concat", ["x", "x"], ["x2"], axis=1))
    padded.graph.node[1].input[0] = "x2"
    del padded.graph.output[:]
    padded.graph.output.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 8]))
    damage = error_jumps(prepared, padded, ["first", "second"], Scorer())  # type: ignore[arg-type]
    assert damage == {"first": 0.0, "second": 0.0}


def test_nodes_that_change_nothing_alone_rank_by_their_estimate_or_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured alone, "quiet" and "silent" change no output (ORT's quantizer leaves a lone Concat or Add
    float). "quiet" still adds error in the whole quantized model (a YOLOv8 head's Concat of pixel boxes and
    0-1 scores: F1 100% -> 0%), so it ranks by that estimate; "silent" adds none and goes last, so the
    bisection leaves it quantized rather than buying nothing with a float island."""

    estimate = {"loud": 0.5, "quiet": 0.4, "guess_a": 0.3, "silent": 0.0, "guess_b": -0.1}
    monkeypatch.setattr(damage, "error_jumps", lambda model, quantized, nodes, scorer: estimate)
    measured = {"loud": (0.02, 0.3), "guess_a": (0.01, 0.1), "quiet": (0.0, 0.0), "silent": (0.0, 0.0)}

    class Scorer:
        def judge(self, model: str) -> tuple[SimpleNamespace, float]:
            drop, distortion = measured[model]
            return SimpleNamespace(drop=drop), distortion

    candidate = Candidate("static", onnx.ModelProto(), {}, None)
    scorer: Any = Scorer()
    nodes = ["loud", "quiet", "silent", "guess_a", "guess_b"]
    exact = 4  # all but guess_b are measured alone
    ranked = damage.damage_order(onnx.ModelProto(), candidate, nodes, scorer, lambda n, alone: alone, exact)
    assert [name for name, _ in ranked] == ["loud", "guess_a", "quiet", "guess_b", "silent"]
