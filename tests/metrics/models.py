"""Tiny models with the output layouts real exports have: time-major CTC scores, fed-back state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEPS, FEATURES, CLASSES = 6, 8, 5
HIDDEN = 4


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


def time_major(path: Path, batch: int | str = "N") -> Path:
    """x [N, T, F] -> MatMul -> Softmax -> Transpose -> scores [T, N, C], as CTC recognizers export."""
    weight = np.random.default_rng(3).normal(size=(FEATURES, CLASSES)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
            helper.make_node("Softmax", ["h"], ["p"], axis=-1),
            helper.make_node("Transpose", ["p"], ["scores"], perm=[1, 0, 2]),
        ],
        "ctc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, STEPS, FEATURES])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [STEPS, batch, CLASSES])],
        [numpy_helper.from_array(weight, "w")],
    )
    return _save(graph, path)


def stateful(path: Path, echo_sr: bool = True, features: int | str = FEATURES) -> Path:
    """A recurrent cell as streaming exports have it: x [N, F], state [2, N, H] (batch on axis 1), sr a
    fixed int64 input; prob [N, 1] = sigmoid(h @ v), stateN = [h, h] with h = tanh(x @ w + state[0] @ u);
    ``echo_sr``: also an output with no batch axis (sr passed through), as some exports have; ``features``:
    F as declared (a name: dynamic, as a voice detector declares its step of audio samples)."""
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.normal(size=(FEATURES, HIDDEN)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=(HIDDEN, HIDDEN)).astype(np.float32) * 0.5, "u"),
        numpy_helper.from_array(rng.normal(size=(HIDDEN, 1)).astype(np.float32), "v"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["state", "zero"], ["s0"], axis=0),
            helper.make_node("Squeeze", ["s0", "zero"], ["s"]),
            helper.make_node("MatMul", ["x", "w"], ["xw"], name="input_proj"),
            helper.make_node("MatMul", ["s", "u"], ["su"], name="recurrent"),
            helper.make_node("Add", ["xw", "su"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h"]),
            helper.make_node("MatMul", ["h", "v"], ["logit"], name="head"),
            helper.make_node("Sigmoid", ["logit"], ["prob"]),
            helper.make_node("Unsqueeze", ["h", "zero"], ["h1"]),
            helper.make_node("Concat", ["h1", "h1"], ["stateN"], axis=0),
        ]
        + ([helper.make_node("Identity", ["sr"], ["sr_seen"])] if echo_sr else []),
        "cell",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "N", HIDDEN]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "N", HIDDEN]),
        ]
        + ([helper.make_tensor_value_info("sr_seen", TensorProto.INT64, [])] if echo_sr else []),
        inits,
    )
    return _save(graph, path)


def stateful_reference(path: Path, streams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cell's prob for every step of every stream, and the last state, computed in numpy."""
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    probs = []
    for stream in streams:
        state = np.zeros(HIDDEN, dtype=np.float32)
        for step in stream:
            state = np.tanh(step @ weights["w"] + state @ weights["u"])
            probs.append(1 / (1 + np.exp(-(state @ weights["v"]))))
    return np.array(probs), state


def branches(path: Path) -> Path:
    """y = If(switch, x @ W_then, x @ W_else), x [N, F] -> y [N, CLASSES]: both branches keep their weight in
    a Constant of the same name ``w`` (exports name each branch's weights alike), the else branch one
    level deeper inside a nested If, as real exports nest them."""
    rng = np.random.default_rng(6)

    def body(name: str, weight: np.ndarray, nested: bool) -> onnx.GraphProto:
        constant = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(weight, "w"))
        product = helper.make_node("MatMul", ["x", "w"], [f"{name}_y"], name=f"{name}_matmul")
        out = [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)]
        if not nested:
            return helper.make_graph([constant, product], name, [], out)
        inner = helper.make_graph([constant, product], f"{name}_inner", [], out)
        wrapper = helper.make_node("If", ["switch"], [f"{name}_y"], then_branch=inner, else_branch=inner)
        return helper.make_graph([wrapper], name, [], out)

    then_w = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
    else_w = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["switch"],
                ["y"],
                then_branch=body("then", then_w, nested=False),
                else_branch=body("else", else_w, nested=True),
            )
        ],
        "branches",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES]),
            helper.make_tensor_value_info("switch", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", CLASSES])],
    )
    return _save(graph, path)


def regressor(path: Path, hidden: int = 32) -> Path:
    """x [N, F] -> MatMul -> Relu -> MatMul -> y [N, 1]: one real value per sample, of both signs."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="hidden"),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"], name="head"),
        ],
        "regressor",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [
            numpy_helper.from_array(rng.normal(size=(FEATURES, hidden)).astype(np.float32), "w1"),
            numpy_helper.from_array((rng.normal(size=(hidden, 1)) / hidden).astype(np.float32), "w2"),
        ],
    )
    return _save(graph, path)
