"""Sizes read from a partly static shape fold to constants (eqsat/partial_shapes.py); unknown sizes stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.partial_shapes import fold_partial_shapes

INT64 = TensorProto.INT64


def _model() -> onnx.ModelProto:
    """x [n, 3, 5]: Gather(shape, 1) and shape[1:] are known, Gather(shape, 0) and shape[0:2] are not."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 5])
    constants = {
        "one": np.array(1, dtype=np.int64),
        "minus_one": np.array([-1], dtype=np.int64),
        "zero": np.array(0, dtype=np.int64),
        "starts": np.array([1], dtype=np.int64),
        "ends": np.array([2**63 - 1], dtype=np.int64),
        "starts0": np.array([0], dtype=np.int64),
        "ends2": np.array([2], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["channels"], axis=0),
        helper.make_node("Gather", ["shape", "minus_one"], ["last"], axis=0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Slice", ["shape", "starts", "ends"], ["tail"]),
        helper.make_node("Slice", ["shape", "starts0", "ends2"], ["head"]),
        helper.make_node("Shape", ["x"], ["from_one"], start=1),
        helper.make_node("Gather", ["from_one", "zero"], ["channels_again"], axis=0),
    ]
    outputs = {"channels": [], "last": [1], "batch": [], "tail": [2], "head": [2], "channels_again": []}
    graph = helper.make_graph(
        nodes,
        "g",
        [x],
        [helper.make_tensor_value_info(name, INT64, dims) for name, dims in outputs.items()],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_known_sizes_fold_and_unknown_ones_stay() -> None:
    model = _model()
    folded, count = fold_partial_shapes(model, onnx.shape_inference.infer_shapes(model))
    assert count == 4
    values = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    assert values["channels"] == 3 and values["last"].tolist() == [5] and values["tail"].tolist() == [3, 5]
    assert values["channels_again"] == 3
    remaining = [n.output[0] for n in folded.graph.node if n.op_type in ("Gather", "Slice")]
    assert sorted(remaining) == ["batch", "head"]
    for batch in (1, 4):
        x = np.zeros((batch, 3, 5), np.float32)
        for want, got in zip(_run(model, x), _run(folded, x), strict=True):
            np.testing.assert_array_equal(want, got)


def test_the_optimizer_folds_them_and_verifies() -> None:
    model = _model()
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok
    assert sorted(n.op_type for n in result.graph.node).count("Gather") == 1  # the batch size alone
    x = np.ones((2, 3, 5), np.float32)
    for want, got in zip(_run(model, x), _run(result, x), strict=True):
        np.testing.assert_array_equal(want, got)


def _same_padding_chain() -> onnx.ModelProto:
    """Two stride-2 convolutions with TF's "same" padding computed from the input's size at run time, as timm's
    ``Conv2dSame`` (tf_efficientnet*) exports: the second chain reads the size of the first Pad's result."""
    nodes: list[onnx.NodeProto] = []
    weights = [
        numpy_helper.from_array(np.array([2], np.int64), "axis_h"),
        numpy_helper.from_array(np.array(2, np.int64), "stride"),
        numpy_helper.from_array(np.array(3, np.int64), "kernel"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.zeros(2, np.int64), "no_pads"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
    ]

    def same_pad(x: str, tag: str) -> str:
        def add(op: str, inputs: list[str], **attrs: object) -> str:
            name = f"{tag}_{op}_{len(nodes)}"
            nodes.append(helper.make_node(op, inputs, [name], **attrs))
            return name

        size = add("Gather", [add("Shape", [x]), "axis_h"], axis=0)  # [1]: the height (= the width here)
        size = add("Squeeze", [size, "axes0"])
        out = add("Div", [add("Sub", [add("Add", [size, "stride"]), "one"]), "stride"])  # ceil(size / stride)
        total = add(
            "Max",
            [add("Sub", [add("Add", [add("Mul", [add("Sub", [out, "one"]), "stride"]), "kernel"]), size]), "zero"],
        )
        before = add("Div", [total, add("Add", ["one", "one"])])
        after = add("Sub", [total, before])
        b, a = add("Unsqueeze", [before, "axes0"]), add("Unsqueeze", [after, "axes0"])
        pads = add("Concat", ["no_pads", b, b, "no_pads", a, a], axis=0)
        return add("Pad", [x, pads])

    rng = np.random.default_rng(0)
    for index, (c_in, c_out) in enumerate([(3, 8), (8, 8)]):
        weights.append(numpy_helper.from_array(rng.normal(size=(c_out, c_in, 3, 3)).astype(np.float32), f"w{index}"))
    conv1 = helper.make_node("Conv", [same_pad("x", "p1"), "w0"], ["c1"], strides=[2, 2])
    nodes += [conv1, helper.make_node("Relu", ["c1"], ["r1"])]
    nodes.append(helper.make_node("Conv", [same_pad("r1", "p2"), "w1"], ["y"], strides=[2, 2]))
    graph = helper.make_graph(
        nodes,
        "same_padding",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 33, 33])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_sizes_a_fold_makes_known_fold_in_the_next_round() -> None:
    """Shape inference stops at the first Pad (its pads are a run-time value), so only the first chain folded:
    the second read the size of a result whose shape nobody had inferred. A round that makes sizes known is
    followed by another (the fused ops it wrote read as the standard ops of their shapes), to a fixpoint."""
    from onnxsat.inputs import InputSpec

    model = _same_padding_chain()
    options = OptimizeOptions(inputs=InputSpec(shapes={"x": [1, 3, 33, 33]}), specialize=True)
    optimized, report = optimize_model(model, options)
    assert report.verification is not None and report.verification.ok
    assert not [node.op_type for node in optimized.graph.node if node.op_type in ("Shape", "Gather", "Concat")]
    x = np.random.default_rng(1).normal(size=(1, 3, 33, 33)).astype(np.float32)
    np.testing.assert_allclose(_run(optimized, x)[0], _run(model, x)[0], rtol=1e-4, atol=1e-4)
