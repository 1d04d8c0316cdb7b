"""Inside control flow: bodies rewritten like the main graph, decided If and Loop settled, names kept valid."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat.control_flow.bodies import BodyStats, rewrite_bodies
from onnxsat.eqsat.control_flow.branches import settle
from onnxsat.eqsat.control_flow.constants import localize_constants
from onnxsat.eqsat.control_flow.scopes import all_names, unshadow
from onnxsat.eqsat.optimizer import OptimizeOptions, _Phases, _rewrite, optimize_model
from onnxsat.eqsat.rules import rulesets_for
from onnxsat.eqsat.warm import WarmEGraph
from onnxsat.errors import SettingsError
from onnxsat.html.optimize import optimize_page
from onnxsat.inputs import InputSpec
from onnxsat.normal_form import normal_form
from onnxsat.proto_fields import bodies_of
from onnxsat.verification import Tolerance

FLOAT = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "main", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def _branch(name, x, scale, out, extra_dead=True):
    """Mul by a Constant, then Relu, two Transposes that cancel, and a dead node."""
    nodes = [
        helper.make_node("Constant", [], [f"{name}_scale"], value=numpy_helper.from_array(np.float32(scale))),
        helper.make_node("Mul", [x, f"{name}_scale"], [f"{name}_mul"]),
        helper.make_node("Relu", [f"{name}_mul"], [f"{name}_relu"]),
        helper.make_node("Transpose", [f"{name}_relu"], [f"{name}_t"], perm=[1, 0]),
        helper.make_node("Transpose", [f"{name}_t"], [out], perm=[1, 0]),
    ]
    if extra_dead:
        nodes.append(helper.make_node("Tanh", [x], [f"{name}_dead"]))
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, FLOAT, [2, 3])])


def _if_model(condition_node):
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    nodes = [
        condition_node,
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            then_branch=_branch("then", "ex", 2.0, "then_out"),
            else_branch=_branch("else", "ex", -3.0, "else_out"),
        ),
    ]
    return _model(
        nodes,
        [x],
        [helper.make_tensor_value_info("y", FLOAT, [2, 3])],
    )


def _feeds(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)}


def _body_ops(model):
    ops = []
    for node in model.graph.node:
        for body in bodies_of(node):
            ops += [n.op_type for n in body.node]
    return ops


def test_bodies_are_rewritten_and_verified_alone():
    condition = helper.make_node("Greater", ["x_sum", "zero"], ["cond"])
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["x_sum"], keepdims=0),
        condition,
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            then_branch=_branch("then", "ex", 2.0, "then_out"),
            else_branch=_branch("else", "ex", -3.0, "else_out"),
        ),
    ]
    zero = numpy_helper.from_array(np.float32(0.0), "zero")
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", FLOAT, [2, 3])], [zero], opset=11)
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok
    ops = _body_ops(result)
    assert "Transpose" not in ops and "Tanh" not in ops and "Constant" not in ops  # cancelled, dead, lifted
    assert ops.count("Mul") == 2 and ops.count("Relu") == 2
    bodies = report.control_flow["bodies"]
    assert bodies["rewritten"] == 2 and bodies["verified"] == 2 and bodies["refused"] == []
    assert bodies["nodes_before"] == 12 and bodies["nodes_after"] == 4
    onnx.checker.check_model(result, full_check=True)
    for seed in (1, 2, 3):  # both branches taken, on inputs the optimizer never saw
        feeds = _feeds(seed)
        feeds["x"] = feeds["x"] * (1 if seed % 2 else -1) + (3 if seed % 2 else -3)
        np.testing.assert_allclose(_run(result, feeds)[0], _run(model, feeds)[0], rtol=1e-6)


def test_untaken_branch_is_verified_with_the_captured_values():
    """The input decides the branch; the verification run takes one, yet both were run on their own."""
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    nodes = [
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node(
            "If",
            ["flag"],
            ["y"],
            then_branch=_branch("then", "ex", 2.0, "then_out"),
            else_branch=_branch("else", "ex", -3.0, "else_out"),
        ),
    ]
    model = _model(nodes, [x, flag], [helper.make_tensor_value_info("y", FLOAT, [2, 3])])
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok and report.control_flow["bodies"]["verified"] == 2
    for value in (True, False):
        feeds = {**_feeds(4), "flag": np.array(value)}
        np.testing.assert_allclose(_run(result, feeds)[0], _run(model, feeds)[0], rtol=1e-6)


@pytest.mark.parametrize("value", [True, False])
def test_constant_condition_settles_the_if(value):
    condition = helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(value)))
    model = _if_model(condition)
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok and report.control_flow["settled"] == {"If": 1}
    assert "If" not in [n.op_type for n in result.graph.node]
    assert [o.name for o in result.graph.output] == ["y"]
    onnx.checker.check_model(result, full_check=True)
    np.testing.assert_allclose(_run(result, _feeds())[0], _run(model, _feeds())[0], rtol=1e-6)


def test_condition_folded_from_shapes_settles_after_the_rewrite():
    """Shape(x)[0] == 2 with x declared [2, 3]: constant folding decides it, the second round inlines it."""
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero_index"], ["rows"], axis=0),
        helper.make_node("Equal", ["rows", "two"], ["cond"]),
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            then_branch=_branch("then", "ex", 2.0, "then_out"),
            else_branch=_branch("else", "ex", -3.0, "else_out"),
        ),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero_index"),
        numpy_helper.from_array(np.array(2, dtype=np.int64), "two"),
    ]
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", FLOAT, [2, 3])], constants)
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok and report.control_flow["settled"] == {"If": 1}
    assert sorted(n.op_type for n in result.graph.node) == ["Exp", "Mul", "Relu"]
    np.testing.assert_allclose(_run(result, _feeds())[0], _run(model, _feeds())[0], rtol=1e-6)
    # the report's times are every round's, and it says there were two (it showed the last round's alone)
    assert report.egraph["rounds"] == 2
    assert "the last of 2 rewrite rounds" in report.to_text()
    constant_folding = next(row for row in report.rule_seconds if row["family"] == "constant_folding")
    assert constant_folding["seconds"] > 0


def _loop_model(trip, keep_going=True, scan_read=True):
    """v <- v * 2 + i per iteration, and each step's v scanned out."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["i_float"], to=FLOAT),
            helper.make_node("Mul", ["v_in", "two"], ["v_twice"]),
            helper.make_node("Add", ["v_twice", "i_float"], ["v_out"]),
            helper.make_node("Identity", ["v_out"], ["v_scan"]),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", FLOAT, [3]),
            helper.make_tensor_value_info("v_scan", FLOAT, [3]),
        ],
    )
    x = helper.make_tensor_value_info("x", FLOAT, [3])
    constants = [
        numpy_helper.from_array(np.array(trip, dtype=np.int64), "trip"),
        numpy_helper.from_array(np.array(keep_going), "keep_going"),
        numpy_helper.from_array(np.float32(2.0), "two"),
    ]
    outputs = [helper.make_tensor_value_info("v_final", FLOAT, [3])]
    if scan_read:
        outputs.append(helper.make_tensor_value_info("v_steps", FLOAT, [None, 3]))
    loop = helper.make_node("Loop", ["trip", "keep_going", "x"], ["v_final", "v_steps"], body=body)
    return _model([loop], [x], outputs, constants)


@pytest.mark.parametrize(
    ("trip", "keep_going", "scan_read", "settles"),
    [
        (1, True, True, True),
        (0, True, False, True),
        (5, False, False, True),
        (0, True, True, False),
        (2, True, True, False),
    ],
)
def test_loops_that_run_zero_or_one_times_settle(trip, keep_going, scan_read, settles):
    model = _loop_model(trip, keep_going, scan_read)
    settled_model, settled = settle(model)
    assert bool(settled) == settles
    if settles:
        assert "Loop" not in [n.op_type for n in settled_model.graph.node]
        onnx.checker.check_model(settled_model, full_check=True)
    feeds = {"x": np.array([1.0, -2.0, 0.5], np.float32)}
    for want, got in zip(_run(model, feeds), _run(settled_model, feeds), strict=True):
        np.testing.assert_array_equal(want, got)
    _, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok


def test_settling_keeps_names_unique_across_scopes():
    """Inlining a branch whose names the main graph or the other branch also uses renames them."""
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    then = _branch("then", "x", 2.0, "then_out")
    then.node[1].output[0] = "shared"  # the Mul's output; the main graph defines "shared" too... later
    then.node[2].input[0] = "shared"
    nodes = [
        helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=_branch("else", "x", 1.0, "else_out")),
        helper.make_node("Sigmoid", ["y"], ["shared_outer"]),
    ]
    model = _model(nodes, [x], [helper.make_tensor_value_info("shared_outer", FLOAT, [2, 3])])
    settled_model, settled = settle(model)
    assert settled.counts == {"If": 1}
    onnx.checker.check_model(settled_model, full_check=True)
    names = [o for n in settled_model.graph.node for o in n.output]
    assert len(names) == len(set(names))
    np.testing.assert_allclose(_run(settled_model, _feeds())[0], _run(model, _feeds())[0], rtol=1e-6)


def test_unshadow_renames_body_names_an_enclosing_scope_defines():
    x = helper.make_tensor_value_info("x", FLOAT, [2])
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y_inner"])], "t", [], [helper.make_tensor_value_info("y_inner", FLOAT, [2])]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["y_inner2"])], "e", [], [helper.make_tensor_value_info("y_inner2", FLOAT, [2])]
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y_inner"]),
            helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
            helper.make_node("Add", ["y_inner", "z"], ["w"]),
        ],
        "main",
        [x, helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("w", FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model, full_check=True)
    assert unshadow(model.graph) == 1
    onnx.checker.check_model(model, full_check=True)
    assert "y_inner" in all_names(model.graph)
    feeds = {"x": np.array([1.0, -2.0], np.float32), "c": np.array(True)}
    np.testing.assert_allclose(_run(model, feeds)[0], np.maximum(feeds["x"], 0) - feeds["x"])  # relu(x) + neg(x)


def test_models_without_control_flow_report_none():
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    model = _model(
        [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Neg", ["n"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", FLOAT, [2, 3])],
    )
    _, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.control_flow == {}


def test_a_weight_read_only_in_a_branch_stays_when_an_equal_one_is_read_outside():
    """Equal weights share one e-class; the branch reads its own by name, so that name must stay defined."""
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "w_inner"], ["b_mul"]), helper.make_node("Relu", ["b_mul"], ["b_out"])],
        "b",
        [],
        [helper.make_tensor_value_info("b_out", FLOAT, [2, 3])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["o_neg"]), helper.make_node("Abs", ["o_neg"], ["o_out"])],
        "o",
        [],
        [helper.make_tensor_value_info("o_out", FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node("Add", ["x", "w_outer"], ["a"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=other),
        helper.make_node("Add", ["a", "y"], ["z"]),
    ]
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    initializers = [numpy_helper.from_array(weight, "w_outer"), numpy_helper.from_array(weight.copy(), "w_inner")]
    model = _model(nodes, [x, flag], [helper.make_tensor_value_info("z", FLOAT, [2, 3])], initializers)
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok
    onnx.checker.check_model(result, full_check=True)
    feeds = {**_feeds(5), "flag": np.array(True)}
    np.testing.assert_allclose(_run(result, feeds)[0], _run(model, feeds)[0], rtol=1e-6)


def test_specialize_fixes_given_inputs_and_settles_what_they_decide():
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    rate = helper.make_tensor_value_info("rate", TensorProto.INT64, [])
    nodes = [
        helper.make_node("Equal", ["rate", "sixteen_k"], ["cond"]),
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            then_branch=_branch("then", "ex", 2.0, "then_out"),
            else_branch=_branch("else", "ex", -3.0, "else_out"),
        ),
    ]
    constants = [numpy_helper.from_array(np.array(16000, dtype=np.int64), "sixteen_k")]
    model = _model(nodes, [x, rate], [helper.make_tensor_value_info("y", FLOAT, [2, 3])], constants)
    spec = InputSpec(given={"rate": np.array(16000, dtype=np.int64)})
    general, report = optimize_model(model, OptimizeOptions(target="portable", inputs=spec))
    assert report.verification.ok and "If" in [n.op_type for n in general.graph.node] and not report.specialised
    result, report = optimize_model(model, OptimizeOptions(target="portable", inputs=spec, specialize=True))
    assert report.verification.ok and report.control_flow["settled"] == {"If": 1}
    assert [v.name for v in result.graph.input] == ["x"]
    assert report.specialised == ["input 'rate' fixed to 16000: the result no longer takes it"]
    feeds = _feeds(6)
    np.testing.assert_allclose(_run(result, feeds)[0], _run(model, {**feeds, "rate": spec.given["rate"]})[0], rtol=1e-6)
    with pytest.raises(SettingsError, match="--specialize needs"):
        optimize_model(model, OptimizeOptions(target="portable", specialize=True))


def test_weights_only_bodies_read_move_into_them():
    """w_then is read by the then branch alone, w_both by both, w_main outside too: only the first two move.
    w_large, read by both branches like every weight of a merged KV-cache decoder, stays shared: a copy in
    each would add more than half the model's weight bytes."""
    x = helper.make_tensor_value_info("x", FLOAT, [2, 3])
    weights = {
        name: np.full((2, 3), value, np.float32) for name, value in (("w_then", 2), ("w_both", 3), ("w_main", 4))
    }
    weights["w_large"] = np.full((1024, 3), 0.5, np.float32)  # 12 KiB

    def branch(name, weight):
        nodes = [
            helper.make_node("Mul", ["x", weight], [f"{name}_a"]),
            helper.make_node("Add", [f"{name}_a", "w_both"], [f"{name}_b"]),
            helper.make_node("Sub", [f"{name}_b", "w_main"], [f"{name}_c"]),
            helper.make_node("ReduceSum", ["w_large"], [f"{name}_d"], keepdims=1),
            helper.make_node("Add", [f"{name}_c", f"{name}_d"], [f"{name}_out"]),
        ]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", FLOAT, [2, 3])])

    nodes = [
        helper.make_node("If", ["flag"], ["y"], then_branch=branch("t", "w_then"), else_branch=branch("e", "x")),
        helper.make_node("Add", ["y", "w_main"], ["z"]),
    ]
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    initializers = [numpy_helper.from_array(value, name) for name, value in weights.items()]
    model = _model(nodes, [x, flag], [helper.make_tensor_value_info("z", FLOAT, [2, 3])], initializers)
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    assert localize_constants(moved) == 2
    onnx.checker.check_model(moved, full_check=True)
    assert [t.name for t in moved.graph.initializer] == ["w_main", "w_large"]
    branches = {a.name: a.g for a in moved.graph.node[0].attribute}
    then, other = branches["then_branch"], branches["else_branch"]
    assert sorted(t.name for t in then.initializer) == ["w_both", "w_then"]
    assert [t.name for t in other.initializer] == ["w_both"]
    for value in (True, False):
        feeds = {**_feeds(7), "flag": np.array(value)}
        np.testing.assert_array_equal(_run(moved, feeds)[0], _run(model, feeds)[0])


def test_a_body_searched_on_the_ready_egraph_gives_what_a_fresh_one_gives():
    """The e-graph bodies share is pushed and popped around each search: nothing leaks from one to the next."""
    model = _if_model(helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True))))
    branch = next(a.g for a in model.graph.node[-1].attribute if a.name == "then_branch")
    standalone = helper.make_model(
        helper.make_graph(
            list(branch.node), "b", [helper.make_tensor_value_info("ex", FLOAT, [2, 3])], list(branch.output)
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    standalone.ir_version = 9
    standalone, _ = normal_form(standalone)
    options = OptimizeOptions(target="ort")
    warm = WarmEGraph(rulesets_for("ort"))
    fresh = _rewrite(standalone, None, options, None, _Phases())[0]
    for _ in range(3):
        again = _rewrite(standalone, None, options, None, _Phases(), warm)[0]
        assert again.SerializeToString() == fresh.SerializeToString()


def test_the_report_and_page_say_what_happened_to_control_flow():
    model = _if_model(helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(False))))
    _, report = optimize_model(model, OptimizeOptions(target="portable"))
    table = report.to_table()
    assert "control flow: settled to the path constants decide: If 1" in table
    html = optimize_page(report).render()
    assert "Control flow" in html and "If settled to its taken path" in html


def test_a_body_initializer_named_like_an_outer_tensor_leaves_control_flow_alone():
    """ONNX Runtime reads such a name as the outer tensor with its optimizations off and as the initializer
    with them on; no rewrite of it could be checked, so the If stays even with a constant condition."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["t_out"]), helper.make_node("Neg", ["t_out"], ["t_neg"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_neg", FLOAT, [2])],
        [numpy_helper.from_array(np.array([5, 5], np.float32), "a")],
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["a"], ["e_out"])], "else", [], [helper.make_tensor_value_info("e_out", FLOAT, [2])]
    )
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other),
    ]
    model = _model(
        nodes, [helper.make_tensor_value_info("x", FLOAT, [2])], [helper.make_tensor_value_info("out", FLOAT, [2])]
    )
    result, report = optimize_model(model, OptimizeOptions(target="portable"))
    assert report.verification.ok and "If" in [n.op_type for n in result.graph.node]
    assert "named like outer tensors (a)" in report.control_flow["left_alone"]


@pytest.mark.parametrize("opset", [11, 13, 16, 19, 21, 23, 24])
def test_a_loop_nested_in_a_branch_is_reached_at_every_opset(opset):
    """A branch holding only a Loop is still entered: the Loop body's dead node goes, at opsets 11 to 24."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mul", ["v", "two"], ["v2"]),
            helper.make_node("Relu", ["v2"], ["v_out"]),
            helper.make_node("Neg", ["x"], ["dead"]),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", FLOAT, [2]),
        ],
    )
    then = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["lo"], body=body)],
        "t",
        [],
        [helper.make_tensor_value_info("lo", FLOAT, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["ab"]), helper.make_node("Neg", ["ab"], ["eo"])],
        "e",
        [],
        [helper.make_tensor_value_info("eo", FLOAT, [2])],
    )
    inputs = [
        helper.make_tensor_value_info("x", FLOAT, [2]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("n", TensorProto.INT64, []),
    ]
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)],
        "m",
        inputs,
        [helper.make_tensor_value_info("out", FLOAT, [2])],
        [numpy_helper.from_array(np.float32(2), "two")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 9
    result, report = optimize_model(model, OptimizeOptions(target="ort"))
    bodies = report.control_flow["bodies"]
    assert report.verification.ok and bodies["rewritten"] == 3 and bodies["verified"] == 3
    assert bodies["nodes_before"] == 7 and bodies["nodes_after"] == 6
    for flag, steps in ((True, 3), (False, 0)):
        feeds = {"x": np.array([1.0, -2.0], np.float32), "c": np.array(flag), "n": np.array(steps, np.int64)}
        np.testing.assert_array_equal(_run(result, feeds)[0], _run(model, feeds)[0])


def test_a_body_the_rewrite_fails_on_stays_as_it_was():
    model = _if_model(helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True))))

    def failing(standalone, feeds):
        raise ValueError("cannot take this body")

    stats = BodyStats()
    result = rewrite_bodies(model, onnx.shape_inference.infer_shapes(model), failing, stats, Tolerance(), {})
    assert stats.rewritten == 0 and len(stats.refused) == 2
    assert all("ValueError: cannot take this body" in reason for reason in stats.refused)
    for original, kept in zip(model.graph.node, result.graph.node, strict=True):
        assert original.SerializeToString() == kept.SerializeToString()
