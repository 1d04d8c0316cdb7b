"""Node order that counts the outer tensors control-flow bodies read."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsat.node_order import sort_graph, topological_order


def body_reading(name: str) -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Identity", [name], ["out"])],
        "body",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )


def if_before_its_capture() -> onnx.GraphProto:
    """The If lists only ``flag`` as input, but its branches read ``h``, which a later node makes."""
    return helper.make_graph(
        [
            helper.make_node("If", ["flag"], ["y"], then_branch=body_reading("h"), else_branch=body_reading("x")),
            helper.make_node("Relu", ["x"], ["h"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )


def test_a_body_read_counts_as_an_input() -> None:
    graph = if_before_its_capture()
    assert topological_order(list(graph.node)) == [1, 0]
    assert sort_graph(graph)
    assert [n.op_type for n in graph.node] == ["Relu", "If"]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)


def test_a_valid_order_is_kept_and_keys_break_ties() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])]
    assert topological_order(nodes) == [0, 1]
    assert topological_order(nodes, [(1,), (0,)]) == [1, 0]


def test_a_cycle_leaves_the_graph_as_it_was() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])],
        "g",
        [],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
    )
    assert not sort_graph(graph)
    assert [n.op_type for n in graph.node] == ["Relu", "Neg"]


def test_a_model_whose_converter_appended_nodes_last_is_sorted_when_loaded(tmp_path) -> None:
    """A float16 converter with ``keep_io_types`` appends its input Cast last: ONNX Runtime runs that
    model, the checker refuses it. ONNXSat sorts it at the door (and says so), then works as usual."""
    import numpy as np
    import onnxruntime as ort

    from onnxsat.cli import main

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x16"], ["r"], name="relu"),
            helper.make_node("Cast", ["r"], ["y"], name="out_cast", to=TensorProto.FLOAT),
            helper.make_node("Cast", ["x"], ["x16"], name="in_cast", to=TensorProto.FLOAT16),
        ],
        "appended",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp_path / "appended.onnx"
    onnx.save(model, path)
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((2, 3), np.float32)})
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    assert main(["optimize", str(path), "-o", str(out), "--report", str(report)]) == 0
    onnx.checker.check_model(onnx.load(out))
    assert "nodes put in topological order (1 graph(s) had them out of order)" in report.read_text()


def test_a_model_stamped_with_a_newer_ir_version_than_the_runtime_reads_is_brought_down(tmp_path) -> None:
    """``onnx.helper.make_model`` stamps its own newest IR version (14 in onnx 1.23) whatever the opsets;
    ONNX Runtime refuses any IR above its own. Opset 17 needs IR 8, so the model means the same at the
    runtime's IR, and the result loads."""
    import onnxruntime as ort

    from onnxsat.cli import main
    from onnxsat.ir_version import lower_ir_version, runtime_ir_version

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "newest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=runtime_ir_version() + 1)
    path, out = tmp_path / "newest.onnx", tmp_path / "out.onnx"
    onnx.save(model, path)
    assert main(["optimize", str(path), "-o", str(out)]) == 0
    assert onnx.load(out).ir_version == runtime_ir_version()
    # the commands that time the files as given read them lowered too (they ended in an internal error)
    assert main(["optimize", str(path), "-o", str(tmp_path / "timed.onnx"), "--latency"]) == 0
    assert main(["tune", str(path), "--rounds", "2"]) == 0
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    newest_opset = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)], ir_version=99)
    assert lower_ir_version(newest_opset) is None and newest_opset.ir_version == 99  # needs what ORT lacks


def test_an_opset_that_needs_a_newer_ir_is_named_with_the_opset_to_export_at(tmp_path, capfd) -> None:
    """ORT said only "Unsupported model IR version: 14, max supported IR version: 13", a number no exporter
    takes; the user's lever is the opset."""
    from onnxsat.cli import main
    from onnxsat.ir_version import runtime_ir_version, runtime_opset

    needing = [opset for _, ir, opset, *_ in helper.VERSION_TABLE if ir > runtime_ir_version()]
    if not needing:
        pytest.skip("onnx knows no opset past what this ONNX Runtime reads")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "too_new",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    opset = min(needing)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
    path = tmp_path / "too_new.onnx"
    onnx.save(model, path)
    assert main(["optimize", str(path), "-o", str(tmp_path / "out.onnx")]) == 6
    err = capfd.readouterr().err
    assert f"the model uses ai.onnx opset {opset}, which needs IR version {model.ir_version}" in err
    assert f"export at opset {runtime_opset()} or convert" in err and err.count("\n") == 1
    assert runtime_opset() < opset


def test_show_trees_and_profile_read_the_model_as_the_commands_run_it(tmp_path, capsys) -> None:
    """Trees drawn from nodes out of order lost the Relu and the Conv that reads it (a group that looked
    prunable with no leaf), and profile could not run an IR the runtime does not read: both now load
    the model as every pass does (``model_io.load_runnable``)."""
    import numpy as np
    from onnx import numpy_helper

    from onnxsat.cli import main
    from onnxsat.ir_version import runtime_ir_version
    from onnxsat.pruning.prune import show_trees

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
            helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
        ],
        "unsorted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=runtime_ir_version() + 1)
    path = tmp_path / "unsorted.onnx"
    onnx.save(model, path)
    trees = show_trees(path, normalize=False)
    assert "conv1 (Conv, root)\n    relu (Relu, pass)\n      conv2 (Conv, leaf)" in trees
    assert main(["profile", str(path)]) == 0
    assert "op types: Conv 2, Relu 1" in capsys.readouterr().out


def test_ops_onnx_runtime_defines_in_the_onnx_domain_pass_the_checker(tmp_path) -> None:
    """onnxruntime-genai's builder writes every RMS norm as ``SimplifiedLayerNormalization`` in the ONNX domain:
    ORT runs it, ONNX's checker does not know it, and every command but profile refused the model (exit 5)."""
    import numpy as np
    from onnx import numpy_helper

    from onnxsat.cli import main
    from onnxsat.model_io import check_model, runtime_onnx_ops

    assert "SimplifiedLayerNormalization" in runtime_onnx_ops()
    graph = helper.make_graph(
        [
            helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["n"], axis=-1, epsilon=1e-5),
            helper.make_node("MatMul", ["n", "w"], ["y"]),
        ],
        "rms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [
            numpy_helper.from_array(np.ones(16, np.float32), "scale"),
            numpy_helper.from_array(np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32), "w"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    check_model(model)
    assert [n.domain for n in model.graph.node] == ["", ""]  # the caller's model is left as it is
    path = tmp_path / "rms.onnx"
    onnx.save(model, path)
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx")]) == 0
