"""Small graphs built with onnx.helper for the structured-pruning tests, and ways to run them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsat.inputs import fixed_dim
from onnxsat.pruning.prune import PruneOptions, prune_model
from onnxsat.pruning.report import PruneReport

INPUT_SHAPE = [2, 3, 8, 8]


class Builder:
    """Accumulates nodes and seeded random initializers; ``model()`` wraps them into a checked model."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def random(self, name: str, *shape: int, scale: float = 0.5) -> str:
        return self.const(name, (self.rng.normal(size=shape) * scale).astype(np.float32))

    def heads(
        self,
        name: str,
        features: int,
        heads: int,
        size: int,
        dead: Sequence[int] = (),
        per_head: int = 1,
        axis: int = 1,
    ) -> str:
        """A seeded random attention weight of ``heads`` heads of ``size`` along ``axis`` (1: a Q/K/V projection
        ``[features, heads * size]``; 0: an output projection ``[heads * size, features]``), the ``per_head``
        heads of each unit in ``dead`` zero (the query heads one key/value head stands for)."""
        shape = (features, heads * size) if axis == 1 else (heads * size, features)
        value = (self.rng.normal(size=shape) * 0.5).astype(np.float32)
        for unit in dead:
            np.moveaxis(value, axis, 0)[unit * per_head * size : (unit + 1) * per_head * size] = 0.0
        return self.const(name, value)

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        return name

    def conv(
        self,
        name: str,
        x: str,
        c_in: int,
        c_out: int,
        k: int = 3,
        group: int = 1,
        bias: bool = True,
        weight: np.ndarray | None = None,
    ) -> str:
        w = (
            self.const(f"{name}_w", weight)
            if weight is not None
            else self.random(f"{name}_w", c_out, c_in // group, k, k)
        )
        inputs = [x, w] + ([self.random(f"{name}_b", c_out, scale=0.1)] if bias else [])
        return self.node("Conv", inputs, name, pads=[k // 2] * 4, group=group)

    def model(
        self, outputs: Sequence[str], input_shape: Sequence[int | str] = INPUT_SHAPE, opset: int = 17
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "pruning_test",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
            self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        inferred = onnx.shape_inference.infer_shapes(model).graph.output
        for output, known in zip(model.graph.output, inferred, strict=True):
            output.CopyFrom(known)
        onnx.checker.check_model(model, full_check=True)
        return model


def feeds(seed: int = 0, shape: Sequence[int] = INPUT_SHAPE) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).normal(size=shape).astype(np.float32)}


def input_shape(model: onnx.ModelProto) -> list[int]:
    """The first input's declared shape, dynamic dims (a name, -1) as 1."""
    return [1 if fixed_dim(d) is None else d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def run(model: onnx.ModelProto, inputs: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Run in ORT without graph optimizations, on ``inputs`` or seeded inputs of the model's input shape."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs or feeds(shape=input_shape(model)))


def shape_of(model: onnx.ModelProto, name: str) -> list[int]:
    """The dims of the initializer ``name``, or of the one a node reads in its place (a pruned copy)."""
    tensors = {t.name: list(t.dims) for t in model.graph.initializer}
    if name in tensors:
        return tensors[name]
    copies = [n for n in tensors if n.startswith(f"{name}__pruned_")]
    assert len(copies) == 1, f"{name} not found"
    return tensors[copies[0]]


def prune(model: onnx.ModelProto, **options: object) -> tuple[onnx.ModelProto, PruneReport]:
    """Prune, and check the result is valid and runs (the report's verification). The model is pruned as
    built (``normalize`` off) unless asked: these tests hold the walk to the exact structures they build."""
    options.setdefault("normalize", False)
    pruned, report = prune_model(model, PruneOptions(**options))  # type: ignore[arg-type]
    assert report.verification is not None and report.verification.ok, report.verification
    onnx.checker.check_model(pruned, full_check=True)
    run(pruned)
    return pruned, report


def assert_rate_zero_is_identity(model: onnx.ModelProto) -> None:
    """Rate 0 removes nothing: every output is bitwise what the original computes."""
    pruned, report = prune(model, rate=0.0)
    assert all(g.kept == g.channels for g in report.groups)
    for before, after in zip(run(model), run(pruned), strict=True):
        np.testing.assert_array_equal(before, after)


def status(report: PruneReport, root: str) -> str:
    return next(g.status for g in report.groups if root in g.roots)


def kept(report: PruneReport, root: str) -> int:
    return next(g.kept for g in report.groups if root in g.roots)
