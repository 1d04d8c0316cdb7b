"""Every PyTorch-exported model of ONNX's backend test suite goes through the e-graph and comes back.

(a) With no rules the round trip is lossless: the decoded model passes the checker, has the same
    nodes, inputs, outputs and opsets, and ONNX Runtime gives bit-identical outputs.
(b) With the ``ort`` rules and shape inference the result still matches the reference outputs.

Models ONNX Runtime cannot load (old opsets it has no kernels for) are skipped with its reason.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from eqsat_helpers import assert_bit_identical, op_types, roundtrip, session
from onnx import numpy_helper

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
MODEL_DIRS = sorted(
    path for suite in ("pytorch-converted", "pytorch-operator") for path in (DATA / suite).iterdir() if path.is_dir()
)
IDS = [path.name for path in MODEL_DIRS]


def _index(path: Path) -> int:
    return int(re.search(r"_(\d+)\.pb$", path.name).group(1))


@functools.cache
def load_case(model_dir: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    """The model, its feeds (matched to non-initializer graph inputs in order) and its expected outputs."""
    model = onnx.load(str(model_dir / "model.onnx"))
    data = model_dir / "test_data_set_0"
    inputs = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("input_*.pb"), key=_index)]
    outputs = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("output_*.pb"), key=_index)]
    initializers = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in initializers]
    assert len(names) == len(inputs), f"{model_dir.name}: {len(names)} graph inputs, {len(inputs)} input files"
    return model, dict(zip(names, inputs, strict=True)), outputs


@functools.cache
def ort_load_error(model_dir: Path) -> str | None:
    """First line of ONNX Runtime's reason for refusing the original model, or None if it loads."""
    try:
        session(load_case(model_dir)[0])
    except Exception as error:  # ORT raises several unrelated exception types
        text = str(error).strip()
        return text.splitlines()[0] if text else type(error).__name__
    return None


@functools.cache
def original_outputs(model_dir: Path) -> list[np.ndarray]:
    model, feeds, _ = load_case(model_dir)
    return session(model).run(None, feeds)


def runnable(model_dir: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    reason = ort_load_error(model_dir)
    if reason is not None:
        pytest.skip(f"ONNX Runtime cannot load the original: {reason}")
    return load_case(model_dir)


def assert_matches_expected(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5, equal_nan=True)


def assert_structurally_lossless(model: onnx.ModelProto, result: onnx.ModelProto) -> None:
    onnx.checker.check_model(result)
    assert op_types(result) == op_types(model)
    assert len(result.graph.node) == len(model.graph.node)
    assert [v.SerializeToString() for v in result.graph.input] == [v.SerializeToString() for v in model.graph.input]
    assert [v.SerializeToString() for v in result.graph.output] == [v.SerializeToString() for v in model.graph.output]
    assert [(o.domain, o.version) for o in result.opset_import] == [(o.domain, o.version) for o in model.opset_import]
    assert result.ir_version == model.ir_version
    # Nothing to fold or fuse: every weight comes back untouched.
    assert Counter(t.SerializeToString() for t in result.graph.initializer) == Counter(
        t.SerializeToString() for t in model.graph.initializer
    )


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=IDS)
def test_roundtrip_structure_for_every_model(model_dir: Path) -> None:
    """No ONNX Runtime needed: this part runs for the old-opset models too."""
    model = load_case(model_dir)[0]
    for target in (None, "ort"):
        result = roundtrip(model, target=target, infer=target is not None).model
        if target is None:
            assert_structurally_lossless(model, result)
        else:
            onnx.checker.check_model(result)
            assert [v.name for v in result.graph.output] == [v.name for v in model.graph.output]


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=IDS)
def test_roundtrip_without_rules_is_lossless(model_dir: Path) -> None:
    model, feeds, expected = runnable(model_dir)
    result = roundtrip(model, target=None, infer=False).model
    assert_structurally_lossless(model, result)

    actual = session(result).run(None, feeds)
    assert_bit_identical(original_outputs(model_dir), actual)
    assert_matches_expected(actual, expected)


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=IDS)
def test_roundtrip_with_ort_rules_matches_reference_outputs(model_dir: Path) -> None:
    model, feeds, expected = runnable(model_dir)
    trip = roundtrip(model, target="ort", infer=True)

    onnx.checker.check_model(trip.model)
    assert trip.stats is not None and trip.stats.stop_reason == "saturated"
    assert [v.name for v in trip.model.graph.output] == [v.name for v in model.graph.output]
    # A rule only ever replaces nodes by fewer nodes.
    assert len(trip.model.graph.node) <= len(model.graph.node)
    assert_matches_expected(session(trip.model).run(None, feeds), expected)


def test_backend_corpus_summary() -> None:
    """Most models run, and every skip is ONNX Runtime lacking a kernel, never a broken model file."""
    assert len(MODEL_DIRS) >= 100
    reasons = {d.name: ort_load_error(d) for d in MODEL_DIRS}
    skipped = {name: reason for name, reason in reasons.items() if reason is not None}
    ran = len(reasons) - len(skipped)
    print(f"\nbackend corpus: {len(reasons)} models, {ran} run under ONNX Runtime, {len(skipped)} skipped")
    assert ran >= 80
    not_kernel = {name: r for name, r in skipped.items() if "Could not find an implementation" not in r}
    assert not not_kernel, f"models skipped for another reason than a missing kernel: {not_kernel}"
