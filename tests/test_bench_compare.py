"""``onnxsat bench compare``: every variant in the table, sane ratios, output differences, peers skipped cleanly.

The benchmark's figures are timings, so nothing here asserts on speed; it asserts on what must hold on
any machine: every row is there, ratios are positive and finite, outputs were compared, a missing or
failing peer is a "skipped" row with its reason (whether or not the optional peers are installed: CI
installs only ``.[dev]``), and bad input is one line on stderr with a distinct exit code. Runs use 3
timed rounds on models of a few nodes, so the whole file takes seconds.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import re
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.bench import compare, peers
from onnxsat.bench.compare import (
    BASELINE,
    NOISE,
    ONNXSAT_ALL,
    ONNXSAT_OFF,
    ORIGINAL_OFF,
    input_spec,
)
from onnxsat.cli import main
from onnxsat.errors import SettingsError
from onnxsat.timing import LEAST_ROUNDS, LEAST_WARMUP, noise_band, round_order, time_rounds

FAST = ["--pairs", "3", "--warmup", "1"]


def tiny_cnn() -> onnx.ModelProto:
    """Conv + BatchNormalization + Relu, pooled, then Gemm: what ONNXSat fuses, in a few nodes."""
    rng = np.random.default_rng(0)

    def const(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["y"]),
    ]
    variance = numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var")
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        [
            const("w", 4, 3, 3, 3),
            const("b", 4),
            const("scale", 4),
            const("bias", 4),
            const("mean", 4),
            variance,
            const("w2", 4, 2),
            const("b2", 2),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def text_model(layer_norm: bool = True) -> onnx.ModelProto:
    """Not run: only its inputs and op types matter to the transformer-type guess."""
    nodes = [helper.make_node("Softmax", ["input_ids"], ["y"])]
    if layer_norm:
        nodes.append(helper.make_node("LayerNormalization", ["y", "s"], ["z"]))
    graph = helper.make_graph(
        nodes,
        "text",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, 8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def image_attention_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("LayerNormalization", ["pixels", "s"], ["n"]),
        helper.make_node("Softmax", ["n"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "vit",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
        [numpy_helper.from_array(np.ones(8, np.float32), "s")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def run_cli(argv: list[object]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue()


def csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as stream:
        return {row["variant"]: row for row in csv.DictReader(stream)}


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    onnx.save(tiny_cnn(), str(path))
    return path


@pytest.fixture(scope="module")
def full_run(tiny_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """One run with the real peer registry (each peer runs, or is skipped if not installed)."""
    out = tmp_path_factory.mktemp("out")
    argv = ["bench", "compare", tiny_file, *FAST, "--input-shape", "x:2,3,8,8"]
    argv += ["--csv", out / "r.csv", "--markdown", out / "r.md", "--keep", out / "keep"]
    rc, text = run_cli(argv)
    return rc, text, out


# ---------------------------------------------------------------------------------------------- a full run


def test_table_lists_every_variant_and_the_summary(full_run: tuple[int, str, Path]) -> None:
    rc, text, _ = full_run
    assert rc == 0, text
    names = [ORIGINAL_OFF, BASELINE, NOISE, ONNXSAT_OFF, ONNXSAT_ALL, *(f"{p}, ORT all" for p in peers.PEERS)]
    table_lines = text.splitlines()
    for name in names:
        assert any(line.startswith(name) for line in table_lines), f"{name!r} missing from:\n{text}"
    assert "intra-op threads 1" in text and "3 timed rounds after 1 warm-up" in text
    assert "onnxruntime" in text.splitlines()[0]  # the environment line
    assert "x [2,3,8,8] float32" in text
    assert "noise: a second session of the original" in text
    assert f'of the "{ONNXSAT_ALL}" speedup' in text


def test_ratios_are_positive_and_outputs_compared(full_run: tuple[int, str, Path]) -> None:
    out = full_run[2]
    rows = csv_rows(out / "r.csv")
    assert set(rows) >= {ORIGINAL_OFF, BASELINE, NOISE, ONNXSAT_OFF, ONNXSAT_ALL}
    for name, row in rows.items():
        if row["status"] == "skipped":
            assert row["reason"], name
            continue
        assert row["status"] == "ok"
        for key in ("speedup", "median_ms", "p95_ms", "ratio_p5", "ratio_p95"):
            value = float(row[key])
            assert math.isfinite(value) and value > 0, (name, key, value)
        assert math.isfinite(float(row["max_abs_diff"])), name
        assert row["outputs_match"] in ("True", "False"), name
        assert int(row["nodes"]) > 0
    assert float(rows[BASELINE]["speedup"]) == 1.0
    assert rows[ONNXSAT_OFF]["outputs_match"] == "True"
    assert float(rows[ONNXSAT_ALL]["optimize_s"]) > 0
    low, high = float(rows[BASELINE]["noise_low"]), float(rows[BASELINE]["noise_high"])
    assert 0 < low <= 1 <= high


def test_transformers_optimizer_is_skipped_for_a_cnn_with_its_reason(full_run: tuple[int, str, Path]) -> None:
    _, text, out = full_run
    row = csv_rows(out / "r.csv")["ort-transformers, ORT all"]
    assert row["status"] == "skipped"
    assert "not a transformer" in row["reason"] or "not installed" in row["reason"]
    assert "ort-transformers, ORT all" in text and "skipped: " in text


def test_markdown_and_kept_models_are_written(full_run: tuple[int, str, Path]) -> None:
    _, _, out = full_run
    markdown = (out / "r.md").read_text()
    assert "| variant |" in markdown and f"| {ONNXSAT_ALL} |" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in table}) == 1  # same column count on every row
    kept = {p.name for p in (out / "keep").iterdir()}
    assert {"tiny.original.onnx", "tiny.onnxsat.onnx"} <= kept
    onnx.checker.check_model(onnx.load(str(out / "keep" / "tiny.onnxsat.onnx")))


# ------------------------------------------------------------------------------------------ peers skipped


@peers.requires("onnxsat_no_such_package")
def _absent_peer(model: onnx.ModelProto) -> onnx.ModelProto:
    raise AssertionError("never called: its package is missing")


def _failing_peer(model: onnx.ModelProto) -> onnx.ModelProto:
    raise RuntimeError("deliberate failure\nsecond line")


def _identity_peer(model: onnx.ModelProto) -> onnx.ModelProto:
    return model


def test_missing_and_failing_peers_are_skipped_not_fatal(
    tiny_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    registry = {"absent": _absent_peer, "broken": _failing_peer, "identity": _identity_peer}
    monkeypatch.setattr(peers, "PEERS", registry)
    rc, text = run_cli(["bench", "compare", tiny_file, *FAST, "--csv", tmp_path / "r.csv"])
    assert rc == 0, text
    rows = csv_rows(tmp_path / "r.csv")
    assert rows["absent, ORT all"]["status"] == "skipped"
    assert "not installed" in rows["absent, ORT all"]["reason"]
    assert "onnxsat_no_such_package" in rows["absent, ORT all"]["reason"]
    assert rows["broken, ORT all"]["status"] == "skipped"
    assert rows["broken, ORT all"]["reason"] == "failed: RuntimeError: deliberate failure second line"
    assert rows["identity, ORT all"]["status"] == "ok"
    assert rows["identity, ORT all"]["outputs_match"] == "True"  # ORT all fuses Conv+BN itself: tiny diffs
    assert "absent (not installed)" in text  # the peers line
    for pattern in (r"absent, ORT all +skipped: not installed", r"broken, ORT all +skipped: failed: RuntimeError"):
        assert re.search(pattern, text), text


# ---------------------------------------------------------------------------------------------- bad input


def test_missing_model_file_is_one_line_and_exit_3(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    rc = main(["bench", "compare", str(tmp_path / "missing.onnx"), *FAST])
    out, err = capfd.readouterr()
    assert rc == 3
    assert err.count("\n") == 1 and err.startswith("onnxsat: error: input model not found")
    assert "Traceback" not in out + err


@pytest.mark.parametrize("spec", ["x:1,a,8,8", "x", ":1,2", "x:-1,3", "x=1,3,8,8"])
def test_bad_shape_spec_is_one_line_and_exit_9(spec: str, tiny_file: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    rc = main(["bench", "compare", str(tiny_file), "--input-shape", spec, *FAST])
    out, err = capfd.readouterr()
    assert rc == 9
    assert err.count("\n") == 1 and "--input-shape expects NAME:D1,D2" in err
    assert out == ""  # refused before any work


def test_bad_settings_are_refused(tiny_file: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    assert main(["bench", "compare", str(tiny_file), "--pairs", "0"]) == 9
    assert main(["bench", "compare", str(tiny_file), "--threads", "0"]) == 9
    assert main(["bench", "compare", str(tiny_file), "--input-shape", "nope:1,3,8,8", *FAST]) == 9
    assert main(["bench", "compare", str(tiny_file), "--cost", "no-such-cost-model", *FAST]) == 9
    _, err = capfd.readouterr()
    assert err.count("\n") == 4 and "no-such-cost-model" in err


# ---------------------------------------------------------------------------------------------- the parts


def test_shape_specs_are_spelled_name_colon_dims_as_everywhere() -> None:
    assert input_spec(["x:1,3,224,224", "input:0:2,5", "y:4"]).shapes == {
        "x": [1, 3, 224, 224],
        "input:0": [2, 5],
        "y": [4],
    }
    with pytest.raises(SettingsError):
        input_spec(["x:1,b"])
    with pytest.raises(SettingsError, match="write x:1,3,224,224"):
        input_spec(["x=1,3,224,224"])


@pytest.mark.parametrize("count", [1, 2, 5, 9])
def test_round_order_puts_every_variant_in_every_position(count: int) -> None:
    orders = [round_order(i, count) for i in range(2 * count)]
    assert all(sorted(order) == list(range(count)) for order in orders)
    for position in range(count):
        assert {order[position] for order in orders} == set(range(count))
    if count > 1:
        firsts = [order[0] for order in orders[:count]]
        assert len(set(firsts)) == count  # no variant always first


def test_a_run_limited_in_seconds_stops_after_its_least_rounds_at_the_end_of_a_rotation() -> None:
    """A search times many models inside its own time budget: a slow model's run stops at ``seconds``, but never
    before its least rounds (warm-up and timed), and only when every runner has gone first alike."""
    calls = [0, 0, 0]

    def runner(which: int) -> None:
        calls[which] += 1
        time.sleep(0.002)

    runners = [lambda w=w: runner(w) for w in range(3)]
    times = time_rounds(runners, rounds=40, warmup=5, seconds=0.001)
    timed = LEAST_ROUNDS + (-LEAST_ROUNDS) % 3  # 12: the first rotation's end after 10 rounds
    assert [len(t) for t in times] == [timed] * 3
    assert calls == [LEAST_WARMUP + timed] * 3
    assert [len(t) for t in time_rounds(runners, rounds=14, warmup=1, seconds=60.0)] == [14] * 3, "in time: all"


def test_noise_band_is_symmetric_around_one_and_contains_the_noise() -> None:
    ratios = [0.97, 1.01, 1.02, 0.99, 1.03, 1.0, 0.98]
    band = noise_band(ratios)
    low, high = band.bounds
    assert low < 1 < high and math.isclose(low * high, 1.0)
    assert band.contains(band.median) and band.contains(1.0)
    assert not band.contains(1.5) and not band.contains(0.5)
    assert band.rounds[0] <= band.median <= band.rounds[1]


def test_transformer_type_guess() -> None:
    assert peers.guess_transformer_type(text_model()) == "bert"
    assert peers.guess_transformer_type(text_model(layer_norm=False)) == "bert"
    assert peers.guess_transformer_type(image_attention_model()) == "vit"
    with pytest.raises(peers.PeerSkipped, match="not a transformer"):
        peers.guess_transformer_type(tiny_cnn())


def test_geometric_mean() -> None:
    assert math.isclose(compare.geometric_mean([2.0, 0.5]), 1.0)
    assert math.isclose(compare.geometric_mean([1.1]), 1.1)


def test_verdict_needs_the_whole_interval_outside_the_noise_band() -> None:
    comparison = compare.ModelComparison("m.onnx", "m", "x [1] float32", compare.Tolerance())
    comparison.noise = noise_band([0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 1.0])

    def variant(name: str, ratios: list[float]) -> compare.Variant:
        return compare.Variant(name, "peer", "all", times=[1e-3] * len(ratios), ratios=ratios)

    assert comparison.verdict(variant(BASELINE, [1.0] * 7)) == "baseline"
    assert comparison.verdict(variant(NOISE, [1.0] * 7)) == "noise probe"
    assert comparison.verdict(variant("fast", [1.3, 1.25, 1.35, 1.3, 1.28, 1.32, 1.3])) == "faster"
    assert comparison.verdict(variant("slow", [0.7, 0.72, 0.69, 0.7, 0.71, 0.7, 0.68])) == "slower"
    assert comparison.verdict(variant("same", [0.98, 1.02, 1.0, 1.01, 0.99, 1.0, 1.0])) == "within noise"
    # a median outside the band whose interval still reaches into it is not called faster
    assert comparison.verdict(variant("unsure", [0.99, 1.0, 1.02, 1.03, 1.04, 1.2, 1.3])) == "within noise"
