"""``onnxsat prune``'s parser and handler (command.py), run the way cli.py runs a subcommand."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from pruning_helpers import Builder

from onnxsat.commands.prune import add_parser as add_prune_parser
from onnxsat.errors import SettingsError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="onnxsat")
    add_prune_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    path = tmp_path / "model.onnx"
    onnx.save(b.model([b.conv("c2", r, 8, 2)]), str(path))
    return path


def test_prune_command_writes_and_prints(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = model_file.with_name("pruned.onnx")
    assert main(["prune", str(model_file), "-o", str(output), "--rate", "50%", "--rates", "c1=0.25"]) == 0
    text = capsys.readouterr().out
    assert "verification PASSED" in text
    # a pruned model that runs may still compute something else: how far its output moved is said
    (change,) = [line for line in text.splitlines() if "changed by pruning" in line]
    assert "relative L2 error" in change and "cosine" in change
    weights = {t.name: list(t.dims) for t in onnx.load(str(output)).graph.initializer}
    assert weights["c1_w"] == [6, 3, 3, 3]


def test_latency_times_the_pruned_model_beside_the_original(
    model_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fewer MACs need not mean faster (a ShuffleNet pruned 25% ran 0.94x): --latency measures it."""
    output, report = model_file.with_name("pruned.onnx"), model_file.with_name("report.json")
    assert (
        main(["prune", str(model_file), "-o", str(output), "--rate", "50%", "--latency", "--report", str(report)]) == 0
    )
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("latency under")]
    assert line.startswith("latency under ORT_ENABLE_ALL (1 thread, median of 60 interleaved pairs, inputs ")
    (timed,) = json.loads(report.read_text())["latency"]
    assert timed["ort_level"] == "ORT_ENABLE_ALL" and timed["original_ms"] > 0 and timed["optimized_ms"] > 0


def test_latency_times_a_sample_of_the_data_at_its_own_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tagger given 16-token rows by --data was timed at 1 token (its dynamic dims set to 1): 1.37x there,
    1.48x at the 16 tokens it sees."""
    b = Builder()
    r = b.node("Relu", [b.conv("c1", "x", 3, 8)], "r1")
    model_file = tmp_path / "dynamic.onnx"
    onnx.save(b.model([b.conv("c2", r, 8, 2)], input_shape=["N", 3, "H", "W"]), str(model_file))
    data = tmp_path / "d.npz"
    np.savez(data, inputs=np.random.default_rng(0).normal(size=(4, 3, 24, 20)).astype(np.float32))
    output = tmp_path / "pruned.onnx"
    assert main(["prune", str(model_file), "-o", str(output), "--rate", "50%", "--latency", "--data", str(data)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("latency under")]
    assert "inputs x [1, 3, 24, 20])" in line


def test_a_result_timed_slower_is_said_on_stderr(
    model_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's "(slower)" was easy to miss: a pruned depthwise MobileNet ran 0.72x, exit 0, no warning."""
    from onnxsat.commands import prune as prune_command
    from onnxsat.report import LatencyComparison

    def slow(*args: object, **kwargs: object) -> LatencyComparison:
        return LatencyComparison("ORT_ENABLE_ALL", 1, 60, 1.0, 1.39, 0.72)

    monkeypatch.setattr(prune_command, "compare_latency", slow)
    output = model_file.with_name("pruned.onnx")
    assert main(["prune", str(model_file), "-o", str(output), "--rate", "50%", "--latency"]) == 0
    printed = capsys.readouterr()
    assert "(slower)" in printed.out
    assert "warning: the result runs slower than the original: 0.72x under ORT's full optimizations" in printed.err


def test_show_trees_needs_no_output(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prune", str(model_file), "--show-trees"]) == 0
    assert "c1 (Conv, root)" in capsys.readouterr().out


def test_bad_input_is_one_settings_error_and_nothing_is_written(model_file: Path) -> None:
    output = model_file.with_name("pruned.onnx")
    for argv in (["--rate", "1"], ["--exclude", "c1"], ["--rates", "missing=0.5"]):
        with pytest.raises(SettingsError):
            main(["prune", str(model_file), "-o", str(output), *argv])
    with pytest.raises(SettingsError, match="-o/--output"):
        main(["prune", str(model_file)])
    assert not output.exists()


def test_bench_prune_prints_a_row_per_rate_mode_and_refit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnxsat.cli import main as cli_main
    from onnxsat.zoo.digits_cnn import bundled_digits_cnn

    report = tmp_path / "bench.md"
    args = ["--rates", "0.5", "--data", "digits-test", "--calibration", "digits-train", "--samples", "64"]
    assert (
        cli_main(["bench", "prune", str(bundled_digits_cnn()), *args, "--rounds", "2", "--markdown", str(report)]) == 0
    )
    rows = [line for line in report.read_text().splitlines() if line.startswith("| 0.5 |")]
    assert len(rows) == 4  # tree-level / single-node, with and without reconstruction
    assert "accuracy on digits-test (64 samples)" in capsys.readouterr().out
    assert all(row.count("%") >= 3 and row.split("|")[6].strip().endswith("x") for row in rows)
    errors = [float(row.split("|")[8]) for row in rows]
    cosines = [float(row.split("|")[9]) for row in rows]
    assert all(0 < error < 1 for error in errors) and all(0 < cosine <= 1 for cosine in cosines)
    dense = next(line for line in report.read_text().splitlines() if line.startswith("| 0 | dense |"))
    assert dense.endswith("| 0 | 1 |") and float(dense.split("|")[7].strip(" %")) > 95  # the dense model's accuracy


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "1"], "--rate"),
        (["--rates", "missing=0.5"], "missing"),
        (["--exclude", "c1"], "exclud"),
        (["--model", "UNKNOWN_OP"], "Hardmax"),
    ],
    ids=["rate", "unknown_name", "everything_excluded", "unknown_op"],
)
def test_bad_input_through_the_real_command_is_one_line_and_exit_9(
    model_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """As a user sees it: one line on stderr, exit 9, nothing written (an op the library does not know,
    Hardmax here, named on the tree path)."""
    from onnxsat.cli import main as cli_main

    source = model_file
    if argv[0] == "--model":
        b = Builder()
        h = b.node("Hardmax", [b.conv("c1", "x", 3, 8)], "h", axis=1)
        source = tmp_path / "hardmax.onnx"
        onnx.save(b.model([b.conv("c2", h, 8, 2)]), str(source))
        argv = []
    output = tmp_path / "pruned.onnx"
    assert cli_main(["prune", str(source), "-o", str(output), *argv]) == 9
    err = capfd.readouterr().err
    assert err.startswith("onnxsat: error: ") and err.count("\n") == 1 and message in err, err
    assert not output.exists()


def test_an_unknown_op_names_the_library_entry_to_add(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The one line says which JSON entry makes the op known; with it, the model prunes."""
    from onnxsat.cli import main as cli_main

    b = Builder()
    s = b.node("Shrink", [b.conv("c1", "x", 3, 8)], "n1")
    source, output = tmp_path / "shrink.onnx", tmp_path / "pruned.onnx"
    onnx.save(b.model([b.conv("c2", s, 8, 2)]), str(source))
    assert cli_main(["prune", str(source), "-o", str(output)]) == 9
    assert capfd.readouterr().err == (
        "onnxsat: error: the model has no channel group that can be pruned (the node attribute library does not "
        "know 'Shrink' (node 'n1'); if it is elementwise on its first input, add --library FILE.json holding "
        '{"Shrink": "next-no-process"}, or {"Shrink": "stop-process"} if what it computes does not depend on how '
        "many channels it reads (as Shape's); reaches graph output 'c2'); see --show-trees\n"
    )
    library = tmp_path / "library.json"
    library.write_text('{"Shrink": "next-no-process"}')
    assert cli_main(["prune", str(source), "-o", str(output), "--library", str(library)]) == 0
    assert [t.dims for t in onnx.load(str(output)).graph.initializer if t.name == "c2_w"] == [[2, 4, 3, 3]]


def test_a_model_whose_matmuls_all_sit_in_bodies_is_refused_at_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A merged KV-cache decoder holds every MatMul in its If's branches: prune said so after two minutes
    in its normal form; the refusal now comes first and says where they are."""
    from onnxsat.cli import main as cli_main
    from tests.quantization.test_quantize_control_flow import merged_decoder_like

    source = merged_decoder_like(tmp_path / "merged.onnx")
    feeds = tmp_path / "flag.npz"
    np.savez(feeds, use_cache=np.array(True))
    assert cli_main(["prune", str(source), "-o", str(tmp_path / "p.onnx"), "--inputs", str(feeds)]) == 9
    assert capfd.readouterr().err == (
        "onnxsat: error: the model has no channel group that can be pruned (no Conv, Gemm or MatMul: 4 are inside"
        " If/Loop/Scan bodies, which prune does not enter)\n"
    )


def test_a_model_quantized_to_integer_matmuls_is_refused_as_quantized_already(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """ORT's dynamic quantization leaves no MatMul (MatMulInteger, DynamicQuantizeLSTM: a speaker embedder
    shipped so): the refusal says the model is quantized already, as the other refusals do."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from onnxsat.cli import main as cli_main
    from tests.quantization.test_quantize import mlp

    source = tmp_path / "int8.onnx"
    quantize_dynamic(str(mlp(tmp_path / "mlp.onnx")), str(source), weight_type=QuantType.QInt8)
    assert not any(node.op_type == "MatMul" for node in onnx.load(source).graph.node)
    assert cli_main(["prune", str(source), "-o", str(tmp_path / "p.onnx"), "--data", "digits"]) == 9  # before data
    assert capfd.readouterr().err.startswith(
        "onnxsat: error: the model has no channel group that can be pruned (no Conv, Gemm or MatMul); it is "
        "quantized already (2 DynamicQuantizeLinear, 2 MatMulInteger): prune its float original instead"
    )


def test_metric_fidelity_scores_agreement_with_the_original_not_the_labels(tmp_path: Path) -> None:
    """``--metric fidelity`` (the spelling the budgeted commands share) is ``--fidelity``: labels are ignored."""
    from onnxsat.cli import main as cli_main
    from onnxsat.zoo.digits_cnn import bundled_digits_cnn

    out, report = tmp_path / "p.onnx", tmp_path / "r.json"
    args = ["prune", str(bundled_digits_cnn()), "-o", str(out), "--rate", "0.25", "--data", "digits", "--limit", "64"]
    assert cli_main([*args, "--metric", "fidelity", "--report", str(report)]) == 0
    scored = json.loads(report.read_text())
    assert "(fidelity)" in scored["scored_on"]
    assert scored["baseline"]["kind"] == "agreement" and scored["baseline"]["value"] == 1.0


def test_calibration_on_inputs_that_give_every_input_is_those_values_once() -> None:
    """A graph network whose every input was given with --inputs was refitted on 16 copies of them, and the
    report called that "random (16 seeded normal inputs)"."""
    from onnxsat.inputs import InputSpec
    from onnxsat.pruning.prune import PruneOptions, calibration_batches

    b = Builder()
    model = b.model([b.conv("c1", "x", 3, 8), b.conv("c2", "c1", 8, 4)])
    given = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
    options = PruneOptions(inputs=InputSpec(given={"x": given}, source="feeds.npz"))
    feeds, what = calibration_batches(model, options)
    assert what == "the values feeds.npz gives" and len(feeds) == 1
    np.testing.assert_array_equal(feeds[0]["x"], given)
    feeds, what = calibration_batches(model, PruneOptions())
    assert what.startswith("random (16 seeded") and len(feeds) == 16
