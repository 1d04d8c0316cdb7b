"""Models at every opset from 7 to the newest onnx defines round-trip with their opset kept.

Each model is converted with ``onnx.version_converter`` (through ``tools.fuzz.opsets.convert``) and
optimized for every target; the result must import the same opsets (``com.microsoft`` may be added
for target ``ort``) and compute what the converted model computes, bit for bit with no rewrites.
Where ONNX Runtime cannot load an opset, the error must name it. Which opsets ONNX Runtime refuses
is asked of ONNX Runtime, not written down here, so a newer runtime turns refusals into round trips.

The models: demo_cnn (its fusion patterns), and three PyTorch exports whose op moved an attribute
to an input between opsets: Pad (opset 11), Split (13), ReduceMean (18). ``python -m tools.fuzz opsets``
sweeps every bundled model.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import TARGETS
from onnxsat.errors import RuntimeUnsupportedError
from onnxsat.inputs import random_inputs
from onnxsat.verification import run_model
from onnxsat.zoo.synthetic import demo_cnn
from tools.fuzz import opsets
from tools.fuzz.opsets import (
    BACKEND_DATA,
    FIRST_OPSET,
    ConversionError,
    convert,
    default_opset,
    demo_cnn_opset7,
    newest_opset,
    ort_load_error,
    run_opset_sweep,
)

OPSETS = list(range(FIRST_OPSET, newest_opset() + 1))
BACKEND_MODELS = (
    "pytorch-operator/test_operator_pad",
    "pytorch-operator/test_operator_chunk",
    "pytorch-operator/test_operator_reduced_mean_keepdim",
)
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    # demo_cnn() itself is opset 17 and onnx cannot convert it below 15; this is the same network
    # declared at opset 7, so that every opset of the sweep has the fusion patterns.
    "demo_cnn": demo_cnn_opset7,
    **{name: functools.partial(onnx.load, str(BACKEND_DATA / name / "model.onnx")) for name in BACKEND_MODELS},
}


@functools.cache
def converted(name: str, opset: int) -> onnx.ModelProto:
    model = convert(MODELS[name](), opset)
    assert default_opset(model) == opset
    return model


def imports(model: onnx.ModelProto) -> dict[str, int]:
    return {o.domain or "ai.onnx": o.version for o in model.opset_import}


def names_the_opset(message: str, opset: int) -> bool:
    return re.search(rf"\bopset {opset}\b", message, re.IGNORECASE) is not None


def assert_outputs(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], exact: bool) -> None:
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual, strict=True):
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", list(MODELS))
def test_optimized_model_keeps_its_opset_and_outputs(name: str, opset: int, target: str) -> None:
    """Where ONNX Runtime loads the opset: opset kept, outputs match; where it does not: it is named."""
    model = converted(name, opset)
    if ort_load_error(model) is not None:
        with pytest.raises(RuntimeUnsupportedError) as raised:
            optimize_model(model, OptimizeOptions(target=target))
        assert names_the_opset(str(raised.value), opset), str(raised.value)
        return
    optimized, report = optimize_model(model, OptimizeOptions(target=target))

    kept = imports(optimized)
    if target == "ort":  # the only import a target may add: the domain of ONNX Runtime's fused ops
        assert kept.pop("com.microsoft", 1) == 1
    assert kept == imports(model)
    assert optimized.ir_version == model.ir_version
    onnx.checker.check_model(optimized)
    assert report.verification is not None and report.verification.ok
    feeds = random_inputs(model, seed=7)
    expected = run_model(model, feeds, "converted model")
    assert_outputs(expected, run_model(optimized, feeds, "optimized model"), exact=target == "none")


def test_demo_cnn_fusions_fire_at_every_opset_ort_runs() -> None:
    """The rules match whichever opset's Clip (bounds as attributes before 11) and BatchNormalization."""
    fused = {}
    for opset in OPSETS:
        model = converted("demo_cnn", opset)
        if ort_load_error(model) is None:
            fused[opset] = optimize_model(model, OptimizeOptions(target="ort"))[1].fusions
    assert FIRST_OPSET in fused and 17 in fused
    assert all(fusions == fused[17] for fusions in fused.values()), fused
    assert sum(fused[FIRST_OPSET].values()) == 5  # 4 Conv+BN(+Relu/Clip) and 1 Gemm+Relu


def test_demo_cnn_at_opset_7_is_demo_cnn() -> None:
    original, legacy = demo_cnn(), demo_cnn_opset7()
    assert imports(legacy) == {"ai.onnx": 7}
    assert [n.op_type for n in legacy.graph.node] == [n.op_type for n in original.graph.node]
    feeds = random_inputs(original)
    assert_outputs(run_model(original, feeds, "demo_cnn"), run_model(legacy, feeds, "opset 7 copy"), exact=True)


def test_convert_stamps_the_ir_version_an_added_initializer_needs() -> None:
    """Pad 10->11 turns the pads attribute into an initializer, which IR 3 allows only as a graph input."""
    source = MODELS["pytorch-operator/test_operator_pad"]()
    assert source.ir_version == 3
    model = converted("pytorch-operator/test_operator_pad", 11)
    assert model.ir_version >= 4
    pad = next(node for node in model.graph.node if node.op_type == "Pad")
    assert len(pad.input) >= 2 and not any(a.name == "pads" for a in pad.attribute)


def test_error_names_opset_6_that_ort_has_no_kernels_for() -> None:
    """Below the sweep: ONNX Runtime has no opset-6 kernel for AveragePool, and says only ``AveragePool(1)``."""
    model = onnx.load(str(BACKEND_DATA / "pytorch-converted" / "test_AvgPool2d" / "model.onnx"))
    assert default_opset(model) == 6 and ort_load_error(model) is not None
    with pytest.raises(RuntimeUnsupportedError) as raised:
        optimize_model(model, OptimizeOptions(target="none"))
    assert names_the_opset(str(raised.value), 6), str(raised.value)


def test_error_for_an_opset_newer_than_ort_supports_does_not_advise_a_newer_one() -> None:
    model = converted("demo_cnn", newest_opset())
    if ort_load_error(model) is None:
        pytest.skip(f"ONNX Runtime runs opset {newest_opset()}, the newest onnx defines")
    with pytest.raises(RuntimeUnsupportedError) as raised:
        optimize_model(model, OptimizeOptions(target="none"))
    message = str(raised.value)
    assert names_the_opset(message, newest_opset())
    assert "newer opset" not in message and "no kernel" not in message, message


def dilated_maxpool(opset: int) -> onnx.ModelProto:
    """MaxPool with dilations, which no opset before 10 can express: onnx cannot convert it to 9."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def test_convert_reports_onnx_reason_without_its_source_location() -> None:
    with pytest.raises(ConversionError, match=r"^RuntimeError: No Adapter To Version \$9 for MaxPool$"):
        convert(dilated_maxpool(10), 9)


def test_sweep_counts_statuses_and_tabulates_them_per_opset(capsys: pytest.CaptureFixture[str]) -> None:
    newest = newest_opset()
    result = run_opset_sweep([("pool", dilated_maxpool(10)), ("cnn", demo_cnn_opset7())], opsets=[9, 17, newest])

    assert result.conversions[("pool", 9)] == "RuntimeError: No Adapter To Version $9 for MaxPool"
    assert result.converted == 5 and list(result.not_convertible) == [("pool", 9)]
    assert result.conversion_categories() == {"RuntimeError: No Adapter To Version N for MaxPool": 1}
    refused = ort_load_error(converted("demo_cnn", newest)) is not None
    assert len(result.cases) == 5 * len(TARGETS)
    assert result.counts() == {
        opsets.OK: (3 + (not refused) * 2) * len(TARGETS),
        **({opsets.ORT_OPSET: 2 * len(TARGETS)} if refused else {}),
    }
    assert result.ok and not result.failures
    assert all(names_the_opset(reason, newest) for reason in result.ort_reasons())

    lines = result.to_table().splitlines()
    assert lines[0].startswith("| opset | converted | not convertible | none OK | portable OK | ort OK |")
    assert lines[2] == "| 9 | 1 | 1 | 1 | 1 | 1 | 0 | 0 | 0 |"  # cnn converts to 9; pool cannot
    assert lines[3] == "| 17 | 2 | 0 | 2 | 2 | 2 | 0 | 0 | 0 |"
    assert len(lines) == 5
    summary = result.summary_line()
    assert "2 models x opsets 9,17," in summary and "6 pairs, 5 converted, 1 not convertible" in summary
    assert "0 FAILED" in summary
    assert capsys.readouterr().err.splitlines()[0].startswith("[1/2] pool: ")


def test_sweep_calls_a_model_ort_loads_but_cannot_run_no_opset_limit() -> None:
    """onnx converts PReLU's per-channel slope [3] to opset 7 unchanged, where it broadcasts on the last axis."""
    model = onnx.load(str(BACKEND_DATA / "pytorch-converted" / "test_PReLU_1d_multiparam" / "model.onnx"))
    result = run_opset_sweep([("prelu", model)], opsets=[7], targets=["none"], progress=False)
    assert [case.status for case in result.cases] == [opsets.ORT_MODEL]
    assert "PRelu" in result.cases[0].detail and result.ok


def test_sweep_flags_a_changed_opset_and_an_unnamed_opset_as_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's verdicts go into RELIABILITY.md: a wrong result or a vague refusal must not read as OK."""
    model = converted("demo_cnn", 17)
    relabelled = onnx.ModelProto()
    relabelled.CopyFrom(model)
    relabelled.opset_import[0].version = 18
    report = optimize_model(model, OptimizeOptions(target="none"))[1]
    monkeypatch.setattr(opsets, "optimize_model", lambda *args, **kwargs: (relabelled, report))
    case = opsets.check_case("cnn", model, "none")
    assert case.status == opsets.FAILED and "opset imports" in case.detail

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeUnsupportedError("ONNX Runtime cannot run the input model: some kernel is missing")

    monkeypatch.setattr(opsets, "optimize_model", refuse)
    monkeypatch.setattr(opsets, "ort_load_error", lambda _model: "some kernel is missing")
    assert opsets.check_case("cnn", model, "ort").status == opsets.UNNAMED_OPSET
