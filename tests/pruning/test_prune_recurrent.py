"""LSTM, GRU and RNN nodes as roots: their hidden units are pruned.

The exactness tests zero some hidden units in the original (their rows of every gate block of ``W``, ``R``
and ``B``, their ``R`` columns, their entries of the initial states and peepholes): such a unit computes 0
at every step and nothing reads it, and scores 0, so rate 0.5 prunes exactly those. The pruned model must
then compute what the zeroed original does, which holds only if every gate offset, both halves of ``B``
and the ``R`` columns were sliced right.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from pruning_helpers import Builder, assert_rate_zero_is_identity, prune, run, shape_of, status

from onnxsat.commands.prune import add_parser as add_prune_parser
from onnxsat.pruning.prune import association_trees

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
HIDDEN = 8
FEATURES = 6
SEQUENCE = [5, 2, FEATURES]
"""X: [seq, batch, features]."""
DEAD = [1, 2, 5, 6]
"""Hidden units zeroed in the exactness tests: rate 0.5 prunes exactly these."""


def recurrent(
    b: Builder,
    op: str,
    x: str,
    name: str,
    features: int = FEATURES,
    directions: int = 1,
    bias: bool = True,
    state: bool = False,
    extras: bool = False,
    dead: list[int] | None = None,
) -> str:
    """``op`` with constant W, R (and B, initial_h/initial_c, LSTM peepholes P when asked) whose units
    ``dead`` are zeroed; returns its Y."""
    gates, h = GATES[op], HIDDEN
    rows = np.ones(gates * h, bool)
    units = np.zeros(h, bool)
    if dead:
        units[dead] = True
        rows = np.tile(units, gates)

    def weight(suffix: str, shape: tuple[int, ...], axis: int, mask: np.ndarray, scale: float = 0.5) -> str:
        value = (b.rng.normal(size=shape) * scale).astype(np.float32)
        if dead:
            np.moveaxis(value, axis, 0)[mask] = 0.0
        return b.const(f"{name}_{suffix}", value)

    w = weight("w", (directions, gates * h, features), 1, rows)
    r = weight("r", (directions, gates * h, h), 1, rows)
    if dead:  # and R's columns: the recurrence reads nothing of the dead units
        value = onnx.numpy_helper.to_array(b.initializers[-1]).copy()
        value[:, :, units] = 0.0
        b.initializers[-1].CopyFrom(onnx.numpy_helper.from_array(value, r))
    inputs = [x, w, r]
    inputs.append(weight("b", (directions, 2 * gates * h), 1, np.tile(rows, 2), 0.2) if bias else "")
    if state or extras:
        inputs += ["", weight("h0", (directions, 2, h), 2, units)]
    if op == "LSTM" and extras:
        inputs += [weight("c0", (directions, 2, h), 2, units), weight("p", (directions, 3 * h), 1, np.tile(units, 3))]
    direction = "bidirectional" if directions == 2 else "forward"
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    b.nodes.append(helper.make_node(op, inputs, [name], name=name, hidden_size=h, direction=direction, **attrs))
    return name


def head(b: Builder, y: str, directions: int = 1, dead: list[int] | None = None) -> str:
    """Y to ``[seq, batch, dirs * H]`` (Squeeze, or Transpose + Reshape as PyTorch exports a bidirectional
    layer), then a MatMul head of 3 outputs."""
    if directions == 1:
        seq = b.node("Squeeze", [y, b.const(f"{y}_axis", np.array([1], np.int64))], f"{y}_squeeze")
    else:
        moved = b.node("Transpose", [y], f"{y}_transpose", perm=[0, 2, 1, 3])
        seq = b.node("Reshape", [moved, b.const(f"{y}_target", np.array([0, 0, -1], np.int64))], f"{y}_merge")
    return b.node("MatMul", [seq, b.random("head_w", directions * HIDDEN, 3)], "head")


def single(op: str, dead: list[int] | None = None, **options: object) -> onnx.ModelProto:
    b = Builder()
    directions = int(options.get("directions", 1))  # type: ignore[call-overload]
    y = recurrent(b, op, "x", "rnn", dead=dead, **options)  # type: ignore[arg-type]
    return b.model([head(b, y, directions)], input_shape=SEQUENCE)


def assert_exact(build: object, roots: list[str]) -> onnx.ModelProto:
    """Pruning the zeroed units of ``build(dead)`` at rate 0.5 leaves its outputs unchanged."""
    zeroed = build(DEAD)  # type: ignore[operator]
    pruned, report = prune(zeroed, rate=0.5)
    for root in roots:
        assert status(report, root) == "pruned"
        assert shape_of(pruned, f"{root}_r")[1:] == [shape_of(zeroed, f"{root}_r")[1] // 2, HIDDEN // 2]
    np.testing.assert_allclose(run(pruned)[0], run(zeroed)[0], rtol=1e-5, atol=1e-5)
    return pruned


CASES = {
    "plain": {},
    "no-bias": {"bias": False},
    "state": {"state": True},
    "extras": {"extras": True},
    "bidirectional": {"directions": 2},
}


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("case", list(CASES))
def test_pruning_dead_hidden_units_is_exact(op: str, case: str) -> None:
    options = CASES[case]
    pruned = assert_exact(lambda dead: single(op, dead, **options), ["rnn"])
    node = next(n for n in pruned.graph.node if n.op_type == op)
    assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "hidden_size")) == HIDDEN // 2
    gates, directions = GATES[op], int(options.get("directions", 1))  # type: ignore[call-overload]
    assert shape_of(pruned, "rnn_w") == [directions, gates * HIDDEN // 2, FEATURES]
    assert shape_of(pruned, "head_w") == [directions * HIDDEN // 2, 3]
    if options.get("bias", True):
        assert shape_of(pruned, "rnn_b") == [directions, gates * HIDDEN]
    if op == "LSTM" and options.get("extras"):
        assert shape_of(pruned, "rnn_p") == [1, 3 * HIDDEN // 2] and shape_of(pruned, "rnn_c0") == [1, 2, 4]


@pytest.mark.parametrize("op", sorted(GATES))
def test_rate_zero_is_identity(op: str) -> None:
    assert_rate_zero_is_identity(single(op, extras=True))


def lstm_stack(dead: list[int] | None = None) -> onnx.ModelProto:
    """Two LSTM layers (the second reads the first's units as its input features) and a MatMul head."""
    b = Builder()
    first = recurrent(b, "LSTM", "x", "lstm1", dead=dead)
    between = b.node("Squeeze", [first, b.const("between_axis", np.array([1], np.int64))], "between")
    second = recurrent(b, "LSTM", between, "lstm2", features=HIDDEN, dead=dead)
    return b.model([head(b, second)], input_shape=SEQUENCE)


def test_a_two_layer_lstm_stack_prunes_both_layers() -> None:
    pruned = assert_exact(lstm_stack, ["lstm1", "lstm2"])
    assert shape_of(pruned, "lstm2_w") == [1, 4 * HIDDEN // 2, HIDDEN // 2]  # its gates and its input columns
    assert_rate_zero_is_identity(lstm_stack())


def torch_like(dead: list[int] | None = None, h0_input: bool = False) -> onnx.ModelProto:
    """An LSTM whose initial states are zeros made at run time, as PyTorch's exporter writes them:
    ``ConstantOfShape(Concat([1], Unsqueeze(Gather(Shape(x), 1)), [H]))`` (or, ``h0_input``, a graph input)."""
    b = Builder()
    size = b.node("Shape", ["x"], "shape")
    batch = b.node("Gather", [size, b.const("one", np.array(1, np.int64))], "batch", axis=0)
    batch = b.node("Unsqueeze", [batch, b.const("zero_axis", np.array([0], np.int64))], "batch_1d")
    dims = [b.const("layers", np.array([1], np.int64)), batch, b.const("units", np.array([HIDDEN], np.int64))]
    zeros = b.node("ConstantOfShape", [b.node("Concat", dims, "state_shape", axis=0)], "zeros")
    y = recurrent(b, "LSTM", "x", "rnn", dead=dead)
    b.nodes[-1].input.extend(["", "h0" if h0_input else zeros, zeros])
    given = {"x": SEQUENCE, "h0": [1, 2, HIDDEN]}
    if not h0_input:
        return b.model([head(b, y)], input_shape=SEQUENCE)
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in given.items()]
    outputs = [helper.make_tensor_value_info(head(b, y), TensorProto.FLOAT, None)]
    graph = helper.make_graph(b.nodes, "h0_input", inputs, outputs, b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_zero_state_computed_at_run_time_is_dropped() -> None:
    pruned = assert_exact(torch_like, ["rnn"])
    lstm = next(n for n in pruned.graph.node if n.op_type == "LSTM")
    assert list(lstm.input[5:]) == ["", ""]  # absent: zero, whatever the size
    assert not {n.op_type for n in pruned.graph.node} & {"ConstantOfShape", "Shape", "Concat"}
    assert_rate_zero_is_identity(torch_like())


def test_a_state_given_at_run_time_keeps_the_units() -> None:
    _, _, forest = association_trees(torch_like(h0_input=True))
    group = next(g for g in forest.groups if g.roots[0].node == "rnn")
    assert group.reasons == [
        f"LSTM 'rnn': its initial state 'h0' is neither a constant [directions, batch, {HIDDEN}] nor known to be zero"
    ]


def test_hidden_units_reaching_a_graph_output_stay() -> None:
    b = Builder()
    y = recurrent(b, "GRU", "x", "rnn")
    model = b.model([y, head(b, y)], input_shape=SEQUENCE)
    _, _, forest = association_trees(model)
    group = next(g for g in forest.groups if g.roots[0].node == "rnn")
    assert not group.prunable and group.reasons == ["reaches graph output 'rnn'"]


def test_batch_first_layout_follows_the_same_axes() -> None:
    """``layout=1``: Y is [batch, seq, dirs, H], Y_h [batch, dirs, H] (ONNX Runtime does not run it: the
    trees are checked)."""
    b = Builder()
    y = recurrent(b, "LSTM", "x", "rnn")
    b.nodes[-1].attribute.append(helper.make_attribute("layout", 1))
    b.nodes[-1].output.append("y_h")
    seq = b.node("Squeeze", [y, b.const("dirs", np.array([2], np.int64))], "squeeze")
    last = b.node("Squeeze", ["y_h", b.const("dirs_h", np.array([1], np.int64))], "last")
    both = b.node("Add", [b.node("MatMul", [seq, b.random("w_seq", HIDDEN, 3)], "mm"), b.random("bias", 3)], "add")
    graph = helper.make_graph(
        [*b.nodes, helper.make_node("MatMul", [last, b.random("w_last", HIDDEN, 3)], ["out"], name="mm_last")],
        "batch_first",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, FEATURES])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in (both, "out")],
        b.initializers,
    )
    _, _, forest = association_trees(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    group = next(g for g in forest.groups if g.roots[0].node == "rnn")
    assert group.prunable and group.leaves == ["mm", "mm_last"]
    leaves = {(s.node, s.initializer, s.axis) for s in group.slices if s.role == "leaf"}
    assert leaves == {("mm", "w_seq", 0), ("mm_last", "w_last", 0)}


def test_the_command_prunes_an_lstm_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, output = tmp_path / "stack.onnx", tmp_path / "pruned.onnx"
    onnx.save(lstm_stack(), str(source))
    parser = argparse.ArgumentParser(prog="onnxsat")
    add_prune_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["prune", str(source), "-o", str(output), "--rate", "0.5", "--no-normalize"])
    assert args.handler(args) == 0
    text = capsys.readouterr().out
    assert "verification PASSED" in text and "2 of 3 channel groups pruned" in text
    weights = {t.name: list(t.dims) for t in onnx.load(str(output)).graph.initializer}
    assert weights["lstm2_r"] == [1, 16, 4] and weights["head_w"] == [4, 3]


def test_hrank_and_reconstruction_handle_recurrent_roots() -> None:
    """HRank ranks no maps for hidden units (scored by L1); reconstruction refits the MatMul head and says
    the LSTM leaf is not refitted (it is not linear in its input)."""
    model = lstm_stack(DEAD)
    pruned, _ = prune(model, rate=0.5, criterion="hrank")
    np.testing.assert_allclose(run(pruned)[0], run(model)[0], rtol=1e-5, atol=1e-5)
    _, report = prune(model, rate=0.5, reconstruct=True)
    assert [fit.node for fit in report.reconstruction] == ["head"]
    assert "reconstruction skipped lstm2: LSTM is not refitted" in report.notes


def last_state(dead: list[int] | None = None) -> onnx.ModelProto:
    """A keyword spotter's head: a bidirectional GRU's Y_h, both directions' last states concatenated
    (``torch.cat((h[-2], h[-1]), 1)``: Gather on the direction axis, Concat), into a Gemm."""
    b = Builder()
    recurrent(b, "GRU", "x", "rnn", directions=2, dead=dead)
    b.nodes[-1].output[:] = ["", "y_h"]
    picks = [b.node("Gather", ["y_h", b.const(f"d{d}", np.array(d, np.int64))], f"last{d}", axis=0) for d in (0, 1)]
    both = b.node("Concat", picks, "both", axis=1)
    return b.model([b.node("Gemm", [both, b.random("head_w", 3, 2 * HIDDEN)], "head", transB=1)], input_shape=SEQUENCE)


def test_the_last_states_of_both_directions_feed_a_gemm() -> None:
    pruned = assert_exact(last_state, ["rnn"])
    assert shape_of(pruned, "head_w") == [3, HIDDEN]  # half of each direction's columns
