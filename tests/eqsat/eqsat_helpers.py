"""Shared helpers for the e-graph round-trip and fusion tests (imported as a plain module).

Everything here drives the pipeline exactly as ``optimize_model`` does (encode -> saturate ->
freeze -> extract -> decode), so a test can look at the decoded model and the fusion labels directly.
A module rather than ``conftest.py`` because ``tests/conftest.py`` already owns that module name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from onnxsat.eqsat.costs import UniformCost
from onnxsat.eqsat.decode import DecodedModel, decode
from onnxsat.eqsat.encode import encode
from onnxsat.eqsat.extract import extract
from onnxsat.eqsat.frozen import freeze
from onnxsat.eqsat.rules import rulesets_for
from onnxsat.eqsat.saturate import SaturationLimits, SaturationStats, saturate

IR_VERSION = 9
MS_DOMAIN = "com.microsoft"


@dataclass
class RoundTrip:
    decoded: DecodedModel
    stats: SaturationStats | None

    @property
    def model(self) -> onnx.ModelProto:
        return self.decoded.model

    @property
    def fusions(self) -> Counter[str]:
        return self.decoded.fusions


def roundtrip(model: onnx.ModelProto, target: str | None = None, infer: bool = True) -> RoundTrip:
    """Run the pipeline on ``model``; ``target=None`` runs no rules at all (pure encode/decode)."""
    original = model.SerializeToString()
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=False) if infer else None
    encoded = encode(model, typed)
    stats = saturate(encoded.egraph, rulesets_for(target), SaturationLimits()) if target is not None else None
    snapshot = freeze(encoded.egraph)
    choice = extract(snapshot, UniformCost(), encoded).choice
    decoded = decode(encoded, snapshot, choice)
    assert model.SerializeToString() == original, "the pipeline must not modify its input model"
    return RoundTrip(decoded, stats)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return session(model).run(None, dict(feeds))


def op_types(model: onnx.ModelProto) -> Counter[str]:
    """Multiset of ``domain::op_type`` (plain op type for the default domain) in the main graph."""
    return Counter(
        f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        for node in model.graph.node
    )


def assert_same_outputs(
    expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        want, got = np.asarray(want), np.asarray(got)
        assert want.shape == got.shape
        assert want.dtype == got.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def assert_bit_identical(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> None:
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        want, got = np.asarray(want), np.asarray(got)
        assert want.shape == got.shape
        assert want.dtype == got.dtype
        np.testing.assert_array_equal(got, want)  # NaN compares equal to NaN here


def random_feeds(model: onnx.ModelProto, seed: int = 0, default_dim: int = 2) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input that is not an initializer (symbolic dims -> default_dim)."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else default_dim for d in tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.integers(0, 3, size=shape).astype(dtype)
    return feeds


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    extra_opsets: Mapping[str, int] | None = None,
    ir_version: int = IR_VERSION,
    name: str = "g",
    **kwargs: object,
) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(domain, version) for domain, version in (extra_opsets or {}).items()]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version, **kwargs)


def check_and_compare(
    original: onnx.ModelProto,
    result: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> list[np.ndarray]:
    """The result passes the checker and computes what the original computes (ORT, no graph opts)."""
    onnx.checker.check_model(result)
    feeds = random_feeds(original) if feeds is None else feeds
    expected = run(original, feeds)
    actual = run(result, feeds)
    assert_same_outputs(expected, actual, rtol=rtol, atol=atol)
    return actual


def with_inferred_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its graph outputs' types filled in by shape inference (value_info left empty)."""
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(typed.graph.output)
    return model
