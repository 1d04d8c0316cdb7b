"""The transformers benchmark's machinery on models that need neither torch nor transformers.

The real run (BERT, ViT, GPT-2, a tiny Llama) takes minutes and the zoo extra; here the same code
measures child processes, runs the peers in theirs and builds the table on the zoo's demo CNN.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxsat.bench import peers
from onnxsat.bench.compare import BASELINE, ONNXSAT_ALL, ONNXSAT_OFF, CompareSettings, compare_model, run_peer
from onnxsat.inputs import random_inputs
from onnxsat.verification import session
from tools.transformers_bench.child import run_child
from tools.transformers_bench.command import bench_model, model_bytes, report
from tools.transformers_bench.produce import produce_peer
from tools.transformers_bench.table import COLUMNS, markdown_table, rows

FAST = CompareSettings(threads=1, pairs=2, warmup=0)
MIB = 2**20


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_childs_time_and_peak_rss_are_its_own() -> None:
    touch = "b[::4096] = b'x' * len(b[::4096])"  # make the pages resident
    big = run_child(_python(f"import time; b = bytearray(300 * 2**20); {touch}; time.sleep(0.3)"))
    # The benchmark's own sessions hold gigabytes while it runs children: a child forked straight from it
    # would report the parent's memory as its own peak. Here the parent holds 400 MiB.
    held = bytearray(400 * MIB)
    held[::4096] = b"x" * len(held[::4096])
    small = run_child(_python("pass"))
    del held
    assert big.ok and small.ok
    assert big.seconds >= 0.3
    assert big.peak_rss_bytes >= 300 * MIB
    # Measured after the big one: a cumulative figure (RUSAGE_CHILDREN) would still say 300 MiB.
    assert 0 < small.peak_rss_bytes < 100 * MIB
    assert small.seconds < big.seconds


def test_a_failing_child_says_how() -> None:
    failed = run_child(_python("import sys; print('out'); sys.exit('went wrong')"))
    assert not failed.ok
    assert failed.exit_code == 1
    assert failed.stdout.strip() == "out"
    assert failed.failure() == "exit 1: went wrong"


def test_model_bytes_counts_external_data(cnn_file: Path, tmp_path: Path) -> None:
    model = onnx.load(str(cnn_file))
    external = tmp_path / "external.onnx"
    onnx.save_model(model, str(external), save_as_external_data=True, location="w.data", size_threshold=0)
    data = tmp_path / "w.data"
    assert data.stat().st_size > 0
    assert model_bytes(external) == external.stat().st_size + data.stat().st_size
    assert model_bytes(cnn_file) == cnn_file.stat().st_size


def test_compare_times_models_made_elsewhere_instead_of_making_them(cnn_file: Path) -> None:
    model = onnx.load(str(cnn_file))
    made = {"onnxsat": (model, 12.5), "elsewhere": "not installed (here on purpose)"}
    registry = {"elsewhere": peers.onnxsim_simplify}
    comparison = compare_model(cnn_file, FAST, registry, "cnn", made)
    onnxsat = comparison.variant(ONNXSAT_ALL)
    assert onnxsat is not None and onnxsat.timed
    assert onnxsat.optimize_seconds == 12.5  # the given seconds: ONNXSat did not run in this process
    assert onnxsat.nodes == len(model.graph.node)
    skipped = comparison.variant("elsewhere, ORT all")
    assert skipped is not None and skipped.status == "skipped"
    assert skipped.reason == "not installed (here on purpose)"


@pytest.fixture(scope="module")
def demo_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """bench_model on the zoo's demo CNN: ONNXSat and both peers in their own children."""
    from onnxsat.zoo.synthetic import demo_cnn

    folder = tmp_path_factory.mktemp("demo")
    path = folder / "demo_cnn.onnx"
    onnx.save(demo_cnn(), str(path))
    work = tmp_path_factory.mktemp("work")
    return bench_model(path, CompareSettings(threads=1, pairs=2, warmup=0), work), path


def test_table_has_a_row_per_tool_with_measured_figures(demo_bench: tuple) -> None:
    bench, path = demo_bench
    assert bench.file_bytes == path.stat().st_size
    table = rows(bench)
    assert [row[2] for row in table] == ["original", "onnxsat", "ort-transformers", "onnxslim"]
    assert all(len(row) == len(COLUMNS) for row in table)
    original, onnxsat, ort_transformers, onnxslim = table
    assert original[:2] == ["demo_cnn", f"{path.stat().st_size / 1e6:.0f}"]
    assert original[7] == "1 (baseline)" and original[8].startswith("ok")
    # ONNXSat: child wall time with its own optimization in brackets, RSS as MB and x file, its e-graph.
    seconds, own = onnxsat[3].rstrip(")").split(" (")
    assert float(seconds) > float(own) > 0
    assert onnxsat[4].endswith("x)") and float(onnxsat[4].split()[0]) > 10  # a Python process is over 10 MB
    assert "→" in onnxsat[5] and "it," in onnxsat[5]
    assert float(onnxsat[6]) > 0 and "x (" in onnxsat[7]
    assert onnxsat[8].startswith("ok (")
    # ORT's transformers optimizer has nothing to fuse in a CNN: a row with its reason, not a crash.
    assert ort_transformers[7].startswith("skipped: not a transformer")
    assert ort_transformers[3:5] == ["-", "-"]  # it only imported its package: no figures to show
    if onnxslim[7].startswith("skipped"):
        assert "not installed" in onnxslim[7]
    else:
        assert onnxslim[8].startswith("ok (") and onnxslim[5] == "-"
    produced = {p.source: p for p in bench.produced}
    assert produced["onnxsat"].run.peak_rss_bytes > 10 * 2**20
    assert produced["onnxsat"].report["egraph"]["enodes_after"] > 0


def test_report_lists_goals_means_phases_and_noise(demo_bench: tuple) -> None:
    bench, _ = demo_bench
    text = report([bench], FAST, ("ort-transformers", "onnxslim"))
    table = markdown_table([bench])
    assert table[0] == "| " + " | ".join(COLUMNS) + " |"
    assert len(table) == 2 + 4
    assert all(line in text for line in table)
    assert "demo_cnn: optimize " in text and "< 10 s" in text and "< 1.5x" in text
    assert "onnxsat: geometric mean of the speedup vs ORT all over demo_cnn:" in text
    assert "ort-transformers: not timed on any of demo_cnn" in text
    assert "demo_cnn: load " in text and "saturate " in text
    assert "noise: a second session of the original" in text
    assert bench.comparison.onnxsat_ok
    assert bench.comparison.variant(BASELINE).timed and bench.comparison.variant(ONNXSAT_OFF).timed


def test_onnxslim_peer_keeps_the_outputs(cnn_file: Path) -> None:
    pytest.importorskip("onnxslim")
    model = onnx.load(str(cnn_file))
    slimmed, seconds = run_peer(peers.PEERS["onnxslim"], model)
    assert seconds >= 0
    assert isinstance(slimmed, onnx.ModelProto) and len(slimmed.graph.node) <= len(model.graph.node)
    feeds = random_inputs(model, seed=3)
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = session(model, off).run(None, feeds)
    actual = session(slimmed, off).run(None, feeds)
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


def test_a_peer_that_is_not_installed_is_a_reason_not_a_crash(
    cnn_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "blocked"
    (blocked / "onnxslim").mkdir(parents=True)
    (blocked / "onnxslim" / "__init__.py").write_text("raise ImportError('onnxslim blocked for this test')\n")
    monkeypatch.setenv("PYTHONPATH", str(blocked))  # the child finds this onnxslim first (onnxsat: the parent's)
    produced = produce_peer("onnxslim", cnn_file, tmp_path)
    assert produced.path is None and produced.run is not None and produced.run.ok
    assert produced.reason == "not installed (onnxslim blocked for this test; pip install 'onnxsat[bench]')"
    assert not (tmp_path / f"{cnn_file.stem}.onnxslim.onnx").exists()
