"""ORT's fused ops split back into op + activation so an optimized model can be pruned; the split is exact."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.pruning.prune import PruneOptions, prune_model

from onnxsat.pruning.unfuse import split_fused
from onnxsat.zoo.synthetic import demo_cnn


def run(model: onnx.ModelProto, feed: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: feed})[0]


def test_an_optimized_model_prunes_after_its_fused_ops_are_split() -> None:
    optimized, _ = optimize_model(demo_cnn(), OptimizeOptions(target="ort"))
    fused = sum(node.op_type.startswith("Fused") for node in optimized.graph.node)
    assert fused >= 4  # Conv+BN+Relu, Conv+BN+Clip (ReLU6), depthwise, Gemm+Relu
    feed = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    unchanged, report = prune_model(optimized, PruneOptions(rate=0.0))
    assert f"{fused} of {fused} ORT fused ops split" in report.notes[0]
    np.testing.assert_allclose(run(unchanged, feed), run(optimized, feed), rtol=1e-5, atol=1e-6)
    pruned, report = prune_model(optimized, PruneOptions(rate=0.5))
    assert report.verification.ok and report.params["pruned"] < 0.5 * report.params["original"]
    assert not any(node.domain == "com.microsoft" for node in pruned.graph.node)


def test_fused_gemm_with_leaky_relu_and_fused_conv_with_clip_split_exactly() -> None:
    rng = np.random.default_rng(1)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
        "g": rng.standard_normal((5, 64)).astype(np.float32),
    }
    nodes = [
        helper.make_node(
            "FusedConv",
            ["x", "w", "b"],
            ["c"],
            domain="com.microsoft",
            pads=[1, 1, 1, 1],
            activation="Clip",
            activation_params=[0.0, 6.0],
        ),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node(
            "FusedGemm",
            ["f", "g"],
            ["y"],
            domain="com.microsoft",
            transB=1,
            activation="LeakyRelu",
            activation_alpha=0.2,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "fused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=imports, ir_version=9)
    split, count = split_fused(model)
    assert count == 2 and [n.op_type for n in split.graph.node] == ["Conv", "Clip", "Flatten", "Gemm", "LeakyRelu"]
    onnx.checker.check_model(split, full_check=True)
    feed = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(run(split, feed), run(model, feed), rtol=1e-6, atol=1e-6)
    assert split_fused(split) == (split, 0)
