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


DETECTION_ROWS = 12
"""Candidate rows per image of :func:`detector`."""


def detector(path: Path, threshold: float | None = 0.05, masks: bool = False, keypoints: int = 0) -> Path:
    """A detector with its post-processing inside, as torchvision exports one (fixed batch of 1, outputs
    without a batch axis): image [1, 12, 6] holds candidate rows x1, y1, x2, y2, score, class; rows @ w
    (the identity) then keep the rows scoring above ``threshold`` (None: all 12), best first, as boxes
    [K, 4], labels [K] int64 and scores [K]. ``masks``: also masks [K, 1, 8, 8], each box's rows and columns
    of an 8x8 grid (coordinates / 8); ``keypoints``: also keypoints [K, J, 3] (the box's corners and centre
    in turn, visibility 1) and keypoints_scores [K, J]."""
    nodes = [
        helper.make_node("Squeeze", ["image", "zero"], ["rows"]),
        helper.make_node("MatMul", ["rows", "w"], ["moved"], name="head"),
        helper.make_node("Gather", ["moved", "four"], ["all_scores"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(np.eye(6, dtype=np.float32), "w"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array(4, np.int64), "four"),
        numpy_helper.from_array(np.array(5, np.int64), "five"),
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([4], np.int64), "end"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    if threshold is None:
        nodes.append(helper.make_node("Identity", ["moved"], ["kept"]))
        nodes.append(helper.make_node("Identity", ["all_scores"], ["kept_scores"]))
    else:
        inits.append(numpy_helper.from_array(np.array(threshold, np.float32), "threshold"))
        nodes += [
            helper.make_node("Greater", ["all_scores", "threshold"], ["above"]),
            helper.make_node("NonZero", ["above"], ["where"]),
            helper.make_node("Squeeze", ["where", "zero"], ["index"]),
            helper.make_node("Gather", ["moved", "index"], ["kept"], axis=0),
            helper.make_node("Gather", ["all_scores", "index"], ["kept_scores"], axis=0),
        ]
    nodes += [
        helper.make_node("Shape", ["kept_scores"], ["count"]),
        helper.make_node("TopK", ["kept_scores", "count"], ["scores", "order"], axis=0),
        helper.make_node("Gather", ["kept", "order"], ["ranked"], axis=0),
        helper.make_node("Slice", ["ranked", "start", "end", "one"], ["boxes"]),
        helper.make_node("Gather", ["ranked", "five"], ["classes"], axis=1),
        helper.make_node("Cast", ["classes"], ["labels"], to=TensorProto.INT64),
    ]
    outputs = [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["K", 4]),
        helper.make_tensor_value_info("labels", TensorProto.INT64, ["K"]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["K"]),
    ]
    if masks:  # mask[k, 0, r, c] = 1 inside box k's cells of an 8x8 grid over coordinates 0-64
        inits.append(numpy_helper.from_array((np.arange(8, dtype=np.float32) * 8 + 4), "cells"))
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "cell_axes"))
        nodes += [
            helper.make_node("Split", ["boxes"], ["x1", "y1", "x2", "y2"], axis=1),
            helper.make_node("Unsqueeze", ["y1", "cell_axes"], ["y1e"]),
            helper.make_node("Unsqueeze", ["y2", "cell_axes"], ["y2e"]),
            helper.make_node("Unsqueeze", ["x1", "cell_axes"], ["x1e"]),
            helper.make_node("Unsqueeze", ["x2", "cell_axes"], ["x2e"]),
            helper.make_node("Reshape", ["cells", "column_shape"], ["rows_at"]),
            helper.make_node("GreaterOrEqual", ["rows_at", "y1e"], ["below_top"]),
            helper.make_node("LessOrEqual", ["rows_at", "y2e"], ["above_bottom"]),
            helper.make_node("GreaterOrEqual", ["cells", "x1e"], ["right_of_left"]),
            helper.make_node("LessOrEqual", ["cells", "x2e"], ["left_of_right"]),
            helper.make_node("And", ["below_top", "above_bottom"], ["in_rows"]),
            helper.make_node("And", ["right_of_left", "left_of_right"], ["in_columns"]),
            helper.make_node("And", ["in_rows", "in_columns"], ["inside"]),
            helper.make_node("Cast", ["inside"], ["inside_float"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["inside_float", "one"], ["masks"]),
        ]
        inits.append(numpy_helper.from_array(np.array([8, 1], np.int64), "column_shape"))
        outputs.append(helper.make_tensor_value_info("masks", TensorProto.FLOAT, ["K", 1, 8, 8]))
    if keypoints:  # the corners and the centre of the box, in turn, then visibility 1
        corners = np.zeros((4, keypoints * 3), np.float32)
        for joint in range(keypoints):
            x, y = [(0, 1), (2, 1), (2, 3), (0, 3), (None, None)][joint % 5]
            if x is None:
                corners[[0, 2], joint * 3] = corners[[1, 3], joint * 3 + 1] = 0.5
            else:
                corners[x, joint * 3] = corners[y, joint * 3 + 1] = 1.0
        visible = np.zeros(keypoints * 3, np.float32)
        visible[2::3] = 1.0
        inits += [
            numpy_helper.from_array(corners, "corners"),
            numpy_helper.from_array(visible, "visible"),
            numpy_helper.from_array(np.array([-1, keypoints, 3], np.int64), "joint_shape"),
            numpy_helper.from_array(np.full(keypoints, 2.0, np.float32), "joint_weights"),
        ]
        nodes += [
            helper.make_node("MatMul", ["boxes", "corners"], ["joint_xy"]),
            helper.make_node("Add", ["joint_xy", "visible"], ["joint_flat"]),
            helper.make_node("Reshape", ["joint_flat", "joint_shape"], ["keypoints"]),
            helper.make_node("Unsqueeze", ["scores", "one"], ["score_column"]),
            helper.make_node("Mul", ["score_column", "joint_weights"], ["keypoints_scores"]),
        ]
        outputs += [
            helper.make_tensor_value_info("keypoints", TensorProto.FLOAT, ["K", keypoints, 3]),
            helper.make_tensor_value_info("keypoints_scores", TensorProto.FLOAT, ["K", keypoints]),
        ]
    graph = helper.make_graph(
        nodes,
        "detector",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, DETECTION_ROWS, 6])],
        outputs,
        inits,
    )
    return _save(graph, path)
