"""The pass core: one registry of passes, one runner, options as the single source of keywords, pipeline
keys and command-line flags."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest

import onnxsat
from onnxsat.commands import command_modules
from onnxsat.core import PASSES, Model, Pass, PassContext, PassResult, lossless
from onnxsat.eqsat.optimizer import OptimizeOptions
from onnxsat.errors import SettingsError, VerificationFailedError
from onnxsat.metrics.budget import HeldOut, OutputScore, Score
from onnxsat.options import RUN_SETTINGS, add_arguments, cli_fields, flag_name, from_arguments, pass_keys
from onnxsat.passes import catalogue
from onnxsat.pipelines.file import run_pipeline_file
from onnxsat.pruning.prune import PruneOptions
from onnxsat.quantization.report import QuantizeReport
from onnxsat.runner import RunSettings, run
from onnxsat.sparsity.sparsify import SparsifyOptions
from onnxsat.surgery.graph_edit import copy_model
from onnxsat.verification import VerificationResult
from onnxsat.zoo.synthetic import demo_cnn

OPTIONS = (OptimizeOptions, SparsifyOptions, PruneOptions)


@dataclass
class RenameGraphPass(Pass, kind="test-rename-graph"):
    """A pass written the way the README's "How to add a pass" says: fields as keys, ``check``, ``run``."""

    name: str = "renamed"

    def check(self, place: str) -> None:
        if not self.name:
            raise SettingsError(f"{place}.name: must not be empty")

    def run(self, model: Model, context: PassContext) -> PassResult:
        result = copy_model(model.proto)
        result.graph.name = self.name
        return lossless(context, model, result, [f"graph renamed to {self.name}"])


@dataclass
class RefusingPass(Pass, kind="test-refusing", register=False):
    """A pass whose result never verifies (not registered: used directly)."""

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult(model.proto, VerificationResult(False, error="refused on purpose"))


@dataclass
class OverBudgetPass(Pass, kind="test-over-budget", register=False):
    """A pass whose result verifies but is over its budget on held-out data (not registered: used directly)."""

    def run(self, model: Model, context: PassContext) -> PassResult:
        score = Score((OutputScore("y", "top1", 0.8, 1.0),), 6, "agreement")
        held = HeldOut("data (held out)", score, score, drop=0.1667, within_budget=False, refuted=True)
        report = QuantizeReport(input="m.onnx", output=None, mode="static", max_drop=0.01, held_out=held)
        return PassResult(model.proto, VerificationResult(True), report=report)


@dataclass
class ReplacingPass(Pass, kind="test-replacing", register=False):
    """A pass during which a producer publishes a new version of the input (not registered: used directly)."""

    source: str = ""

    def run(self, model: Model, context: PassContext) -> PassResult:
        newer = Path(self.source).with_name("newer.onnx")
        onnx.save(demo_cnn(), str(newer))
        newer.replace(self.source)  # atomically, as a publishing job does
        return PassResult(model.proto, VerificationResult(True))


@pytest.fixture
def model_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "model.onnx"
    onnx.save(demo_cnn(), str(path))
    yield path


def test_every_pass_is_registered_by_its_module() -> None:
    passes = catalogue()
    expected = {"eqsat", "sparsify", "prune", "surgeries", "ort", "peephole", "ort-transformers"}
    assert expected | {"sparse-initializers", "verify", RenameGraphPass.kind} <= set(passes)
    assert all(issubclass(cls, Pass) and cls.kind == kind for kind, cls in passes.items())
    assert passes == PASSES


def test_a_second_pass_of_the_same_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="pass 'test-rename-graph' is registered twice"):

        class Again(RenameGraphPass, kind="test-rename-graph"):
            pass

    assert "test-refusing" not in PASSES


def test_a_pass_added_in_one_module_runs_from_a_pipeline_file(model_file: Path, tmp_path: Path) -> None:
    pipeline = tmp_path / "pipe.json"
    passes = [{"type": "test-rename-graph", "name": "mine"}, {"type": "verify"}]
    pipeline.write_text(json.dumps({"input_model": "model.onnx", "output_model": "out.onnx", "passes": passes}))
    report = run_pipeline_file(pipeline)
    assert report.ok and report.written
    assert report.steps[0].notices == ["graph renamed to mine"]
    assert onnx.load(str(tmp_path / "out.onnx")).graph.name == "mine"


def test_a_pass_checks_its_keys_before_anything_runs(model_file: Path, tmp_path: Path) -> None:
    pipeline = tmp_path / "pipe.json"
    for entry, message in (
        ({"type": "test-rename-graph", "name": ""}, "passes[0].name: must not be empty"),
        ({"type": "test-rename-graph", "nam": "x"}, "has no key 'nam'"),
    ):
        pipeline.write_text(json.dumps({"input_model": "model.onnx", "output_model": "o.onnx", "passes": [entry]}))
        with pytest.raises(SettingsError, match=re.escape(message)):
            run_pipeline_file(pipeline)
    assert not (tmp_path / "o.onnx").exists()


def test_the_runner_refuses_a_failing_result_writes_nothing_and_still_reports(model_file: Path, tmp_path: Path) -> None:
    output, report_path = tmp_path / "out.onnx", tmp_path / "report.json"
    with pytest.raises(VerificationFailedError, match="refuse failed verification; nothing was written") as caught:
        run(model_file, output, [("refuse", RefusingPass())], RunSettings(), report_path, pipeline="p")
    assert not output.exists()
    saved = json.loads(report_path.read_text())
    assert saved["steps"][0]["verification"]["error"] == "refused on purpose" and saved["written"] is False
    assert caught.value.report.steps[0].ok is False  # type: ignore[attr-defined]
    forced = run(model_file, output, [("refuse", RefusingPass())], RunSettings(force=True), pipeline="p")
    assert forced.written and output.exists()


@pytest.mark.parametrize("pipeline", [None, "p"])
def test_a_result_over_its_budget_on_held_out_data_is_not_written_unless_forced(
    model_file: Path, tmp_path: Path, pipeline: str | None
) -> None:
    """The held-out score is the budget's honest check: a result it shows outside the budget beyond its
    sampling error had been written with a warning and exit code 0."""
    output = tmp_path / "out.onnx"
    where = "" if pipeline is None else re.escape("budget (test-over-budget): ")
    message = where + re.escape(
        "held-out drop 16.67% is over the budget beyond its sampling error (on 6 samples the search never used)"
    )
    with pytest.raises(VerificationFailedError, match=f"^{message}; nothing was written .*--force") as caught:
        run(model_file, output, [("budget", OverBudgetPass())], RunSettings(), pipeline=pipeline)
    assert not output.exists()
    if pipeline is not None:
        assert "OVER its budget" in caught.value.report.to_table()  # type: ignore[attr-defined]
    assert run(model_file, output, [("budget", OverBudgetPass())], RunSettings(force=True), pipeline="p").written


def test_later_passes_do_not_run_after_a_failure(model_file: Path, tmp_path: Path) -> None:
    steps = [("first", RefusingPass()), ("second", RenameGraphPass())]
    with pytest.raises(VerificationFailedError, match="first failed verification") as caught:
        run(model_file, tmp_path / "out.onnx", steps, pipeline="p")
    assert caught.value.report.not_run == ["second"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("options_class", OPTIONS)
def test_options_are_the_flags_and_the_pipeline_keys(options_class: type) -> None:
    fields = {f.name for f in dataclasses.fields(options_class)}
    flags = {f.name for f in cli_fields(options_class)}
    keys = set(pass_keys(options_class))
    assert flags <= keys <= fields
    assert not keys & set(RUN_SETTINGS)
    parser = argparse.ArgumentParser()
    add_arguments(parser, options_class)
    defaults = from_arguments(options_class, parser.parse_args([]))
    built = options_class()
    for field in cli_fields(options_class):
        cli_default = field.metadata["cli"]["default"]
        expected = getattr(built, field.name) if cli_default is dataclasses.MISSING else cli_default
        assert getattr(defaults, field.name) == expected, flag_name(field)


def test_a_flag_reaches_its_field() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, SparsifyOptions)
    args = parser.parse_args(["--sparsity", "40%", "--uniform-only", "--exclude", "a", "b", "--mean", "0.5,0.4"])
    options = from_arguments(SparsifyOptions, args)
    assert (options.sparsity, options.per_layer, options.exclude, options.mean) == (0.4, False, ["a", "b"], [0.5, 0.4])
    parser = argparse.ArgumentParser()
    add_arguments(parser, PruneOptions)
    options = from_arguments(PruneOptions, parser.parse_args(["--rates", "c1=0.25", "c2=10%", "--single-node"]))
    assert options.rates == {"c1": 0.25, "c2": 0.1} and options.single_node


def test_the_api_takes_the_options_as_keywords(model_file: Path, tmp_path: Path) -> None:
    report = onnxsat.sparsify(model_file, tmp_path / "s.onnx", sparsity=0.3, method="flat")
    assert report.written and report.method == "flat" and report.overall == pytest.approx(0.3, abs=0.01)
    report = onnxsat.optimize(model_file, tmp_path / "o.onnx", target="portable", max_iterations=1)
    assert report.egraph["stop_reason"] == "iteration limit (1)" and report.target == "portable"
    with pytest.raises(TypeError, match="unexpected keyword argument 'sparsty'"):
        onnxsat.sparsify(model_file, tmp_path / "x.onnx", sparsty=0.3)
    with pytest.raises(SettingsError, match="unknown method 'dense'"):
        onnxsat.sparsify(model_file, tmp_path / "x.onnx", method="dense")
    assert not (tmp_path / "x.onnx").exists()


def test_the_api_names_are_functions_not_the_modules_of_the_same_name() -> None:
    import onnxsat.eqsat.optimizer
    import onnxsat.verification

    assert callable(onnxsat.optimize) and callable(onnxsat.verify) and callable(onnxsat.run_pipeline)


def test_every_command_module_has_an_order_and_a_parser() -> None:
    modules = command_modules()
    orders = [module.ORDER for module in modules]
    assert orders == sorted(set(orders)), "each command its own place in --help"
    assert all(callable(module.add_parser) for module in modules)


def test_reports_write_strict_json_without_nan_or_infinity() -> None:
    """A NaN (a node whose quantization made the outputs NaN) and an infinite SNR (identical outputs) were
    written as Python's ``NaN``/``Infinity`` tokens, which a browser's ``JSON.parse`` refuses."""

    @dataclass
    class Figures(onnxsat.core.ReportBase):
        values: dict

        def to_dict(self) -> dict:
            return {"values": self.values}

    text = Figures({"damage": float("nan"), "snr_db": float("inf"), "low": -float("inf"), "rows": [(1.5, 2)]}).to_json()
    assert json.loads(text, parse_constant=lambda token: pytest.fail(f"non-standard JSON {token}")) == {
        "values": {"damage": None, "snr_db": "inf", "low": "-inf", "rows": [[1.5, 2]]}
    }


def test_an_input_replaced_during_the_run_writes_nothing(model_file: Path, tmp_path: Path) -> None:
    """A large one-file model's weights are read from its file as the result is written: replaced meanwhile, the
    result mixed two versions' weights, with "verification PASSED"."""
    from onnxsat.errors import InputChangedError

    output = tmp_path / "out.onnx"
    with pytest.raises(InputChangedError, match="changed on disk while ONNXSat ran"):
        run(model_file, output, [("replace", ReplacingPass(str(model_file)))], RunSettings())
    assert not output.exists() and InputChangedError.exit_code == 3
