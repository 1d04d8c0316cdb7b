"""Experiments 2 and 3 (``onnxsat.bench.sparsity``): every file written, rows complete, figures sane.

Timings are never asserted beyond being positive and finite (they are this machine's); what must hold
anywhere is asserted: one CSV row per model x method x level, the reached sparsity equals the requested
level up to per-layer rounding, light pruning costs little, the budget search stays inside its budget,
sparse initializers leave outputs unchanged, and a batch fixed to 1 is timed (and said to be) at batch 1.
Models are a two-Conv, one-Gemm CNN built here, with a dynamic batch and with the batch fixed to 1.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.bench.sparsity import (
    DENSE,
    PRUNED,
    SPARSE,
    SparsityExperimentSettings,
    experiment_three,
    experiment_two,
)
from onnxsat.errors import InputNotFoundError, OutputPathError, SettingsError
from onnxsat.sparsity.targets import sparsity_targets
from onnxsat.zoo.digits_cnn import bundled_digits_cnn

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LEVELS = [0.10, 0.30, 0.50]
METHODS = ["relative", "flat"]


def small_cnn(batch: int | str) -> onnx.ModelProto:
    """Conv 1->8, Relu, Conv 8->16, Relu, MaxPool, Gemm 256->10 on [batch, 1, 8, 8]; He-scaled seeded weights."""
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        scale = math.sqrt(2.0 / math.prod(shape[1:])) if len(shape) > 1 else 0.1
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    initializers = [
        weight("w1", 8, 1, 3, 3),
        weight("b1", 8),
        weight("w2", 16, 8, 3, 3),
        weight("b2", 16),
        weight("w3", 10, 256),
        weight("b3", 10),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture
def models(tmp_path: Path) -> list[Path]:
    """The CNN with a dynamic batch and with its batch fixed to 1, as files."""
    paths = [tmp_path / "cnn_dynamic.onnx", tmp_path / "cnn_batch1.onnx"]
    onnx.save(small_cnn("N"), str(paths[0]))
    onnx.save(small_cnn(1), str(paths[1]))
    return paths


@pytest.fixture
def labelled_npz(tmp_path: Path) -> Path:
    """64 random inputs labelled with the dense model's own argmax: a labelled set with 100% baseline."""
    inputs = np.random.default_rng(3).standard_normal((64, 1, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(small_cnn("N").SerializeToString(), providers=["CPUExecutionProvider"])
    labels = np.argmax(sess.run(None, {"x": inputs})[0], axis=1).astype(np.int64)
    path = tmp_path / "labelled.npz"
    np.savez(path, inputs=inputs, labels=labels)
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC), path
    assert b"matplotlib" in data[:4096], "matplotlib writes its name and version into the PNG's metadata"


def test_experiment_two_sweeps_every_model_method_and_level(models: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "results" / "two"  # created, parents included
    messages: list[str] = []
    settings = SparsityExperimentSettings(models=models, out=out, methods=METHODS, samples=64, levels=LEVELS)
    result = experiment_two(settings, progress=messages.append)

    names = ["experiment2_top1.png", "experiment2_top5.png", "experiment2.csv", "experiment2.md"]
    assert {p.name for p in result.paths} == {*names, "experiment2_settings.json"}
    for path in result.paths:
        assert path.is_file() and path.stat().st_size > 0
    assert_png(out / "experiment2_top1.png")
    assert_png(out / "experiment2_top5.png")

    rows = read_csv(out / "experiment2.csv")
    assert len(rows) == len(result.rows) == len(models) * len(METHODS) * len(LEVELS)
    assert {(r["model"], r["method"], float(r["level"])) for r in rows} == {
        (m.stem, method, level) for m in models for method in METHODS for level in LEVELS
    }
    targets = sparsity_targets(small_cnn("N"))
    rounding = len(targets) / sum(t.size for t in targets)  # at most half an element per layer each way
    for row in result.rows:
        assert row.kind == "fidelity"  # no data: agreement with the dense model's predictions
        assert abs(row.sparsity - row.level) <= rounding
        assert row.samples == 64
        assert math.isclose(row.drop1, row.baseline_top1 - row.top1)
        if row.level == 0.10:
            assert row.drop1 <= 0.10 and row.drop5 <= 0.05, row

    markdown = (out / "experiment2.md").read_text()
    assert markdown == result.markdown + "\n"
    assert "## cnn_dynamic" in markdown and "## cnn_batch1" in markdown
    assert "highest level whose top-5 drop stays inside 5 points" in markdown
    details = json.loads((out / "experiment2_settings.json").read_text())
    assert details["settings"]["levels"] == LEVELS and details["settings"]["budget"] == 0.05
    assert {"onnxruntime", "onnx", "numpy", "cpu_count"} <= set(details["environment"])
    assert [m["samples"] for m in details["models"]] == [64, 64]
    assert any("relative 30%" in line for line in messages)


def test_experiment_three_times_three_variants_inside_the_budget(
    models: list[Path], labelled_npz: Path, tmp_path: Path
) -> None:
    out = tmp_path / "three"
    settings = SparsityExperimentSettings(
        models=models, out=out, data=str(labelled_npz), samples=64, rounds=5, warmup=1, batch_size=16
    )
    result = experiment_three(settings, progress=lambda line: None)

    for name in ("experiment3.png", "experiment3.csv", "experiment3.md", "experiment3_settings.json"):
        assert (out / name).is_file()
    assert_png(out / "experiment3.png")
    assert len(read_csv(out / "experiment3.csv")) == len(result.rows) == 3 * len(models)

    facts = {fact["label"]: fact for fact in result.details["models"]}  # type: ignore[union-attr]
    for model in models:
        fact = facts[model.stem]
        rows = {r.variant: r for r in result.rows if r.model == model.stem}
        assert list(rows) == [DENSE, PRUNED, SPARSE]
        for row in rows.values():
            assert row.latency_median_ms > 0 and row.latency_p95_ms >= row.latency_median_ms
            assert row.throughput > 0 and math.isfinite(row.latency_ratio) and row.throughput_ratio > 0
            assert row.kind == "accuracy"
        assert fact["search_drop"] <= settings.budget
        assert abs(rows[PRUNED].drop - fact["search_drop"]) <= 2 / 64  # re-measured on the pruned model itself
        assert rows[PRUNED].sparsity == pytest.approx(fact["sparsity"]) and fact["sparsity"] > 0.10
        assert rows[SPARSE].sparsity == pytest.approx(rows[PRUNED].sparsity)
        assert fact["sparse_outputs_identical"]
        assert rows[SPARSE].bytes <= rows[PRUNED].bytes == rows[DENSE].bytes
        assert (rows[SPARSE].top1, rows[SPARSE].top5) == (rows[PRUNED].top1, rows[PRUNED].top5)
        assert rows[DENSE].latency_verdict == "baseline"
    assert facts["cnn_dynamic"]["throughput_batch"] == 16
    assert facts["cnn_batch1"]["throughput_batch"] == facts["cnn_batch1"]["latency_batch"] == 1
    assert "batch dim is fixed to 1" in result.markdown
    assert "converts sparse initializers to dense tensors" in result.markdown


def test_experiment_three_without_data_measures_fidelity(models: list[Path], tmp_path: Path) -> None:
    settings = SparsityExperimentSettings(models=models[:1], out=tmp_path, samples=32, rounds=3, warmup=1)
    result = experiment_three(settings, progress=lambda line: None)
    assert [r.kind for r in result.rows] == ["fidelity"] * 3
    assert result.details["models"][0]["search_drop"] <= settings.budget  # type: ignore[index]


@pytest.mark.skipif(not bundled_digits_cnn().is_file(), reason="the trained digits CNN is not committed yet")
def test_experiment_two_on_the_digits_cnn(tmp_path: Path) -> None:
    settings = SparsityExperimentSettings(
        models=[bundled_digits_cnn()], out=tmp_path, methods=["relative"], data="digits", samples=128, levels=LEVELS
    )
    result = experiment_two(settings, progress=lambda line: None)
    first = result.rows[0]
    assert first.kind == "accuracy" and first.baseline_top1 > 0.9 and first.drop1 <= 0.05


def test_user_errors_are_one_line(models: list[Path], tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError, match="not found"):
        experiment_two(SparsityExperimentSettings(models=[tmp_path / "missing.onnx"], out=tmp_path))
    with pytest.raises(SettingsError, match="unknown method 'magnitude'"):
        experiment_two(SparsityExperimentSettings(models=models, out=tmp_path, methods=["magnitude"]))
    with pytest.raises(SettingsError, match="unknown metric"):
        experiment_three(SparsityExperimentSettings(models=models, out=tmp_path, metric="top3"))
    with pytest.raises(SettingsError, match="--levels"):
        experiment_two(SparsityExperimentSettings(models=models, out=tmp_path, levels=[0.5, 1.0]))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(OutputPathError, match="--out"):
        experiment_two(SparsityExperimentSettings(models=models, out=blocker / "sub", levels=[0.1]))
