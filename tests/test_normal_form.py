"""The normal form models are loaded into: Constant-node weights as initializers, declared 0 dims dynamic.
Lossless, names kept, and what sparsify and profile see."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.cli import main
from onnxsat.normal_form import normal_form


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def constant_weight_model(ir_version: int = 8, opset: int = 13) -> onnx.ModelProto:
    """Paddle-style: the Conv weight, a bias and a scale list in Constant nodes (value, value_floats, value_int)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "ignored")
    nodes = [
        helper.make_node("Constant", [], ["conv.w"], value=weight),
        helper.make_node("Constant", [], ["bias"], value_floats=[0.5, -0.5, 1.0, 0.0]),
        helper.make_node("Constant", [], ["axes"], value_ints=[0, 2, 3]),
        helper.make_node("Conv", ["x", "conv.w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Unsqueeze", ["bias", "axes"], ["b"]),
        helper.make_node("Add", ["c", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "paddle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def test_constant_tensors_become_initializers_of_the_same_names() -> None:
    model = constant_weight_model()
    lifted, notes = normal_form(model)
    assert [node.op_type for node in lifted.graph.node] == ["Conv", "Unsqueeze", "Add"]
    assert [t.name for t in lifted.graph.initializer] == ["conv.w", "bias", "axes"]
    assert notes == ["3 Constant node tensors read as initializers of the same names"]
    assert len(model.graph.node) == 6  # the input is not modified, unless asked
    onnx.checker.check_model(lifted, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(_run(lifted, {"x": x})[0], _run(model, {"x": x})[0])
    same, _ = normal_form(model, in_place=True)
    assert same is model and [t.name for t in model.graph.initializer] == ["conv.w", "bias", "axes"]


def test_ir3_models_list_lifted_weights_as_inputs_too() -> None:
    model = constant_weight_model(ir_version=3, opset=8)
    del model.graph.node[2]  # Unsqueeze takes axes as an attribute before opset 13
    model.graph.node[3].CopyFrom(helper.make_node("Unsqueeze", ["bias"], ["b"], axes=[0, 2, 3]))
    lifted, _ = normal_form(model)
    onnx.checker.check_model(lifted)
    assert [v.name for v in lifted.graph.input] == ["x", "conv.w", "bias"]


def test_what_cannot_be_an_initializer_stays_a_node() -> None:
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], np.float32), "v"), numpy_helper.from_array(np.array([1], np.int64)), [3]
    )
    nodes = [
        helper.make_node("Constant", [], ["out"], value_float=2.0),
        helper.make_node("Constant", [], ["s"], sparse_value=sparse),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("out", 1, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lifted, notes = normal_form(model)
    assert lifted is model and notes == []


def test_declared_zero_dims_become_dynamic_and_names_stay() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, "time", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, "time", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    dynamic, notes = normal_form(model)
    for value in (*dynamic.graph.input, *dynamic.graph.output):
        dims = value.type.tensor_type.shape.dim
        assert [(d.HasField("dim_value"), d.dim_param, d.dim_value) for d in dims] == [
            (False, "", 0),
            (False, "time", 0),
            (True, "", 3),
        ]
    assert notes == ["dims declared 0 read as dynamic on x, y"]
    assert _run(dynamic, {"x": np.ones((2, 5, 3), np.float32)})[0].shape == (2, 5, 3)


def test_sparsify_finds_weights_held_in_constant_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, out = tmp_path / "paddle.onnx", tmp_path / "sparse.onnx"
    onnx.save(constant_weight_model(), str(source))
    assert main(["sparsify", str(source), "-o", str(out), "--sparsity", "0.5"]) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "conv.w" in text and "normal form: 3 Constant node tensors read as initializers" in text
    weight = next(t for t in onnx.load(str(out)).graph.initializer if t.name == "conv.w")
    assert np.mean(numpy_helper.to_array(weight) == 0) == pytest.approx(0.5, abs=0.02)
    assert main(["profile", str(source)]) == 0
    profile = capsys.readouterr().out
    assert "Constant" not in profile and " 115 " in profile  # 108 weights, 4 biases, 3 axes: every initializer


def test_identity_of_a_weight_is_read_through_unless_its_name_is_needed() -> None:
    """PyTorch's exporter writes Identity(w) for a weight equal to another; readers then read the weight."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Identity", ["w"], ["w_copy"]),
        helper.make_node("Identity", ["w_copy"], ["w_copy2"]),
        helper.make_node("Identity", ["w"], ["w_out"]),
        helper.make_node("Conv", ["x", "w"], ["a"]),
        helper.make_node("Conv", ["x", "w_copy2"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4]),
            helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [4, 3, 1, 1]),
        ],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    read, notes = normal_form(model)
    assert [(n.op_type, list(n.input)) for n in read.graph.node] == [
        ("Identity", ["w"]),  # w_out is a graph output: its name must stay
        ("Conv", ["x", "w"]),
        ("Conv", ["x", "w"]),
        ("Add", ["a", "b"]),
    ]
    assert notes == ["2 Identity nodes of weights read through (their readers read the weight)"]
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    for want, got in zip(_run(model, {"x": x}), _run(read, {"x": x}), strict=True):
        np.testing.assert_array_equal(want, got)


def initializer_input_model() -> onnx.ModelProto:
    """tf2onnx at opset 7 (IR 4): every weight also a graph input, so a default the caller may override."""
    rng = np.random.default_rng(2)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "tf2onnx_opset7",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=4)


def test_initializers_listed_as_inputs_become_constants_unless_fed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ONNX Runtime neither folds nor prepacks an input, so the commands read such weights as constants and
    say so; one the user feeds stays an input. IR 3 lists every initializer as an input by rule: untouched."""
    from onnxsat.normal_form import initializer_inputs, initializers_as_constants

    model = initializer_input_model()
    assert initializer_inputs(model) == ["w", "b"] and initializer_inputs(model, ["b"]) == ["w"]
    fed = onnx.ModelProto()
    fed.CopyFrom(model)
    assert initializers_as_constants(fed, ["b"]) == [
        "1 initializers also listed as graph inputs read as constants (ONNX Runtime neither folds nor prepacks an "
        "input; give one in --inputs to keep it an input)"
    ]
    assert [v.name for v in fed.graph.input] == ["x", "b"]
    ir3 = onnx.ModelProto()
    ir3.CopyFrom(model)
    ir3.ir_version = 3
    assert initializer_inputs(ir3) == [] and initializers_as_constants(ir3) == []

    source, out = tmp_path / "old.onnx", tmp_path / "opt.onnx"
    onnx.save(model, str(source))
    assert main(["optimize", str(source), "-o", str(out)]) == 0, capsys.readouterr().err
    assert "normal form: 2 initializers also listed as graph inputs read as constants" in capsys.readouterr().out
    optimized = onnx.load(str(out))
    assert [v.name for v in optimized.graph.input] == ["x"]
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(optimized, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_the_working_form_restates_what_it_read_as_constants_and_leaves_its_input() -> None:
    """The commands time a result against the file as given too: ``with_restated_inputs`` undoes the step."""
    from onnxsat.normal_form import with_restated_inputs, working_form

    model = initializer_input_model()
    before = model.SerializeToString()
    working, notes, restated = working_form(model, ["b"])
    assert model.SerializeToString() == before and working is not model
    assert restated == ("w",) and notes[-1].startswith("1 initializers also listed as graph inputs")
    assert [v.name for v in working.graph.input] == ["x", "b"]
    again = with_restated_inputs(working, restated)
    assert [v.name for v in again.graph.input] == ["x", "b", "w"]
    w = next(v for v in again.graph.input if v.name == "w").type.tensor_type
    tensor = next(t for t in model.graph.initializer if t.name == "w")
    assert (w.elem_type, [d.dim_value for d in w.shape.dim]) == (tensor.data_type, list(tensor.dims))
    plain, none, nothing = working_form(working, ["b"])
    assert plain is working and none == [] and nothing == ()


def local_function_model() -> onnx.ModelProto:
    """PyTorch's ``export_modules_as_functions`` form: each block a call of a model-local function whose Conv
    reads its stride from an attribute of the call, one call inside an If branch."""
    rng = np.random.default_rng(0)
    conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    conv.attribute.add(name="strides", ref_attr_name="stride", type=onnx.AttributeProto.INTS)
    block = helper.make_function(
        "torch.nn.modules.container",
        "Sequential",
        ["x", "w"],
        ["y"],
        [conv, helper.make_node("Relu", ["c"], ["y"])],
        [helper.make_opsetid("", 17)],
        attributes=["stride"],
    )
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    call = helper.make_node("Sequential", ["a", "w2"], ["b"], domain="torch.nn.modules.container", stride=[1, 1])
    typed = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 4, 4])
    branch = helper.make_graph([call], "then", [], [typed])
    other = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["b_else"])],
        "else",
        [],
        [helper.make_tensor_value_info("b_else", TensorProto.FLOAT, [1, 4, 4, 4])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Sequential", ["x", "w1"], ["a"], domain="torch.nn.modules.container", stride=[2, 2]),
            helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=other),
        ],
        "functions",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [w1, w2],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("torch.nn.modules.container", 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=[block], ir_version=8)


def test_calls_of_model_local_functions_are_inlined() -> None:
    """A pass looking for a Conv finds none inside an opaque call: the calls are inlined (their attribute
    references resolved), as ONNX Runtime does on load, and the model computes the same."""
    model = local_function_model()
    inlined, notes = normal_form(model)
    assert notes == ["2 calls of model-local functions inlined"]
    assert not inlined.functions and [o.domain for o in inlined.opset_import] == [""]
    assert [node.op_type for node in inlined.graph.node] == ["Conv", "Relu", "If"]
    assert [a.ints for a in inlined.graph.node[0].attribute if a.name == "strides"] == [[2, 2]]
    assert [t.name for t in inlined.graph.initializer] == ["w1", "w2"]
    onnx.checker.check_model(inlined, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        np.testing.assert_array_equal(_run(inlined, feeds)[0], _run(model, feeds)[0])
    assert len(model.functions) == 1 and model.graph.node[0].op_type == "Sequential"  # the input untouched
    same, _ = normal_form(model, in_place=True)
    assert same is model and not model.functions and model.graph.node[0].op_type == "Conv"


def test_prune_finds_the_convolutions_inside_local_functions(tmp_path: Path) -> None:
    model = local_function_model()
    del model.graph.node[1]  # the If: prune reads the Conv chain straight to the output
    model.graph.node.append(
        helper.make_node("Sequential", ["a", "w2"], ["y"], domain="torch.nn.modules.container", stride=[1, 1])
    )
    del model.graph.input[1]
    source = tmp_path / "functions.onnx"
    onnx.save(model, source)
    assert main(["prune", str(source), "-o", str(tmp_path / "p.onnx"), "--rate", "0.5"]) == 0
    pruned = onnx.load(tmp_path / "p.onnx")
    assert [t.dims[0] for t in pruned.graph.initializer if t.name == "w1"] == [2]
