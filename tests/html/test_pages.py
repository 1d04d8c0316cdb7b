"""`--html` on every command: the pages are written by the real commands, then opened in headless
Chromium (one launch for all of them), which must find the tables and decode every picture."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from browser_check import open_pages

from onnxsat.cli import main
from onnxsat.html import Page, write_page
from onnxsat.html.sparsify import sparsify_page
from onnxsat.metrics import HeldOut, OutputScore, Score
from onnxsat.sparsity.methods import LayerSparsity
from onnxsat.sparsity.report import SparsifyReport
from onnxsat.verification import VerificationResult
from onnxsat.zoo.synthetic import demo_cnn

pytestmark = pytest.mark.xdist_group("html_pages")  # the pages and the browser run once, on one worker


def _score(value: float, baseline: float) -> Score:
    return Score((OutputScore("logits", "top1", value, baseline, {"top1": value, "top5": 1.0}),), 360, "accuracy")


def searched_sparsify_report() -> SparsifyReport:
    """A report with what only a budget search on labelled data fills in (accuracy, the search's trail)."""
    return SparsifyReport(
        input="digits.onnx",
        output="sparse.onnx",
        method="relative",
        requested=None,
        layers=[
            LayerSparsity("conv1.weight", "Conv", (8, 1, 3, 3), 0, 36, 0.05),
            LayerSparsity("fc.weight <b>", "Gemm", (10, 32), 0, 224, 0.08),
        ],
        overall=0.6,
        data="digits",
        metric="top1",
        baseline=_score(0.97, 0.97),
        accuracy=_score(0.955, 0.97),
        metrics={"logits": {"metric": "top1", "why": "auto: one score per class per sample ([10])"}},
        held_out=HeldOut("digits (held out)", _score(0.96, 0.96), _score(0.95, 0.96), 0.01, True),
        max_drop=0.02,
        search={
            "uniform": {"level": 0.5, "sparsity": 0.5, "drop": 0.01},
            "per_layer": {"levels": {}, "sparsity": 0.6, "drop": 0.015},
            "chosen": "per-layer",
            "evaluations": 12,
            "trail": [("uniform 0.500", 0.5, 0.01, True), ("uniform 0.700", 0.7, 0.05, False)],
        },
        sizes={"original": 10_000, "pruned": 10_000},
        verification=VerificationResult(ok=True),
        seconds=1.5,
        written=True,
    )


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every kind of page, written by its command (plus one with a broken picture, to prove the check)."""
    folder = tmp_path_factory.mktemp("pages")
    model = folder / "cnn.onnx"
    onnx.save(demo_cnn(), str(model))
    names = ("optimize", "sparsify", "prune", "quantize", "compress", "bench_prune")
    paths = {name: folder / f"{name}.html" for name in names}
    data = folder / "data.npz"
    np.savez(data, inputs=np.random.default_rng(0).standard_normal((8, 3, 64, 64)).astype(np.float32))
    paths |= {"bench_compare": folder / "bench_compare.html", "experiment": folder / "experiment.html"}
    commands = {
        "optimize": ["optimize", str(model), "-o", str(folder / "opt.onnx")],
        "sparsify": ["sparsify", str(model), "-o", str(folder / "sparse.onnx"), "--sparsity", "0.5"],
        "prune": ["prune", str(model), "-o", str(folder / "pruned.onnx"), "--rate", "0.5"],
        "quantize": ["quantize", str(model), "-o", str(folder / "q.onnx"), "--mode", "static", "--no-node-timing"],
        "compress": ["compress", str(model), "-o", str(folder / "c.onnx"), "--data", str(data), "--max-drop", "100%"],
        "bench_prune": ["bench", "prune", str(model), "--rates", "0.5", "--rounds", "2", "--no-reconstruct"],
        "bench_compare": ["bench", "compare", str(model), "--pairs", "2", "--warmup", "1"],
        "experiment": ["bench", "experiment", "2", "--models", str(model), "--samples", "16", "--levels", "0.3,0.6"],
    }
    commands["experiment"] += ["--out", str(folder / "experiment")]
    for name, command in commands.items():
        assert main([*command, "--html", str(paths[name])]) == 0, name
    paths["searched"] = folder / "searched.html"
    write_page(sparsify_page(searched_sparsify_report()), paths["searched"])
    broken = Page("broken on purpose")
    broken.image(b"these bytes are not a PNG", "image/png", alt="not a picture")
    paths["broken"] = folder / "broken.html"
    write_page(broken, paths["broken"])
    return paths


@pytest.fixture(scope="module")
def seen(pages: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    found = open_pages(list(pages.values()), tmp_path_factory.mktemp("browser"))
    return {name: found[path.name] for name, path in pages.items()}


def headers(page: dict[str, object]) -> set[str]:
    return {cell for table in page["tables"] for cell in table}  # type: ignore[union-attr]


def test_the_check_catches_a_broken_picture(seen: dict[str, dict[str, object]]) -> None:
    assert seen["broken"]["images"] == "1" and seen["broken"]["broken"] == "1"


def test_optimize_page(seen: dict[str, dict[str, object]]) -> None:
    page = seen["optimize"]
    assert page["title"] == "ONNXSat optimize"
    assert {"op type", "before", "after", "fusion", "e-classes", "max abs diff"} <= headers(page)
    graph_picture = 1 if shutil.which("dot") else 0
    assert page["images"] == str(1 + graph_picture) and page["broken"] == "0"
    assert "Graph before and after" in page["headings"]  # type: ignore[operator]


def test_sparsify_pages(seen: dict[str, dict[str, object]]) -> None:
    assert {"weight", "sparsity", "|w| cut"} <= headers(seen["sparsify"])
    assert seen["sparsify"]["images"] == "1" and seen["sparsify"]["broken"] == "0"
    searched = seen["searched"]
    assert {"output", "metric", "original", "result", "drop", "search", "tried", "within budget"} <= headers(searched)
    assert searched["images"] == "2" and searched["broken"] == "0"  # sparsity per layer, accuracy


def test_quantize_page(seen: dict[str, dict[str, object]]) -> None:
    page = seen["quantize"]
    assert {"mode", "quantized", "kept in float", "node", "op", "decision", "metric", "original", "result"} <= headers(
        page
    )
    assert page["images"] == "1" and page["broken"] == "0"  # accuracy before and after


def test_compress_page(seen: dict[str, dict[str, object]]) -> None:
    page = seen["compress"]
    assert {"stage", "recipe", "drop", "speedup", "front", "step", "speedup (cumulative)"} <= headers(page)
    assert "Speed against accuracy" in page["headings"]  # type: ignore[operator]
    assert page["images"] == "2" and page["broken"] == "0"  # the Pareto plot, accuracy before and after


def test_the_summary_gives_the_held_out_verdict(pages: dict[str, Path]) -> None:
    """Beside the speedup, the figure the search could not flatter, and whether the budget held there."""
    for name in ("compress", "searched"):
        text = pages[name].read_text(encoding="utf-8")
        fact = re.search(r"<dt>held out</dt><dd>([^<]*)</dd>", text)
        assert fact is not None, name
        assert "samples the search never used" in fact.group(1) and "(inside the budget)" in fact.group(1), name


def test_prune_page(seen: dict[str, dict[str, object]]) -> None:
    page = seen["prune"]
    assert {"measure", "original", "pruned", "group", "roots", "structure"} <= headers(page)
    assert page["images"] == "2" and page["broken"] == "0"


def test_a_lossy_page_claims_no_tolerance(pages: dict[str, Path]) -> None:
    """A pruned model's outputs moved on purpose (by 2.2 on a Keras CNN): its page said "verification PASSED:
    rtol 0.0001, atol 1e-05" beside them, each marked "ok"; the text report said what was checked."""
    for name in ("prune", "sparsify", "quantize", "compress"):
        text = pages[name].read_text()
        assert "verification PASSED" in text and "rtol" not in text, name
    assert ">changed<" in pages["prune"].read_text()
    assert "rtol" in pages["optimize"].read_text()  # a lossless result is held to the tolerance


def test_bench_pages(seen: dict[str, dict[str, object]]) -> None:
    prune = seen["bench_prune"]
    assert {"rate", "mode", "params", "MACs", "speedup", "rel. error"} <= headers(prune)
    assert prune["images"] == "3" and prune["broken"] == "0"  # kept, speedup, output error
    compare = seen["bench_compare"]
    assert {"variant", "median ms", "speedup", "verdict", "geometric mean speedup"} <= headers(compare)
    assert int(compare["images"]) == 2 and compare["broken"] == "0"  # per model, summary
    experiment = seen["experiment"]
    assert {"level", "relative sparsity"} <= headers(experiment)
    assert int(experiment["images"]) >= 1 and experiment["broken"] == "0"


def test_pages_are_self_contained(pages: dict[str, Path]) -> None:
    for name, path in pages.items():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"""(?:src|href)\s*=\s*["'](?!data:)""", text), name
        assert "<link" not in text and "url(" not in text and "@import" not in text, name


def test_names_from_a_model_are_escaped(pages: dict[str, Path]) -> None:
    text = pages["searched"].read_text(encoding="utf-8")
    assert "fc.weight &lt;b&gt;" in text and "fc.weight <b>" not in text


def test_html_path_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(demo_cnn(), str(model))
    before = model.read_bytes()
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(model), "-o", str(out), "--html", str(model)]) == 7
    assert main(["sparsify", str(model), "-o", str(out), "--sparsity", "0.5", "--html", str(out)]) == 7
    assert main(["prune", str(model), "-o", str(out), "--html", str(tmp_path / "missing" / "p.html")]) == 7
    assert main(["bench", "prune", str(model), "--html", str(model)]) == 7
    err = capsys.readouterr().err
    assert "is the input model itself" in err and "also an output of this command" in err
    assert model.read_bytes() == before and not out.exists()


def test_a_refused_result_still_gets_its_page(tmp_path: Path, failing_result_run: Callable[[str], None]) -> None:
    """The page is read most when verification refused the result: it is written then too, the model not."""
    failing_result_run("outputs differ (stand-in failure)")
    model, out, page = tmp_path / "model.onnx", tmp_path / "out.onnx", tmp_path / "refused.html"
    onnx.save(demo_cnn(), str(model))
    assert main(["sparsify", str(model), "-o", str(out), "--sparsity", "0.5", "--html", str(page)]) == 8
    assert "verification FAILED: outputs differ (stand-in failure)" in page.read_text(encoding="utf-8")
    assert not out.exists()
