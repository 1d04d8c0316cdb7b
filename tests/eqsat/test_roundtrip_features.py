"""Lossless round trip (encode -> extract -> decode, no rules unless a test says so) of ONNX features.

Each test builds a small graph that exercises one feature of the format and checks that the decoded
model says exactly the same thing, field by field, and (where ONNX Runtime can run it) computes
bit-identical outputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from eqsat_helpers import (
    MS_DOMAIN,
    assert_bit_identical,
    make_model,
    op_types,
    random_feeds,
    roundtrip,
    run,
)
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.facts import count_dead_nodes

FLOAT = TensorProto.FLOAT


def vi(name: str, shape: list[int | str] | None, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(value, name)


def node_signature(node: onnx.NodeProto) -> tuple[object, ...]:
    """Everything a node says, attributes compared as serialized protos, in order."""
    return (
        node.name,
        node.domain,
        node.op_type,
        tuple(node.input),
        tuple(node.output),
        tuple((a.name, a.type, a.SerializeToString()) for a in node.attribute),
        node.doc_string,
        tuple((p.key, p.value) for p in node.metadata_props),
    )


def assert_same_nodes(original: onnx.ModelProto, result: onnx.ModelProto) -> None:
    assert [node_signature(n) for n in result.graph.node] == [node_signature(n) for n in original.graph.node]


def assert_same_interface(original: onnx.ModelProto, result: onnx.ModelProto) -> None:
    for field in ("input", "output"):
        got = [v.SerializeToString() for v in getattr(result.graph, field)]
        assert got == [v.SerializeToString() for v in getattr(original.graph, field)], field
    assert [(o.domain, o.version) for o in result.opset_import] == [
        (o.domain, o.version) for o in original.opset_import
    ]


def lossless(model: onnx.ModelProto, *, check: bool = True) -> onnx.ModelProto:
    """No-rule round trip that must reproduce every node, the interface and the opsets exactly."""
    if check:
        onnx.checker.check_model(model)
    result = roundtrip(model, target=None, infer=False).model
    if check:
        onnx.checker.check_model(result)
    assert_same_nodes(model, result)
    assert_same_interface(model, result)
    return result


def assert_runs_identically(original: onnx.ModelProto, result: onnx.ModelProto, feeds: dict | None = None) -> None:
    feeds = random_feeds(original) if feeds is None else feeds
    assert_bit_identical(run(original, feeds), run(result, feeds))


# ---- domains -------------------------------------------------------------------------------------


def test_com_microsoft_ops_round_trip_and_run() -> None:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain=MS_DOMAIN),
        helper.make_node(
            "FusedConv",
            ["g", "w", "b"],
            ["c"],
            name="fused",
            domain=MS_DOMAIN,
            activation="Relu",
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inits = [
        init("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32)),
        init("b", rng.standard_normal(3).astype(np.float32)),
    ]
    model = make_model(nodes, [vi("x", [1, 2, 5, 5])], [vi("y", [1, 3, 5, 5])], inits, extra_opsets={MS_DOMAIN: 1})
    result = lossless(model)
    assert_runs_identically(model, result)
    # The ort rules leave an existing com.microsoft FusedConv (and the Relu after it) alone.
    fused = roundtrip(model, target="ort")
    assert op_types(fused.model) == op_types(model)
    assert not fused.fusions
    assert_runs_identically(model, fused.model)


def all_attribute_kinds() -> list[onnx.AttributeProto]:
    """One attribute of every AttributeProto type."""
    tensor = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "t")
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5, 2.5], dtype=np.float32), "sv"),
        numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "si"),
        [2, 3],
    )
    body = helper.make_graph([helper.make_node("Neg", ["a"], ["b"])], "body", [vi("a", [2])], [vi("b", [2])])
    type_proto = helper.make_tensor_type_proto(FLOAT, [2, "n"])
    return [
        helper.make_attribute("f", 0.25),
        helper.make_attribute("i", -7),
        helper.make_attribute("s", "hello"),
        helper.make_attribute("t", tensor),
        helper.make_attribute("g", body),
        helper.make_attribute("sp", sparse),
        helper.make_attribute("tp", type_proto),
        helper.make_attribute("fs", [1.0, -2.5, 3.0]),
        helper.make_attribute("is", [3, 1, 2]),
        helper.make_attribute("ss", ["a", "bc", ""]),
        helper.make_attribute("ts", [tensor, tensor]),
        helper.make_attribute("gs", [body, body]),
        helper.make_attribute("sps", [sparse]),
        helper.make_attribute("tps", [type_proto, type_proto]),
        helper.make_attribute("empty_ints", [], attr_type=onnx.AttributeProto.INTS),
    ]


@pytest.mark.parametrize("target", [None, "ort"])
def test_unknown_custom_domain_op_is_preserved_exactly(target: str | None) -> None:
    custom = helper.make_node(
        "Frobnicate", ["x", "", "z"], ["y", "", "aux"], name="frob", domain="org.example.custom", doc_string="mine"
    )
    custom.attribute.extend(all_attribute_kinds())
    custom.metadata_props.add(key="origin", value="test")
    after = helper.make_node("Relu", ["y"], ["out"], name="relu")
    model = make_model(
        [custom, after],
        [vi("x", [2]), vi("z", [2])],
        [vi("out", [2]), vi("aux", [2])],
        extra_opsets={"org.example.custom": 3},
    )
    result = roundtrip(model, target=target, infer=target is not None).model
    assert result.graph.node[0].SerializeToString() == custom.SerializeToString()
    assert_same_nodes(model, result)
    assert_same_interface(model, result)
    assert [(a.name, a.type) for a in result.graph.node[0].attribute] == [(a.name, a.type) for a in custom.attribute]


# ---- node inputs and outputs ---------------------------------------------------------------------


def test_split_with_an_unused_output_keeps_all_three_outputs() -> None:
    nodes = [
        helper.make_node("Split", ["x"], ["s0", "s1", "s2"], name="split", axis=1, num_outputs=3),
        helper.make_node("Relu", ["s2"], ["r2"], name="relu"),
    ]
    model = make_model(nodes, [vi("x", [2, 6])], [vi("s0", [2, 2]), vi("r2", [2, 2])], opset=18)
    result = lossless(model)
    assert list(result.graph.node[0].output) == ["s0", "s1", "s2"]
    assert_runs_identically(model, result)


def test_topk_with_both_outputs() -> None:
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["values", "indices"], name="topk", axis=-1, largest=1, sorted=1),
        helper.make_node("Cast", ["indices"], ["indices_f"], name="cast", to=FLOAT),
        helper.make_node("Add", ["values", "indices_f"], ["sum"], name="add"),
    ]
    model = make_model(
        nodes,
        [vi("x", [3, 5])],
        [vi("values", [3, 2]), vi("indices", [3, 2], TensorProto.INT64), vi("sum", [3, 2])],
        [init("k", np.array([2], dtype=np.int64))],
    )
    result = lossless(model)
    assert list(result.graph.node[0].output) == ["values", "indices"]
    assert_runs_identically(model, result)


def test_omitted_optional_input_in_the_middle_stays_empty() -> None:
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    model = make_model(nodes, [vi("x", [4, 3])], [vi("y", [4, 3])], [init("hi", np.array(0.3, dtype=np.float32))])
    result = lossless(model)
    assert list(result.graph.node[0].input) == ["x", "", "hi"]
    feeds = {"x": np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)}
    assert_runs_identically(model, result, feeds)
    assert float(run(result, feeds)[0].max()) == pytest.approx(0.3)
    assert float(run(result, feeds)[0].min()) == -2.0  # no lower bound


def test_omitted_optional_output_in_the_middle_stays_empty() -> None:
    """LSTM without its full sequence output (first output ''), only the last hidden state."""
    rng = np.random.default_rng(3)
    hidden = 2
    nodes = [
        helper.make_node(
            "LSTM",
            ["x", "W", "R"],
            ["", "y_h"],
            name="lstm",
            hidden_size=hidden,
            activations=["Sigmoid", "Tanh", "Tanh"],
        )
    ]
    inits = [
        init("W", rng.standard_normal((1, 4 * hidden, 3)).astype(np.float32)),
        init("R", rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)),
    ]
    model = make_model(nodes, [vi("x", [4, 1, 3])], [vi("y_h", [1, 1, hidden])], inits)
    result = lossless(model)
    assert list(result.graph.node[0].output) == ["", "y_h"]
    assert_runs_identically(model, result)


def test_trailing_empty_outputs_are_dropped_which_means_the_same() -> None:
    """Documented behaviour: a trailing '' output is not a tensor, so the decoder does not write it back."""
    nodes = [helper.make_node("Dropout", ["x"], ["y", ""], name="dropout")]
    model = make_model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])
    result = roundtrip(model).model
    onnx.checker.check_model(result)
    assert list(result.graph.node[0].output) == ["y"]
    assert_runs_identically(model, result)


# ---- attributes ----------------------------------------------------------------------------------


def test_every_attribute_type_in_a_runnable_graph() -> None:
    """FLOAT, INT, STRING, TENSOR, FLOATS, INTS, STRINGS and GRAPH attributes, and a node without any."""
    rng = np.random.default_rng(5)
    hidden = 2
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["r"], ["branch_out"], name="then_id")], "then", [], [vi("branch_out", [3, 4])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["r"], ["branch_neg"], name="else_neg")], "else", [], [vi("branch_neg", [3, 4])]
    )
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], name="leaky", alpha=0.2),  # FLOAT
        helper.make_node("Transpose", ["a"], ["t"], name="transpose", perm=[1, 0]),  # INTS
        helper.make_node("Pad", ["t", "pads"], ["p"], name="pad", mode="reflect"),  # STRING
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),  # INT
        helper.make_node(
            "Constant",
            [],
            ["k"],
            name="const_tensor",
            value=numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4)),  # TENSOR
        ),
        helper.make_node("Add", ["f", "k"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu_no_attrs"),  # no attributes
        helper.make_node("Constant", [], ["v"], name="const_floats", value_floats=[1.0, 2.0, 3.0, 4.0]),  # FLOATS
        helper.make_node("Mul", ["r", "v"], ["m"], name="mul"),
        helper.make_node("Unsqueeze", ["m", "axis1"], ["seq"], name="unsqueeze"),
        helper.make_node(
            "LSTM",
            ["seq", "W", "R"],
            ["", "y_h"],
            name="lstm",
            hidden_size=hidden,
            activations=["Sigmoid", "Tanh", "Tanh"],  # STRINGS
        ),
        helper.make_node("If", ["cond"], ["branched"], name="if", then_branch=then_branch, else_branch=else_branch),
    ]
    inits = [
        init("pads", np.array([0, 1, 0, 1], dtype=np.int64)),
        init("axis1", np.array([1], dtype=np.int64)),
        init("W", rng.standard_normal((1, 4 * hidden, 4)).astype(np.float32)),
        init("R", rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)),
    ]
    model = make_model(
        nodes,
        [vi("x", [2, 3]), vi("cond", [], TensorProto.BOOL)],
        [vi("y_h", [1, 3, hidden]), vi("branched", [3, 4])],
        inits,
    )
    result = lossless(model)
    kinds = {a.type for n in result.graph.node for a in n.attribute}
    A = onnx.AttributeProto
    assert {A.FLOAT, A.INT, A.STRING, A.TENSOR, A.FLOATS, A.INTS, A.STRINGS, A.GRAPH} <= kinds
    for original, decoded in zip(model.graph.node, result.graph.node, strict=True):
        assert [a.SerializeToString() for a in decoded.attribute] == [a.SerializeToString() for a in original.attribute]
    assert len(result.graph.node[6].attribute) == 0
    for cond in (True, False):
        feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "cond": np.array(cond)}
        assert_runs_identically(model, result, feeds)


def test_every_attribute_type_on_a_custom_op_compared_one_by_one() -> None:
    node = helper.make_node("Everything", ["x"], ["y"], name="every", domain="org.example.custom")
    node.attribute.extend(all_attribute_kinds())
    model = make_model([node], [vi("x", [2])], [vi("y", [2])], extra_opsets={"org.example.custom": 1})
    result = roundtrip(model).model
    decoded = result.graph.node[0]
    assert len(decoded.attribute) == len(node.attribute) == 15
    for want, got in zip(node.attribute, decoded.attribute, strict=True):
        assert (got.name, got.type) == (want.name, want.type)
        assert got.SerializeToString() == want.SerializeToString(), want.name


# ---- subgraphs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [None, "ort"])
def test_if_branches_capturing_outer_tensors_still_run(target: str | None) -> None:
    """The branches read ``t`` (made by a main-graph node and read by nothing else) and an initializer."""
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["t", "bias"], ["then_out"], name="then_add")], "then", [], [vi("then_out", [2, 3])]
    )
    inner_then = helper.make_graph(
        [helper.make_node("Mul", ["t", "u"], ["inner_out"], name="inner_mul")], "in_then", [], [vi("inner_out", [2, 3])]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Sub", ["u", "t"], ["inner_sub"], name="inner_sub")], "in_else", [], [vi("inner_sub", [2, 3])]
    )
    else_branch = helper.make_graph(
        [
            helper.make_node(
                "If", ["cond2"], ["nested_out"], name="nested_if", then_branch=inner_then, else_branch=inner_else
            )
        ],
        "else",
        [],
        [vi("nested_out", [2, 3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="relu"),
        helper.make_node("Sigmoid", ["x"], ["u"], name="sigmoid"),  # read only by the nested If
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
    ]
    model = make_model(
        nodes,
        [vi("x", [2, 3]), vi("cond", [], TensorProto.BOOL), vi("cond2", [], TensorProto.BOOL)],
        [vi("y", [2, 3])],
        [init("bias", np.full((2, 3), 0.5, dtype=np.float32))],
    )
    onnx.checker.check_model(model)
    result = roundtrip(model, target=target).model
    onnx.checker.check_model(result)
    assert_same_nodes(model, result)
    assert [t.name for t in result.graph.initializer] == ["bias"]
    x = np.random.default_rng(7).standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        for cond2 in (True, False):
            feeds = {"x": x, "cond": np.array(cond), "cond2": np.array(cond2)}
            assert_runs_identically(model, result, feeds)


# ---- graph interface -----------------------------------------------------------------------------


@pytest.mark.parametrize(("ir_version", "opset"), [(3, 9), (9, 17)], ids=["ir3", "ir9"])
def test_initializers_that_are_graph_inputs_stay_graph_inputs(ir_version: int, opset: int) -> None:
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    w = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    model = make_model(
        nodes,
        [vi("x", [2, 3]), vi("w", [2, 3])],
        [vi("y", [2, 3])],
        [init("w", w)],
        opset=opset,
        ir_version=ir_version,
    )
    for target in (None, "ort"):
        result = lossless(model) if target is None else roundtrip(model, target=target).model
        assert_same_nodes(model, result)
        assert [v.name for v in result.graph.input] == ["x", "w"]
        assert [t.SerializeToString() for t in result.graph.initializer] == [init("w", w).SerializeToString()]
        x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
        assert_runs_identically(model, result, {"x": x})
        if ir_version >= 4:
            # From IR 4 on the initializer is only a default: feeding w overrides it in both models.
            override = {"x": x, "w": np.full((2, 3), 10.0, dtype=np.float32)}
            assert_runs_identically(model, result, override)
            assert float(run(result, override)[0].min()) > 5.0


def test_ir3_weights_a_fold_leaves_unread_are_dropped_with_their_input_entries() -> None:
    """IR 3 lists every initializer as a graph input by rule, so they are constants, not interface: the two
    a fold replaced went on being written (a MobileNetV2 at IR 3 came out 58% larger, 59 dead weights)."""
    a, b = np.full((2, 3), 0.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["s"], name="fold_me"), helper.make_node("Add", ["x", "s"], ["y"])],
        [vi("x", [2, 3]), vi("a", [2, 3]), vi("b", [2, 3])],
        [vi("y", [2, 3])],
        [init("a", a), init("b", b)],
        opset=9,
        ir_version=3,
    )
    result = roundtrip(model, target="portable").model
    weights = {t.name for t in result.graph.initializer}
    assert "a" not in weights and "b" not in weights and len(weights) == 1
    assert [v.name for v in result.graph.input] == ["x", *weights]
    onnx.checker.check_model(result, full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    assert_runs_identically(model, result, {"x": x})


def test_symbolic_dimensions_are_preserved() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Tanh", ["m"], ["y"], name="tanh"),
    ]
    model = make_model(
        nodes,
        [vi("x", ["batch", "seq", 4])],
        [vi("y", ["batch", "seq", 2])],
        [init("w", np.random.default_rng(1).standard_normal((4, 2)).astype(np.float32))],
    )
    model.graph.value_info.append(vi("m", ["batch", "seq", 2]))
    result = lossless(model)
    dims = [d.dim_param or d.dim_value for d in result.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq", 4]
    dims = [d.dim_param or d.dim_value for d in result.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq", 2]
    assert [v.SerializeToString() for v in result.graph.value_info] == [
        v.SerializeToString() for v in model.graph.value_info
    ]
    for batch, seq in ((1, 1), (3, 5)):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, seq, 4)).astype(np.float32)}
        assert_runs_identically(model, result, feeds)


def test_model_metadata_is_preserved() -> None:
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu", doc_string="node doc")
    relu.metadata_props.add(key="node_key", value="node_value")
    model = make_model(
        [relu],
        [vi("x", [2])],
        [vi("y", [2])],
        name="the_graph",
        producer_name="unit-test",
        producer_version="1.2.3",
        doc_string="model doc",
        model_version=42,
        domain="org.example.models",
    )
    model.graph.doc_string = "graph doc"
    helper.set_model_props(model, {"author": "tests", "license": "MIT"})
    result = lossless(model)
    for field in ("ir_version", "producer_name", "producer_version", "doc_string", "model_version", "domain"):
        assert getattr(result, field) == getattr(model, field), field
    assert {p.key: p.value for p in result.metadata_props} == {"author": "tests", "license": "MIT"}
    assert (result.graph.name, result.graph.doc_string) == ("the_graph", "graph doc")
    assert result.graph.node[0].doc_string == "node doc"
    assert [(p.key, p.value) for p in result.graph.node[0].metadata_props] == [("node_key", "node_value")]


def test_graph_metadata_props_are_preserved() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2])], [vi("y", [2])])
    model.graph.metadata_props.add(key="graph_key", value="graph_value")
    result = roundtrip(model).model
    assert [(p.key, p.value) for p in result.graph.metadata_props] == [("graph_key", "graph_value")]


def test_node_names_and_order_are_preserved() -> None:
    """The original order is one of several topological orders; the decoder must keep exactly it."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="z_sigmoid"),
        helper.make_node("Neg", ["x"], ["u"], name="b_neg"),
        helper.make_node("Relu", ["x"], ["v"], name="a_relu"),
        helper.make_node("Add", ["u", "v"], ["w"], name="c_add"),
        helper.make_node("Exp", ["s"], ["e"], name="d_exp"),
        helper.make_node("Mul", ["w", "e"], ["y"], name=""),
    ]
    model = make_model(nodes, [vi("x", [3])], [vi("y", [3]), vi("s", [3])])
    result = lossless(model)
    assert [n.name for n in result.graph.node] == ["z_sigmoid", "b_neg", "a_relu", "c_add", "d_exp", ""]
    assert_runs_identically(model, result)


def _local_function(overload: str = "") -> onnx.FunctionProto:
    return helper.make_function(
        "local.fns",
        "ScaledAdd",
        ["a", "b"],
        ["c"],
        [
            helper.make_node("Add", ["a", "b"], ["s"]),
            helper.make_node("Constant", [], ["two"], value_float=2.0),
            helper.make_node("Mul", ["s", "two"], ["c"]),
        ],
        [helper.make_opsetid("", 17)],
        overload=overload,
    )


def test_model_local_functions_are_preserved_and_run() -> None:
    call = helper.make_node("ScaledAdd", ["x", "z"], ["y"], name="call", domain="local.fns")
    model = make_model(
        [call, helper.make_node("Relu", ["y"], ["r"], name="relu")],
        [vi("x", [2, 2]), vi("z", [2, 2])],
        [vi("r", [2, 2])],
        extra_opsets={"local.fns": 1},
    )
    model.functions.append(_local_function())
    result = lossless(model)
    assert [f.SerializeToString() for f in result.functions] == [f.SerializeToString() for f in model.functions]
    assert_runs_identically(model, result)
    x = np.ones((2, 2), dtype=np.float32)
    np.testing.assert_array_equal(run(result, {"x": x, "z": x})[0], np.full((2, 2), 4.0, dtype=np.float32))


def test_call_to_an_overloaded_local_function_keeps_its_overload() -> None:
    call = helper.make_node("ScaledAdd", ["x", "z"], ["y"], name="call", domain="local.fns")
    call.overload = "v2"
    model = make_model(
        [call], [vi("x", [2]), vi("z", [2])], [vi("y", [2])], extra_opsets={"local.fns": 1}, ir_version=10
    )
    model.functions.append(_local_function(overload="v2"))
    onnx.checker.check_model(model)
    result = roundtrip(model).model
    assert result.graph.node[0].overload == "v2"
    assert_runs_identically(model, result)


def test_unchanged_node_keeps_every_nodeproto_field() -> None:
    node = helper.make_node("Op", ["x"], ["y"], name="n", domain="org.example.custom", doc_string="d")
    node.overload = "variant"
    config = node.device_configurations.add()
    config.configuration_id = "cfg"
    config.pipeline_stage = 1
    model = make_model([node], [vi("x", [2])], [vi("y", [2])], extra_opsets={"org.example.custom": 1}, ir_version=11)
    result = roundtrip(model).model
    assert result.graph.node[0].SerializeToString() == node.SerializeToString()


def test_sparse_initializer_stays_sparse() -> None:
    dense = np.zeros((4, 3), dtype=np.float32)
    dense[0, 1], dense[2, 2], dense[3, 0] = 1.5, -2.0, 0.25
    flat = np.flatnonzero(dense)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(dense.reshape(-1)[flat], "sp"), numpy_helper.from_array(flat.astype(np.int64)), [4, 3]
    )
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "sp"], ["y"], name="matmul")],
        "g",
        [vi("x", [2, 4])],
        [vi("y", [2, 3])],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    result = lossless(model)
    assert [t.SerializeToString() for t in result.graph.sparse_initializer] == [sparse.SerializeToString()]
    assert len(result.graph.initializer) == 0
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    assert_runs_identically(model, result, feeds)
    np.testing.assert_allclose(run(result, feeds)[0], feeds["x"] @ dense)


# ---- no merging, no invented nodes ---------------------------------------------------------------


def _twin_relus() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["y1"], name="relu1"),
        helper.make_node("Relu", ["x"], ["y2"], name="relu2"),
        helper.make_node("Add", ["y1", "y2"], ["y"], name="add"),
    ]
    return make_model(nodes, [vi("x", [3])], [vi("y", [3]), vi("y1", [3])])


def test_identical_nodes_are_not_merged_without_rules() -> None:
    model = _twin_relus()
    result = roundtrip(model, target=None).model
    assert_same_nodes(model, result)
    assert_runs_identically(model, result)


@pytest.mark.parametrize("target", ["portable", "ort"])
def test_identical_nodes_are_computed_once_with_rules(target: str) -> None:
    """Common-subexpression elimination (rules/cse.py): the twin Relu goes, its reader reads the first."""
    model = _twin_relus()
    result = roundtrip(model, target=target).model
    assert op_types(result) == {"Relu": 1, "Add": 1}
    (add,) = [n for n in result.graph.node if n.op_type == "Add"]
    assert list(add.input) == ["y1", "y1"]
    assert_runs_identically(model, result)


def test_pass_through_output_is_the_graph_input_itself() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [vi("x", [3])], [vi("x", [3]), vi("y", [3])])
    result = lossless(model)
    assert op_types(result) == {"Relu": 1}  # no Identity invented for the pass-through
    feeds = {"x": np.array([-1.0, 0.0, 2.0], dtype=np.float32)}
    assert_runs_identically(model, result, feeds)
    np.testing.assert_array_equal(run(result, feeds)[0], feeds["x"])


def test_two_graph_outputs_naming_the_same_tensor() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [vi("x", [3])], [vi("y", [3]), vi("y", [3])])
    result = lossless(model)
    assert [o.name for o in result.graph.output] == ["y", "y"]
    assert len(result.graph.node) == 1
    assert_runs_identically(model, result)


def test_output_and_its_identity_copy_are_both_kept() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Identity", ["y"], ["y_copy"], name="copy"),
    ]
    model = make_model(nodes, [vi("x", [3])], [vi("y", [3]), vi("y_copy", [3])])
    result = lossless(model)
    assert_runs_identically(model, result)


def test_graph_output_that_is_an_initializer() -> None:
    nodes = [helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    c = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    model = make_model(nodes, [vi("x", [3])], [vi("y", [3]), vi("c", [3])], [init("c", c)])
    for target in (None, "ort"):
        result = roundtrip(model, target=target).model
        onnx.checker.check_model(result)
        assert_same_nodes(model, result)
        assert [o.name for o in result.graph.output] == ["y", "c"]
        assert_runs_identically(model, result)
        np.testing.assert_array_equal(run(result, random_feeds(model))[1], c)


def test_dead_node_is_dropped_with_the_initializer_only_it_read() -> None:
    """Documented behaviour: nodes none of whose outputs reach a graph output are not decoded."""
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Add", ["x", "dead_bias"], ["dead"], name="dead_add"),
        helper.make_node("Sigmoid", ["dead"], ["dead2"], name="dead_sigmoid"),
    ]
    model = make_model(nodes, [vi("x", [3])], [vi("y", [3])], [init("dead_bias", np.ones(3, dtype=np.float32))])
    assert count_dead_nodes(model.graph) == 2
    result = roundtrip(model).model
    onnx.checker.check_model(result)
    assert [n.name for n in result.graph.node] == ["relu"]
    assert len(result.graph.initializer) == 0
    assert [v.name for v in result.graph.input] == ["x"]
    assert_runs_identically(model, result)
