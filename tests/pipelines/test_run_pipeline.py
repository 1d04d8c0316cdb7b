"""``onnxsat run``: pipeline files run end to end, are checked before anything runs, and never leave a
half-written output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxsat.cli import main
from onnxsat.zoo.synthetic import conv_bn_relu_chain

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pipelines"


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "chain.onnx"
    onnx.save(conv_bn_relu_chain(3), str(path))
    return path


def write(tmp_path: Path, config: dict | str, name: str = "pipe.json") -> Path:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


def pipeline(passes: list[dict], **extra: object) -> dict:
    return {"input_model": "chain.onnx", "output_model": "out.onnx", "passes": passes, **extra}


def outputs(path: Path, feed: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: feed})[0]


def test_a_json_pipeline_runs_every_pass_and_reports_each(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    passes = [{"type": "eqsat", "target": "portable"}, {"type": "sparse-initializers"}, {"type": "verify"}]
    path = write(tmp_path, pipeline(passes, report="report.json"))
    assert main(["run", str(path)]) == 0
    table = capsys.readouterr().out
    assert "passes[0]   eqsat" in table and "passes[2]   verify" in table and "written:" in table
    report = json.loads((tmp_path / "report.json").read_text())
    assert [step["kind"] for step in report["steps"]] == ["eqsat", "sparse-initializers", "verify"]
    assert all(step["ok"] for step in report["steps"]) and report["written"]
    result = onnx.load(str(tmp_path / "out.onnx"))
    assert "BatchNormalization" not in {node.op_type for node in result.graph.node}  # folded by eqsat
    feed = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(outputs(tmp_path / "out.onnx", feed), outputs(model_file, feed), rtol=1e-4, atol=1e-5)


def test_yaml_lossy_passes_become_the_reference_of_later_verify_passes(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """
input_model: chain.onnx
output_model: out.onnx
input_shapes: {input: [1, 4, 8, 8]}
passes:
  - type: sparsify
    sparsity: 0.5
  - type: eqsat
  - type: verify
"""
    assert main(["run", str(write(tmp_path, text, "pipe.yaml"))]) == 0
    table = capsys.readouterr().out
    assert "against the result of passes[0] (sparsify)" in table
    weights = [onnx.numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "out.onnx")).graph.initializer]
    assert any(w.ndim == 4 and np.mean(w == 0) >= 0.4 for w in weights)


def test_a_failing_pass_stops_the_pipeline_and_nothing_is_written(
    model_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # folding BatchNormalization into the Conv weights moves outputs by float rounding: exactness fails
    passes = [
        {"type": "eqsat", "target": "portable"},
        {"type": "verify", "rtol": 0.0, "atol": 0.0, "ort_rounding": 0.0},
        {"type": "verify"},
    ]
    path = write(tmp_path, pipeline(passes))
    assert main(["run", str(path)]) == 8
    captured = capfd.readouterr()
    assert "passes[1]   verify" in captured.out and "FAILED verification" in captured.out
    assert "passes[2]    not run" in captured.out or "passes[2]   not run" in captured.out
    assert "passes[1] failed verification; nothing was written" in captured.err
    assert not (tmp_path / "out.onnx").exists()
    assert main(["run", str(path), "--force"]) == 8
    assert (tmp_path / "out.onnx").exists() and "because of --force" in capfd.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"passes": [{"type": "distill"}]}, "passes[0].type: unknown pass 'distill'"),
        ({"passes": [{"type": "prune", "ratio": 0.5}]}, "passes[0]: the prune pass has no key 'ratio'"),
        ({"passes": [{"type": "prune", "rate": "half"}]}, "passes[0].rate: not a fraction or percentage: 'half'"),
        ({"passes": [{"type": "prune", "criterion": 3}]}, "passes[0].criterion: expected str, got int 3"),
        ({"passes": [{"type": "prune", "rate": 1.5}]}, "passes[0]: --rate must be in [0, 1)"),
        ({"passes": [{"type": "surgeries"}]}, "passes[0]: the surgeries pass needs the key 'surgeries'"),
        (
            {"passes": [{"type": "surgeries", "surgeries": [{"surgeon": "MakeItFast"}]}]},
            "passes[0].surgeries[0]: unknown surgeon 'MakeItFast'",
        ),
        ({"passes": [{"type": "eqsat", "target": "gpu"}]}, "passes[0]: unknown target 'gpu'"),
        ({"passes": [{"type": "ort", "level": "max"}]}, "passes[0].level: unknown 'max'"),
        ({"passes": []}, "passes: the list is empty"),
        ({"data": "missing.npz"}, "data: missing.npz: no such file or folder"),
        ({"passes": [{"type": "prune", "data": "gone/d.npz"}]}, "passes[0].data: gone/d.npz: no such file or folder"),
        ({"passes": [{"type": "sparsify", "data": "digitz", "max_drop": 0.01}]}, "unknown dataset 'digitz'"),
        (
            {"passes": [{"type": "sparsify", "data": "digits", "max_drop": 0.01, "budget_minutes": 0}]},
            "passes[0]: --budget-minutes must be positive, got 0",
        ),
        (
            {"passes": [{"type": "sparsify", "data": "digits", "max_drop": 0.01, "budget_minutes": "soon"}]},
            "passes[0].budget_minutes: expected float, got str 'soon'",
        ),
        (
            {"passes": [{"type": "sparsify", "data": "digits", "max_drop": 0.01, "budget_minute": 5}]},
            "passes[0]: the sparsify pass has no key 'budget_minute'",
        ),
        ({"outputs": "x.onnx"}, "pipeline: a pipeline file has no key 'outputs'"),
        ({"input_model": "missing.onnx"}, "input_model: "),
        ({"output_model": "no/such/folder/out.onnx"}, "output folder does not exist"),
        ({"output_model": "chain.onnx"}, "output path is the input model itself"),
    ],
)
def test_every_mistake_is_one_line_naming_its_place_and_nothing_runs(
    model_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], change: dict, message: str
) -> None:
    config = {**pipeline([{"type": "eqsat"}, {"type": "verify"}]), **change}
    assert main(["run", str(write(tmp_path, config))]) != 0
    err = capfd.readouterr().err.strip()
    assert err.startswith("onnxsat: error: pipe.json: ") and message in err and "\n" not in err
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("pipe.json", '{"input_model": "chain.onnx",', "not valid JSON"),
        ("pipe.yaml", "passes: [\n  - type", "not valid YAML"),
        ("pipe.yaml", "- just\n- a list\n", "expected a mapping"),
        # a key given twice: the readers keep the last one silently (a second max_drop further down would win)
        ("pipe.yaml", "passes:\n  - type: sparsify\n    max_drop: 1%\n    max_drop: 5%\n", "'max_drop' is given twice"),
        ("pipe.json", '{"output_model": "a.onnx", "output_model": "b.onnx"}', "'output_model' is given twice"),
    ],
)
def test_unreadable_files_are_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str, text: str, message: str
) -> None:
    assert main(["run", str(write(tmp_path, text, name))]) == 9
    err = capfd.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_yaml_merge_keys_may_be_overridden(model_file: Path, tmp_path: Path) -> None:
    """``<<: *defaults`` then a key of its own is YAML's way to override, not a key given twice."""
    text = "input_model: chain.onnx\noutput_model: out.onnx\n"
    text += "passes:\n  - &base {type: eqsat}\n  - <<: *base\n    type: verify\n"
    assert main(["run", str(write(tmp_path, text, "pipe.yaml"))]) == 0
    assert (tmp_path / "out.onnx").exists()


def test_a_missing_pipeline_file_is_exit_3(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.yaml")]) == 3
    assert "pipeline file not found" in capfd.readouterr().err


def test_a_percentage_is_read_in_a_file_as_its_flag_reads_it() -> None:
    """``--max-drop 1%`` works on the command line; ``max_drop: 1%`` in a pipeline file was refused."""
    from onnxsat.core import PASSES

    sparsify = PASSES.lookup("sparsify").from_config({"sparsity": "50%", "max_drop": "1%", "data": "digits"}, "p")
    assert (sparsify.options.sparsity, sparsify.options.max_drop) == (0.5, 0.01)  # type: ignore[attr-defined]
    assert PASSES.lookup("prune").from_config({"rate": "0.3"}, "p").options.rate == 0.3  # type: ignore[attr-defined]


def test_check_runs_nothing(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(write(tmp_path, pipeline([{"type": "eqsat"}]))), "--check"]) == 0
    assert "1 passes (eqsat)" in capsys.readouterr().out
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.*") if p.suffix in (".json", ".yaml")))
def test_shipped_examples_run(example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output, report = tmp_path / "out.onnx", tmp_path / "report.json"
    assert main(["run", str(EXAMPLES / example), "-o", str(output), "--report", str(report)]) == 0
    assert output.exists() and json.loads(report.read_text())["written"]
    onnx.checker.check_model(onnx.load(str(output)))


def test_exact_surgeries_are_compared_under_the_old_names_and_inexact_ones_are_only_run(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rename = {"surgeon": "RenameInputs", "old_names": ["input"], "new_names": ["image"]}
    exact = [{"type": "surgeries", "surgeries": [rename, {"surgeon": "ReplaceErfWithTanh"}]}, {"type": "verify"}]
    assert main(["run", str(write(tmp_path, pipeline(exact)))]) == 0
    table = capsys.readouterr().out
    assert "ReplaceErfWithTanh: " in table and "nothing" in table.split("ReplaceErfWithTanh: ")[1].splitlines()[0]
    assert "not compared" not in table and "against the result of passes[0] (surgeries)" in table
    assert [i.name for i in onnx.load(str(tmp_path / "out.onnx")).graph.input] == ["image"]
    erf = helper.make_graph(
        [helper.make_node("Erf", ["x"], ["y"])],
        "erf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    erf_model = helper.make_model(erf, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(erf_model, str(tmp_path / "erf.onnx"))
    inexact = [{"type": "surgeries", "surgeries": [{"surgeon": "ReplaceErfWithTanh"}]}]
    assert main(["run", str(write(tmp_path, pipeline(inexact, input_model="erf.onnx")))]) == 0
    assert "outputs not compared with the input (a surgeon changes numerics)" in capsys.readouterr().out
