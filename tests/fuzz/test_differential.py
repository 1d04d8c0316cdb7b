"""Differential fuzzing: a fixed sample of generated graphs through every target, and proof the harness bites.

The sample (seeds 0..99) is what ``make test`` fuzzes; ``python -m tools.fuzz graphs`` runs thousands more.
The second half breaks the optimizer on purpose in each way the checker claims to detect (wrong
folded weight, a verifier that lies, a last-bit change, nondeterminism, a crash, a foreign op, a
mutated input) and asserts each one is reported as a failure of the right kind.
"""

from __future__ import annotations

import importlib
import itertools
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.eqsat import weights
from onnxsat.eqsat.decode import DecodedModel, DecodeError
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
from onnxsat.eqsat.rules import TARGETS, RuleSchedule, activation_fusion, bn_folding
from onnxsat.verification import VerificationResult, run_model
from tools.fuzz.differential import FAILED, INVALID, PASSED, Outcome, check_model, feeds
from tools.fuzz.graph_campaign import run_graph_campaign
from tools.fuzz.graphs import generate_model, pattern_census

optimize_module = importlib.import_module("onnxsat.eqsat.optimizer")  # the package re-exports a function of that name

SAMPLE = range(100)

# One xdist worker runs this whole file, so the sample (about 160 s of checks) is built once.
pytestmark = pytest.mark.xdist_group("differential_sample")


@pytest.fixture(scope="module")
def outcomes() -> dict[int, Outcome]:
    """Every sample graph checked once (all targets, determinism included); the tests below read it."""
    return {seed: check_model(generate_model(seed)) for seed in SAMPLE}


@pytest.mark.parametrize("seed", SAMPLE)
def test_generated_graph_survives_every_target(outcomes: dict[int, Outcome], seed: int) -> None:
    assert outcomes[seed].status != FAILED, outcomes[seed].describe()


def test_invalid_graphs_stay_rare(outcomes: dict[int, Outcome]) -> None:
    invalid = {seed: o.detail for seed, o in outcomes.items() if o.status == INVALID}
    assert len(invalid) <= len(SAMPLE) // 50, invalid


# ---- the harness catches a broken optimizer ---------------------------------------------------


def conv_bn_relu(opset: int = 17) -> onnx.ModelProto:
    """x -> Conv -> BatchNormalization -> Relu: every rule applies (fold, then fuse for ``ort``)."""
    rng = np.random.default_rng(0)
    arrays = {
        "w": rng.standard_normal((4, 3, 3, 3)) * 0.3,
        "gamma": 1 + 0.3 * rng.standard_normal(4),
        "beta": 0.2 * rng.standard_normal(4),
        "mean": 0.2 * rng.standard_normal(4),
        "var": 0.5 + rng.random(4),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_bn_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
        [numpy_helper.from_array(a.astype(np.float32), name) for name, a in arrays.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def wrap_decode(monkeypatch: pytest.MonkeyPatch, change: object) -> None:
    """Make the pipeline's decoder hand its result (and the encoded input) to ``change`` before returning."""
    real = optimize_module.decode

    def broken(encoded, snapshot, choice) -> DecodedModel:  # type: ignore[no-untyped-def]
        decoded = real(encoded, snapshot, choice)
        change(decoded.model, encoded.model)  # type: ignore[operator]
        return decoded

    monkeypatch.setattr(optimize_module, "decode", broken)


def test_the_clean_model_passes() -> None:
    assert check_model(conv_bn_relu()).status == PASSED


def test_a_wrong_folded_weight_is_caught_on_the_fuzzed_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sample graphs in which a Conv+BatchNormalization really folds expose a 5% weight error.

    Nearly all: downstream ops may wash it out (a Clip whose lower bound exceeds every value).
    """
    portable = OptimizeOptions(target="portable")
    folded = [
        seed
        for seed in SAMPLE
        if "Conv+BatchNormalization" in pattern_census(model := generate_model(seed))
        and "Conv+BatchNormalization -> Conv" in optimize_model(model, portable)[1].fusions
    ]
    assert len(folded) >= 5
    real = weights.KERNELS["scale_conv_weight"]
    monkeypatch.setitem(weights.KERNELS, "scale_conv_weight", lambda args, attrs: real(args, attrs) * 1.05)
    caught = []
    for seed in folded:
        outcome = check_model(generate_model(seed), ["portable"], determinism=False)
        if outcome.status != PASSED:
            assert (outcome.status, outcome.kind) == (FAILED, "mismatch"), (seed, outcome.describe())
            caught.append(seed)
    assert len(caught) >= 0.75 * len(folded), (caught, folded)


def test_a_lying_verifier_does_not_hide_a_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness runs both models itself: the product's own verdict is not the only judge."""
    monkeypatch.setitem(weights.KERNELS, "bn_fold_bias", lambda args, attrs: np.zeros_like(args[1]))
    monkeypatch.setattr(optimize_module, "verify", lambda *args, **kwargs: VerificationResult(True))
    outcome = check_model(conv_bn_relu(), ["portable"])
    assert (outcome.status, outcome.kind) == (FAILED, "mismatch")
    assert outcome.detail.startswith("seed 0")


@pytest.mark.filterwarnings("ignore:overflow encountered in divide:RuntimeWarning")  # verify's relative diff at 0
def test_a_result_right_only_on_the_verified_seed_is_caught_by_the_second_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 'result' that replays the original's seed-0 outputs as constants fools the built-in verification."""

    def replay_seed0(result: onnx.ModelProto, original: onnx.ModelProto) -> None:
        outputs = run_model(original, feeds(original, 0), "original")
        del result.graph.node[:], result.graph.initializer[:]  # the inputs stay: the caller feeds them
        for value, array in zip(result.graph.output, outputs, strict=True):
            result.graph.node.append(
                helper.make_node("Constant", [], [value.name], value=numpy_helper.from_array(array))
            )

    wrap_decode(monkeypatch, replay_seed0)
    model = conv_bn_relu()
    outcome = check_model(model, ["portable"])
    assert (outcome.status, outcome.kind) == (FAILED, "mismatch")
    assert outcome.detail.startswith("seed 1")


def test_a_last_bit_change_is_caught_for_target_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within the verifier's tolerance, yet a rule-free round trip must reproduce the outputs exactly."""

    def nudge_first_weight(result: onnx.ModelProto, original: onnx.ModelProto) -> None:
        tensor = result.graph.initializer[0]
        array = numpy_helper.to_array(tensor)
        tensor.CopyFrom(numpy_helper.from_array(np.nextafter(array, np.float32(np.inf)), tensor.name))

    wrap_decode(monkeypatch, nudge_first_weight)
    outcome = check_model(conv_bn_relu(), ["none"])
    assert (outcome.status, outcome.target, outcome.kind) == (FAILED, "none", "not bit-identical")


def test_nondeterministic_output_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count()

    def stamp(result: onnx.ModelProto, original: onnx.ModelProto) -> None:
        result.doc_string = f"run {next(counter)}"

    wrap_decode(monkeypatch, stamp)
    outcome = check_model(conv_bn_relu(), ["ort"])
    assert (outcome.status, outcome.kind) == (FAILED, "nondeterministic")
    assert check_model(conv_bn_relu(), ["ort"], determinism=False).status == PASSED


def test_a_crash_is_a_failure_not_an_invalid_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(result: onnx.ModelProto, original: onnx.ModelProto) -> None:
        raise DecodeError("the extracted graph has a cycle")

    wrap_decode(monkeypatch, crash)
    outcome = check_model(conv_bn_relu())
    assert (outcome.status, outcome.target, outcome.kind) == (FAILED, "none", "exception DecodeError")


def test_a_mutated_input_model_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def scribble(result: onnx.ModelProto, original: onnx.ModelProto) -> None:
        original.doc_string += "touched"

    wrap_decode(monkeypatch, scribble)
    assert check_model(conv_bn_relu(), ["none"]).kind == "input modified"


def test_portable_must_not_add_microsoft_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TARGETS, "portable", RuleSchedule(simplify=(bn_folding, activation_fusion)))
    outcome = check_model(conv_bn_relu(), ["portable"])
    assert (outcome.status, outcome.kind) == (FAILED, "non-standard op")
    assert "com.microsoft::FusedConv" in outcome.detail


def test_a_model_the_tools_refuse_is_invalid_not_failed() -> None:
    unrunnable = conv_bn_relu()
    unrunnable.opset_import[0].version = 99  # no such opset: the checker refuses it
    outcome = check_model(unrunnable)
    assert (outcome.status, outcome.kind) == (INVALID, "original rejected")
    no_kernel = conv_bn_relu()  # valid ONNX, but ONNX Runtime's CPU Conv has no float64 kernel
    for tensor in no_kernel.graph.initializer:
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float64), tensor.name))
    for value in [*no_kernel.graph.input, *no_kernel.graph.output]:
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    outcome = check_model(no_kernel)
    assert outcome.status == INVALID and "ONNX Runtime" in outcome.detail


# ---- campaigns ----------------------------------------------------------------------------------


def test_a_campaign_counts_every_graph(tmp_path: Path) -> None:
    result = run_graph_campaign(4, seed=0, failures_dir=tmp_path, progress=False)
    assert (result.generated, result.ran, result.passed, result.invalid, result.failed) == (4, 4, 4, 0, 0)
    assert not result.failures and not list(tmp_path.iterdir())
    assert len(result.op_types) >= 20
    assert re.fullmatch(
        r"graphs fuzzed: 4 generated, 4 ran, 4 passed, 0 rejected as invalid, 0 failed \(\d+ op types, \d+ s\)",
        result.summary_line(),
    )


def test_a_campaign_shrinks_and_keeps_each_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seeds 2..4 under a broken Conv weight fold: seeds 3 and 4 fold a Conv, so those two fail."""
    real = weights.KERNELS["scale_conv_weight"]
    monkeypatch.setitem(weights.KERNELS, "scale_conv_weight", lambda args, attrs: real(args, attrs) * 1.05)
    result = run_graph_campaign(3, seed=2, failures_dir=tmp_path, progress=True)
    assert (result.ran, result.passed, result.failed) == (3, 1, 2)
    assert [(f.seed, f.target, f.kind) for f in result.failures] == [
        (3, "portable", "mismatch"),
        (4, "portable", "mismatch"),
    ]
    assert result.failure_groups() == {("portable", "mismatch"): result.failures}
    for failure in result.failures:
        assert failure.path is not None and failure.path.parent == tmp_path
        shrunk = onnx.load(str(failure.path))
        assert [n.op_type for n in shrunk.graph.node if n.op_type != "Constant"] == ["Conv", "BatchNormalization"]
        assert failure.shrunk_nodes < failure.nodes
    assert "3/3 graphs" in capsys.readouterr().err
