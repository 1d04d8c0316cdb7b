"""Experiment 1 (fusion) through the command line: every file written, every variant timed and checked."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import onnx
import pytest

from onnxsat.cli import main
from onnxsat.zoo.synthetic import conv_bn_relu_chain


def test_experiment_one_writes_plots_table_csv_and_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "chain.onnx"
    onnx.save(conv_bn_relu_chain(3), str(model))
    out = tmp_path / "results"
    argv = ["bench", "experiment", "1", "--models", str(model), "--rounds", "4", "--warmup", "1", "--out", str(out)]
    assert main([*argv, "--ort-level", "extended", "--batch-size", "4"]) == 0
    markdown = capsys.readouterr().out
    assert "ORT offline level: extended" in markdown and "online optimizations disabled" in markdown
    for name in ("experiment1_latency.png", "experiment1_throughput.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (out / "experiment1.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["variant"] for r in rows] == ["baseline", "onnxsat", "ort offline", "onnxsat + ort offline"]
    assert all(float(r["latency_ms"]) > 0 and float(r["throughput"]) > 0 for r in rows)
    assert all(float(r["max_abs_diff"]) < 1e-4 for r in rows)  # fusion is lossless
    assert rows[0]["speedup"] == "1" and rows[0]["batch"] == "1"  # the fixed batch of the chain wins over --batch-size
    by_variant = {r["variant"]: int(r["nodes"]) for r in rows}
    assert by_variant["onnxsat"] < by_variant["baseline"]  # BatchNormalization folded, Conv+Relu fused
    settings = json.loads((out / "experiment1_settings.json").read_text())
    assert settings["settings"]["ort_level"] == "extended" and settings["models"][0]["nodes"]["baseline"] == 9


def test_experiment_one_bad_settings_are_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "chain.onnx"
    onnx.save(conv_bn_relu_chain(1), str(model))
    base = ["bench", "experiment", "1", "--out", str(tmp_path / "out")]
    assert main([*base, "--models", str(model), "--ort-level", "max"]) == 9
    assert "unknown ORT level 'max'" in capfd.readouterr().err
    assert main([*base, "--models", str(tmp_path / "missing.onnx")]) == 3
    assert main([*base, "--models", str(model), "--rounds", "0"]) == 9


def test_without_models_experiment_one_builds_its_own_into_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "experiment", "1", "--rounds", "2", "--warmup", "0"]) == 0
    out = tmp_path / "out" / "experiment1"
    built = sorted(p.stem for p in (out / "models").glob("*.onnx"))
    assert {"digits_cnn", "simple_classifier", "demo_cnn"} <= set(built)
    with (out / "experiment1.csv").open() as handle:
        models = {row["model"] for row in csv.DictReader(handle)}
    assert models == set(built)  # the onnx package's IR-3 models too: their weights are optimized as constants
