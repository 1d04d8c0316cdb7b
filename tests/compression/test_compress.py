"""``onnxsat compress``: the search writes a model inside the budget with its recipe, the recipe replays
into the same model, the search is the same on every executor given the same timings, and bad input or a
budget nothing meets is one line with nothing written."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import yaml

from onnxsat.cli import main
from onnxsat.compression import compress as compress_module
from onnxsat.compression.compress import CompressOptions, compress_model
from onnxsat.compression.evaluate import Outcome
from onnxsat.compression.recipe import Recipe
from onnxsat.compression.report import CandidateRow, mark_pareto
from onnxsat.compression.search import FUSED_ORIGINAL, Evaluated, Search, SearchSettings
from onnxsat.compression.timing import Timed
from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec
from onnxsat.normal_form import with_restated_inputs
from onnxsat.quantization.quantize import NodeTimes, QuantizeOptions
from onnxsat.zoo.digits_cnn import bundled_digits_cnn

QUICK = ["--data", "digits-train", "--limit", "400", "--eval-data", "digits-test", "--workers", "2"]


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The digits CNN with its weights listed as graph inputs too, as old tf2onnx exports list them."""
    folder = tmp_path_factory.mktemp("compress")
    out, report, given = folder / "small.onnx", folder / "report.json", folder / "as_given.onnx"
    cnn = onnx.load(bundled_digits_cnn())
    onnx.save(with_restated_inputs(cnn, [t.name for t in cnn.graph.initializer]), given)
    code = main(["compress", str(given), "-o", str(out), "--report", str(report), "--max-drop", "1%", *QUICK])
    assert code == 0
    return out, json.loads(report.read_text())


def test_the_chosen_model_is_inside_the_budget_and_measured_on_held_out_data(compressed: tuple[Path, dict]) -> None:
    out, report = compressed
    assert out.exists() and report["written"]
    assert report["accuracy"]["drop"] <= 0.01
    assert report["confidence"] == 0.99  # compress compares dozens of candidates: a stricter default
    inside = [row for row in report["candidates"] if row["within_budget"]]
    assert inside and all(row["drop"] <= row["bound"] <= 0.01 for row in inside)
    assert report["held_out"]["data"].startswith("digits-test") and report["held_out"]["score"]["samples"] == 397
    assert report["chosen"] != "original" and report["latency"]["speedup"] > 0
    stages = {row["stage"] for row in report["candidates"]}
    assert {"sensitivity", "prune"} <= stages
    fused = [row for row in report["candidates"] if row["stage"] == "fuse"]
    assert "fuse" in [row["label"] for row in fused]  # the original fused alone: lossless, inside any budget
    assert fused[-1]["drop"] == 0.0
    assert any(row["pareto"] for row in report["candidates"])
    assert report["verification"]["ok"]
    assert "fit_data" not in report
    # pruning refits on 200 of the 400 search digits, and candidates are scored on the other 200 alone
    assert report["fitted_on"] == "digits-train (fit part): 200 samples, none of them scored"
    assert report["accuracy"]["samples"] == 200 and report["data"].endswith("(scored part)")
    assert report["latency_where"] and report["evaluated_on"].startswith("local process pool")
    # the original above reads the weights as constants; the file as given has them as inputs, timed too
    assert report["latency"]["speedup_vs_file"] > 0 and report["latency"]["file_ms"] > 0
    given = "against the file as given, whose 8 weights are graph inputs"
    assert any(note.startswith(given) for note in report["notes"])


def test_the_recipe_replays_into_the_same_model(compressed: tuple[Path, dict], tmp_path: Path) -> None:
    out, report = compressed
    recipe = out.with_name("small.recipe.yaml")
    assert recipe.exists() and out.with_name("small.recipe.npz").exists()
    assert report["recipe_path"] == str(recipe)
    replay = tmp_path / "replay.onnx"
    assert main(["run", str(recipe), "-o", str(replay)]) == 0
    assert onnx.load(replay).SerializeToString() == onnx.load(out).SerializeToString()
    with np.load(out.with_name("small.recipe.npz")) as searched:
        assert len(searched["inputs"]) == 400  # every search sample: quantization calibrates on them
    if any(entry["type"] == "prune" for entry in report["recipe"]):
        with np.load(out.with_name("small.recipe.fit.npz")) as fitted:
            assert len(fitted["inputs"]) == 200  # the fit part, which pruning refits on, and nothing scored


def test_the_html_page_has_the_pareto_plot(tmp_path: Path) -> None:
    out, page = tmp_path / "m.onnx", tmp_path / "page.html"
    args = ["compress", str(bundled_digits_cnn()), "-o", str(out), "--html", str(page), "--techniques", "prune"]
    assert main([*args, "--max-drop", "2%", *QUICK]) == 0
    html = page.read_text()
    assert "Speed against accuracy" in html and "data:image/png;base64" in html and "Every candidate" in html


class _SizeTimer:
    """Timings that depend on the model alone (smaller is faster): the search's choices become a function
    of accuracy and size, so two executors must agree exactly."""

    def __init__(self, original: onnx.ModelProto, feeds: object, threads: int, seconds: float | None = None) -> None:
        self.size = original.ByteSize()

    def expected_seconds(self) -> float:
        return 0.0

    def run_limit(self) -> None:
        return None

    def measure(self, models: list[bytes]) -> list[Timed]:
        return [
            Timed(self.size / len(m), len(m) / 1e6, self.size / 1e6, self.size / len(m), self.size / len(m))
            for m in models
        ]


def _searches(monkeypatch: pytest.MonkeyPatch, executors: list[dict]) -> list:
    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    model = onnx.load(bundled_digits_cnn())
    reports = []
    for executor in executors:
        options = CompressOptions(data="digits-train", limit=300, max_drop=0.01, techniques=["prune"], **executor)
        reports.append(compress_model(model, options)[1])
    return reports


def _same_search(reports: list) -> None:
    first, second = ([(c.stage, c.label, c.drop, c.size) for c in r.candidates] for r in reports)
    assert first == second
    assert reports[0].chosen == reports[1].chosen and reports[0].recipe == reports[1].recipe


def test_serial_and_process_pool_searches_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    _same_search(_searches(monkeypatch, [{"workers": 1}, {"workers": 2}]))


def test_a_local_ray_with_two_workers_finds_the_same_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    reports = _searches(monkeypatch, [{"workers": 2}, {"workers": 2, "ray": "auto"}])
    assert reports[1].evaluated_on.startswith("Ray (local, 2 CPUs)")
    _same_search(reports)


def test_a_worker_keeps_no_files_between_candidates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Ray ends its workers without their exit handlers: data files kept for the next candidate would be left
    in each worker's temporary directory (two per Ray search, found in /tmp)."""
    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    options = CompressOptions(data="digits-train", limit=200, max_drop=0.01, workers=1, techniques=["prune"])
    report = compress_model(onnx.load(bundled_digits_cnn()), options)[1]
    assert len(report.candidates) > 1
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_candidates_that_quantize_the_original_share_its_reference_run_and_are_not_timed_in_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each candidate quantizing the original ran the original over the calibration samples again, and timed its
    result on cores the other workers shared (25 and 27 of a YOLOv8-seg candidate's 160 s); the driver times every
    candidate itself. Now the original runs over the data once in the driver, once per worker and once for the
    held-out score, however many candidates quantize it, and no worker times anything."""
    from onnxsat.metrics import scorer as scorer_module
    from onnxsat.quantization import quantize as quantize_module

    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    made = []
    original_init = scorer_module.ModelScorer.__init__

    def counted(self: object, *args: object, **kwargs: object) -> None:
        made.append(args[0])
        original_init(self, *args, **kwargs)  # type: ignore[arg-type]

    def untimed(*args: object) -> None:
        raise AssertionError("a worker timed a candidate")

    monkeypatch.setattr(scorer_module.ModelScorer, "__init__", counted)
    monkeypatch.setattr(quantize_module, "_latency", untimed)
    options = CompressOptions(
        data="digits-train", limit=120, eval_data="digits-test", max_drop=0.02, workers=1, techniques=["quantize"]
    )
    report = compress_model(onnx.load(bundled_digits_cnn()), options)[1]
    quantized = [c for c in report.candidates if c.label.startswith("int8")]
    assert len(quantized) >= 2, [c.label for c in report.candidates]
    assert len(made) == 3, "the driver's scorer, the worker's, the held-out one"


def test_the_time_budget_stops_the_search_between_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline is checked before each candidate starts (here it passes after the sensitivity stage has
    started two probes: one check for the stage, one per candidate)."""
    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    checks = iter([True, True, True])

    def deadline(self: Search) -> bool:
        self.stopped_early = not next(checks, False)
        return not self.stopped_early

    monkeypatch.setattr(Search, "_time_left", deadline)
    options = CompressOptions(data="digits-train", limit=200, workers=1, techniques=["prune"])
    with pytest.raises(SettingsError, match=r"--budget-minutes ran out after 2 candidates"):
        compress_model(onnx.load(bundled_digits_cnn()), options)


def _paced_search(
    deadline_in: float, seconds: dict[str, list[float]], timing: float = 0.0, limit: float | None = None
) -> Search:
    """A search with candidates of the given stages and build seconds already evaluated, ``deadline_in``
    seconds before its deadline; its timer's runs take at most ``limit`` seconds."""
    settings = SearchSettings(0.01, {"g": (32, 8)}, [], True, time.monotonic() + deadline_in)
    problem = SimpleNamespace(model=onnx.load(bundled_digits_cnn()).SerializeToString())
    timer = SimpleNamespace(run_limit=lambda: limit)
    search = Search(problem, settings, None, timer, lambda model, mode: {})  # type: ignore[arg-type]
    search._best = Evaluated("original", Outcome(Recipe()))
    for stage, values in seconds.items():
        for number, value in enumerate(values):
            recipe = FUSED_ORIGINAL if stage == "fuse" else Recipe.pruned({stage: 0.1 * (number + 1)})
            search._cache[recipe] = Evaluated(stage, Outcome(recipe, seconds=value))
            search.evaluated.append(search._cache[recipe])
    search._timing_seconds = timing
    return search


def test_a_candidate_starts_only_if_it_ends_before_finishing_must_begin() -> None:
    """At its stage's pace (the median of its build times so far; of every candidate before the stage's
    first), a candidate must end before the deadline less the time finishing takes: fusing the best (1.25x the
    fused original's build, scaled by the best's node count) and the final timings (each as long as a timed
    model took)."""
    # 100 s left; fusing the original again will take 1.25 x 20 s: a 70 s probe fits, an 80 s one does not
    assert _paced_search(100, {"fuse": [20.0], "sensitivity": [60.0, 70.0, 70.0]})._admits("sensitivity")
    assert not _paced_search(100, {"fuse": [20.0], "sensitivity": [80.0]})._admits("sensitivity")
    # a stage's first candidate goes at the pace of all before it: median(20, 100) = 60 s
    assert _paced_search(100, {"fuse": [20.0], "quantize": [100.0]})._admits("refine")
    assert not _paced_search(100, {"fuse": [20.0], "quantize": [100.0, 120.0]})._admits("refine")
    # the final timings: 11 timed models at 5 s each take 55 s more from the 75 s left
    assert not _paced_search(100, {"fuse": [20.0], "sensitivity": [50.0]}, timing=5.0)._admits("sensitivity")
    # unless a timing run is limited: runs of 2, 4 and 3 models take 10, 12 and 12 s, the scoring 10 s more
    limited = _paced_search(100, {"fuse": [20.0], "sensitivity": [30.0]}, timing=5.0)
    assert not limited._admits("sensitivity")
    limited = _paced_search(100, {"fuse": [20.0], "sensitivity": [30.0]}, timing=5.0, limit=12.0)
    assert limited._reserve() == pytest.approx(25 + 34 + 10) and limited._admits("sensitivity")
    search = _paced_search(10, {"fuse": [20.0]})
    assert not search._time_left() and search.stopped_early, "finishing alone fills what is left"
    search = _paced_search(100, {"fuse": [20.0], "sensitivity": [80.0]})
    assert search._time_left() and not search._admits("sensitivity")
    assert not search._time_left() and search.stopped_early, "a refusal ends the search (no loop asking again)"
    # a best with three times the original's nodes (a quantized form) takes three times as long to fuse: 75 s
    search = _paced_search(100, {"fuse": [20.0], "sensitivity": [30.0]})
    assert search._admits("sensitivity")
    grown = onnx.load(bundled_digits_cnn())
    grown.graph.node.extend(list(grown.graph.node) * 2)
    search._best = Evaluated("quantize", Outcome(Recipe(), model=grown.SerializeToString()))
    assert not search._admits("sensitivity")


def test_candidates_still_running_when_the_time_is_out_are_stopped_and_named() -> None:
    """A YOLOv8-seg model's first two candidates (160 s each, with nothing before them to foretell it) made a
    2-minute search take 6. A bounded batch now gives the executor the time after which finishing must begin;
    what it stopped is kept as unfinished, the search ends, and the report and the error line name them."""
    search = _paced_search(100, {"fuse": [20.0]})
    asked: list[float | None] = []

    class StoppingExecutor:
        def map(
            self, fn: object, tasks: list, on_result: object = None, admit: object = None, deadline: float | None = None
        ) -> list:
            asked.append(deadline)
            return [None for index in range(len(tasks)) if admit(index)]  # type: ignore[operator]

    search.executor = StoppingExecutor()  # type: ignore[assignment]
    probes = [Recipe.pruned({"g": 0.5}), Recipe.pruned({"g": 0.25})]
    assert search.batch("sensitivity", probes) == []
    assert asked == [pytest.approx(search._soft_deadline(), abs=1.0)]
    assert search.cut == probes and search.stopped_early and not search._time_left()
    assert compress_module._unfinished(search).startswith("2 more were stopped unfinished when the time ran out (")
    search.batch("fuse", [FUSED_ORIGINAL], bounded=False)
    assert asked[-1] is None, "the best is fused whatever the time"


def test_random_data_at_dynamic_sizes_of_one_is_said() -> None:
    """``--data random`` on a sequence model ran every candidate on one-step sequences, silently."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    options = CompressOptions(data="random", workers=1, techniques=["fuse"], budget_minutes=1)
    try:
        _, report = compress_model(model, options)
    except SettingsError as error:  # a lone MatMul fused is no faster: the report comes with the refusal
        report = error.report
    assert any(note.startswith("x ran at [1, 8] per sample (its dynamic sizes at 1)") for note in report.notes)


def test_the_fused_original_is_tried_even_when_the_time_budget_is_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search whose stages used up the budget (a diffusion UNet's two quantized candidates took it all)
    still fuses the best it has: lossless, one optimize run, and it may be all that fits."""
    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)

    def out_of_time(self: Search) -> bool:
        self.stopped_early = True
        return False

    monkeypatch.setattr(Search, "_time_left", out_of_time)
    options = CompressOptions(data="digits-train", limit=200, workers=1, techniques=["prune", "fuse"])
    try:
        _, report = compress_model(onnx.load(bundled_digits_cnn()), options)
    except SettingsError as error:  # the fused net may be no smaller, so no faster by this timer
        report = error.report
    assert [(row.stage, row.label) for row in report.candidates] == [("fuse", "fuse")]


def test_a_budget_nothing_meets_writes_nothing_and_names_the_closest(
    tmp_path: Path, cnn_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A net with random weights: removing any channel changes some output, so nothing is exact. What was
    tried is still shown, and written where --report and --html say (it was lost before)."""
    out, data = tmp_path / "m.onnx", tmp_path / "data.npz"
    report, page = tmp_path / "r.json", tmp_path / "r.html"
    np.savez(data, inputs=np.random.default_rng(0).standard_normal((16, 3, 64, 64)).astype(np.float32))
    args = ["compress", str(cnn_file), "-o", str(out), "--techniques", "prune", "--metric", "exact"]
    code = main([*args, "--max-drop", "0%", "--data", str(data), "--workers", "2", "--report", str(report)])
    printed = capsys.readouterr()
    err = printed.err.strip()
    assert code == 15 and not out.exists() and not out.with_name("m.recipe.yaml").exists()
    assert "no candidate fits the 0.00% budget (closest: prune" in err and "Traceback" not in err
    written = json.loads(report.read_text())
    assert not written["written"] and written["chosen"] is None and written["candidates"]
    assert all(not row["within_budget"] for row in written["candidates"])
    assert "(over the budget)" in printed.out and "chosen: nothing" in printed.out
    pytest.importorskip("matplotlib")
    main([*args, "--max-drop", "0%", "--data", str(data), "--workers", "2", "--html", str(page)])
    assert "Every candidate" in page.read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--techniques", "distill"], "--techniques: unknown technique 'distill'"),
        (["--max-drop", "150%"], "--max-drop must be in [0%, 100%]"),
        (["--latency-batch", "0"], "--latency-batch must be at least 1"),
        (["--confidence", "0.3"], "--confidence must be in [0.5, 1)"),
        (["--budget-minutes", "nan"], "--budget-minutes must be positive, got nan"),  # passed `<= 0`
    ],
)
def test_bad_settings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    out = tmp_path / "m.onnx"
    code = main(["compress", str(bundled_digits_cnn()), "-o", str(out), "--data", "digits-train", *extra])
    err = capsys.readouterr().err.strip()
    assert code != 0 and not out.exists() and message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_data_is_required(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    assert main(["compress", str(bundled_digits_cnn()), "-o", str(out)]) != 0
    assert "compress needs --data" in capsys.readouterr().err and not out.exists()
    # samples given as --inputs (quantize calibrates on them) are named, with the way to search on them
    model = onnx.load(bundled_digits_cnn())
    name = model.graph.input[0].name
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, **{name: np.zeros((4, 1, 8, 8), np.float32)})
    assert main(["compress", str(bundled_digits_cnn()), "-o", str(out), "--inputs", str(feeds)]) != 0
    err = capsys.readouterr().err
    assert f"--inputs fixes the values of '{name}' for every sample" in err and "save them as `inputs`" in err


def test_recipe_labels_and_pipeline_entries() -> None:
    recipe = Recipe.pruned({"conv2": 0.5, "conv1": 0.25, "fc": 0.0}).with_quantize("static", None, ("b", "a"))
    assert recipe.prune == (("conv1", 0.25), ("conv2", 0.5)) and recipe.keep_float == ("a", "b")
    assert recipe.label == "prune 25% x1, 50% x1 (2 groups) + int8 static (2 in float)"
    assert Recipe.pruned({"a": 0.75, "b": 0.875, "c": 0.75}).label == "prune 75% x2, 87.5% x1 (3 groups)"
    assert Recipe.pruned({"conv1": 0.5}).label == "prune 50% (conv1)"
    fused = ";".join(["model_1/re_lu_2/Relu", "model_1/re_lu_2/Relu", "model_1/conv2d_2/BiasAdd"] * 3)  # tf2onnx's
    long = Recipe.pruned({fused: 0.5})
    assert long.label == f"prune 50% ({fused[:45]}...)" and long.passes()[0]["rates"] == {fused: 0.5}
    passes = recipe.passes("data.npz")
    assert [p["type"] for p in passes] == ["prune", "quantize"]
    assert passes[0]["rates"] == {"conv1": 0.25, "conv2": 0.5} and passes[1]["exclude"] == ["a", "b"]
    assert passes[1]["max_drop"] is None and passes[1]["node_timing"] is False
    assert Recipe().label == "original" and Recipe(fuse=True).passes("d") == [{"type": "eqsat", "target": "ort"}]


def test_the_pareto_front_keeps_candidates_nothing_beats_on_both() -> None:
    rows = [
        CandidateRow(1, "prune", "a", {}, value=0.99, speedup=1.5),
        CandidateRow(2, "prune", "b", {}, value=0.98, speedup=2.0),
        CandidateRow(3, "prune", "c", {}, value=0.97, speedup=1.8),  # beaten by b on both
        CandidateRow(4, "prune", "d", {}, value=0.90),  # never timed
    ]
    mark_pareto(rows)
    assert [r.pareto for r in rows] == [True, True, False, False]


def test_a_candidates_quantization_search_gets_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quantization's node search inside a candidate is limited to the search's time left (never less than
    a minute), not its own 20-minute default, so one candidate cannot run far past --budget-minutes."""
    from onnxsat.compression import recipe as recipe_module

    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    # one form to quantize in (no node measured slower or barely faster): it is built with the budget's search,
    # where several would be built whole first and the winner, if inside the budget, kept as it is
    monkeypatch.setattr(compress_module, "slower_nodes", lambda *args: NodeTimes((), (), 2))
    given: list[float] = []
    real = recipe_module.quantize_model

    def quantize(model: onnx.ModelProto, options: QuantizeOptions, **kwargs: object) -> object:
        if options.max_drop is not None:  # searching (a replay of a found recipe searches nothing)
            given.append(options.budget_minutes)
        return real(model, options, **kwargs)

    monkeypatch.setattr(recipe_module, "quantize_model", quantize)
    options = CompressOptions(
        data="digits-train", limit=200, workers=1, techniques=["quantize"], budget_minutes=3, max_drop=0.01
    )
    # whether a quantized candidate pays is measured, so on a busy machine the search may write nothing
    with contextlib.suppress(SettingsError):
        compress_model(onnx.load(bundled_digits_cnn()), options)
    assert given and all(1.0 <= minutes < 3.0 for minutes in given)


def test_the_workers_keep_the_runtimes_own_warnings_off_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The digits CNN with its output declared [7, 3] (it makes [N, 10]): ORT warns on every run of it. The
    worker processes, which calibrate candidates in ORT's quantizer, keep those lines off stderr like the
    driver."""
    model = onnx.load(bundled_digits_cnn())
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for size in (7, 3):
        dims.add().dim_value = size
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    args = ["--data", "digits-train", "--limit", "200", "--techniques", "quantize", "--workers", "2"]
    main(["compress", str(path), "-o", str(tmp_path / "out.onnx"), "--max-drop", "100%", *args])
    err = capfd.readouterr().err
    assert "onnxruntime" not in err, err[:300]


def test_a_speedup_inside_the_noise_writes_nothing() -> None:
    """On a model with nothing to compress, a 1.03x whose interval reaches below 1 is noise: written on one
    run and not the next, before. Only a speedup whose interval clears the original is written."""
    from onnxsat.compression.compress import _faster, _pays
    from onnxsat.compression.evaluate import Outcome
    from onnxsat.compression.search import Evaluated

    def candidate(speedup: float, low: float, size: int = 1000) -> Evaluated:
        return Evaluated("fuse", Outcome(Recipe(fuse=True), model=b"m", size=size), Timed(speedup, 1.0, 1.0, low, 1.1))

    assert not _pays(candidate(1.03, 0.99), 1000)
    assert _pays(candidate(1.03, 1.01), 1000)
    assert _pays(candidate(0.99, 0.95, size=800), 1000)  # as fast and smaller...
    assert not _faster(candidate(0.99, 0.95, size=800))  # ...which the report says: written for its size
    assert not _pays(candidate(0.95, 0.90, size=800), 1000)


def test_a_candidate_whose_drop_fits_only_by_luck_is_over_the_budget() -> None:
    """Inside the budget means the drop plus its sampling error at --confidence: a 0.4% drop that 60
    samples changing both ways netted is not inside 0.5%; the same drop from 4 lost samples is."""
    from onnxsat.compression.evaluate import Outcome
    from onnxsat.compression.search import Evaluated, Search, SearchSettings
    from onnxsat.metrics import OutputScore, Score

    def outcome(error: float) -> Outcome:
        score = Score((OutputScore("logits", "top1", 0.986, 0.99, error=error),), 1000, "accuracy", z=1.2816)
        return Outcome(Recipe.pruned({"conv": 0.5}), score, model=b"m", size=10)

    search = Search.__new__(Search)
    search.settings = SearchSettings(0.005, {"conv": (32, 8)}, [], False, 0.0)
    lucky, pinned = outcome(error=0.0024), outcome(error=0.0006)
    assert lucky.drop == pytest.approx(pinned.drop) == pytest.approx(0.004)
    assert not search._within(Evaluated("prune", lucky)) and search._within(Evaluated("prune", pinned))
    rows = compress_module._rows([Evaluated("prune", lucky)], 0.005)
    assert not rows[0].within_budget and rows[0].bound == pytest.approx(0.004 + 1.2816 * 0.0024)


def test_nothing_written_names_the_faster_candidate_that_only_the_sampling_error_kept_out() -> None:
    """A YOLO classifier on 13 samples: its int8 form ran 1.43x and changed no answer, but one changed answer is
    7.7% there, so its bound was over a 1% budget; the error line named only a 0.96x candidate inside it."""
    from onnxsat.compression.evaluate import Outcome
    from onnxsat.compression.search import Evaluated
    from onnxsat.compression.timing import Timed
    from onnxsat.metrics import OutputScore, Score

    def evaluated(label: Recipe, speedup: float, error: float) -> Evaluated:
        score = Score((OutputScore("output0", "top1", 1.0, 1.0, error=error),), 13, "agreement", z=2.326)
        return Evaluated("quantize", Outcome(label, score, model=b"m", size=10), Timed(speedup, 1.0, 1.0, 0.9, 1.1))

    dynamic = evaluated(Recipe().with_quantize("dynamic", 0.01), 0.96, 0.0)
    static = evaluated(Recipe().with_quantize("static", 0.01), 1.43, 0.044)
    said = compress_module._nothing_fits([dynamic, static], 0.01, dynamic)
    assert said.startswith("no candidate inside the 1.00% budget is faster than the original beyond the timing noise")
    assert "; the fastest outside it: int8 static, 1.43x, drop 0.00%, up to 10.23% within the sampling error" in said
    assert said.endswith("(more --data narrows that); nothing written")
    assert "fastest outside" not in compress_module._nothing_fits([dynamic], 0.01, dynamic)


def test_a_group_never_pruned_is_reported_by_its_bound() -> None:
    """The probe's figure held against the budget is the drop's bound, and the note says so."""
    line = compress_module._costly_line("c", 0.2, 0.99)
    assert line == "c: pruned alone at 50%, its drop bound is 20.00% (99% confidence), over the budget: never pruned"
    assert compress_module._costly_line("g", float("inf"), 0.99) == "g: pruned alone at 50%, it failed: never pruned"
    unprobed = compress_module._costly_line("g", float("inf"), 0.99, unprobed=True)
    assert unprobed == "g: never pruned: the time budget ran out before it was pruned alone at 50%"
    lower = compress_module._costly_line("c", 0.2, 0.99, rate=0.25)  # refinement found a lower rate that fits
    assert lower.endswith("over the budget: the chosen model prunes it at 25% only")
    same = compress_module._costly_line("c", 0.2, 0.99, rate=0.5)  # "at 50% only" was said of the probe's own rate
    assert same.endswith("the chosen model still prunes it at 50%, where the whole model is inside the budget")


def test_a_model_nothing_can_prune_says_so() -> None:
    """A jax2onnx ViT with a dynamic batch had no prunable group: compress searched the rest and never said
    why pruning was missing from every candidate."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxsat.compression.report import CompressReport

    weight = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="head")],
        "head_only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    report = CompressReport(input="m.onnx", output=None, max_drop=0.01)
    assert compress_module._groups(model, CompressOptions(), report) == {}
    (note,) = report.notes
    assert note.startswith("pruning left out: no channel group can be pruned (") and "onnxsat prune" in note


def _two_towers() -> onnx.ModelProto:
    """Embeddings ``[N, 64]`` and, as CLIP's ``logits_per_image``, their similarities ``[N, N]``: an output
    with no single batch axis, which only ``--metric-output`` keeps out of the score."""
    rng = np.random.default_rng(0)
    w1 = onnx.numpy_helper.from_array((rng.normal(size=(128, 256)) * 0.1).astype(np.float32), "w1")
    w2 = onnx.numpy_helper.from_array((rng.normal(size=(256, 64)) * 0.1).astype(np.float32), "w2")
    nodes = [
        onnx.helper.make_node("MatMul", ["x", "w1"], ["h"]),
        onnx.helper.make_node("Relu", ["h"], ["r"]),
        onnx.helper.make_node("MatMul", ["r", "w2"], ["embeds"]),
        onnx.helper.make_node("Transpose", ["embeds"], ["t"], perm=[1, 0]),
        onnx.helper.make_node("MatMul", ["embeds", "t"], ["logits"]),
    ]
    float_tensor = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(
        nodes,
        "towers",
        [onnx.helper.make_tensor_value_info("x", float_tensor, ["n", 128])],
        [
            onnx.helper.make_tensor_value_info("embeds", float_tensor, ["n", 64]),
            onnx.helper.make_tensor_value_info("logits", float_tensor, ["n", "n"]),
        ],
        [w1, w2],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)


def test_named_metric_outputs_reach_the_rebuild_and_the_replay(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The chosen recipe is built again for the report, and by ``onnxsat run``; both quantize with no budget,
    and scored every output there: "the chosen recipe could not be rebuilt" on CLIP after a whole search."""
    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    monkeypatch.setattr(compress_module, "slower_nodes", lambda *args: NodeTimes((), (), 2))  # none measured slower
    model_path, out = tmp_path / "towers.onnx", tmp_path / "c.onnx"
    onnx.save(_two_towers(), model_path)
    args = ["--data", "random", "--metric", "cosine", "--metric-output", "embeds", "--techniques", "quantize"]
    assert main(["compress", str(model_path), "-o", str(out), "--max-drop", "5%", "--workers", "1", *args]) == 0
    recipe = yaml.safe_load(out.with_name("c.recipe.yaml").read_text())
    (quantize,) = recipe["passes"]
    assert quantize["metric"] == "cosine" and quantize["metric_output"] == ["embeds"]
    replay = tmp_path / "replay.onnx"
    assert main(["run", str(out.with_name("c.recipe.yaml")), "-o", str(replay)]) == 0
    assert onnx.load(replay).SerializeToString() == onnx.load(out).SerializeToString()


def test_a_recipe_gives_the_data_input_s_sizes_so_its_replay_runs_as_the_search_did(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An audio front end of dynamic length ([batch, samples]): compress sized its runs by the data's clips, the
    recipe did not say so, and `onnxsat run` ran the first pass at [1, 1], which the model refuses."""
    monkeypatch.setattr(compress_module, "SideBySide", _SizeTimer)
    rng = np.random.default_rng(3)
    nodes = [
        onnx.helper.make_node("Unsqueeze", ["audio", "one"], ["wave"]),
        onnx.helper.make_node("Conv", ["wave", "w1"], ["c1"], strides=[4]),
        onnx.helper.make_node("Relu", ["c1"], ["r1"]),
        onnx.helper.make_node("Conv", ["r1", "w2"], ["frames"], strides=[4]),
    ]
    graph = onnx.helper.make_graph(
        nodes,
        "front_end",
        [onnx.helper.make_tensor_value_info("audio", onnx.TensorProto.FLOAT, ["batch", "samples"])],
        [onnx.helper.make_tensor_value_info("frames", onnx.TensorProto.FLOAT, None)],
        [
            onnx.numpy_helper.from_array(np.array([1], np.int64), "one"),
            onnx.numpy_helper.from_array(rng.normal(size=(16, 1, 8)).astype(np.float32), "w1"),
            onnx.numpy_helper.from_array(rng.normal(size=(4, 16, 4)).astype(np.float32) * 0.3, "w2"),
        ],
    )
    model_path, data, out = tmp_path / "audio.onnx", tmp_path / "clips.npz", tmp_path / "c.onnx"
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8), model_path)
    np.savez(data, inputs=rng.normal(size=(24, 400)).astype(np.float32))
    args = ["--data", str(data), "--metric", "cosine", "--techniques", "prune", "--max-drop", "100%", "--workers", "1"]
    assert main(["compress", str(model_path), "-o", str(out), *args]) == 0
    recipe = yaml.safe_load(out.with_name("c.recipe.yaml").read_text())
    assert recipe["input_shapes"] == {"audio": [1, 400]}
    replay = tmp_path / "replay.onnx"
    assert main(["run", str(out.with_name("c.recipe.yaml")), "-o", str(replay)]) == 0
    assert onnx.load(replay).SerializeToString() == onnx.load(out).SerializeToString()


def test_a_timed_speedup_never_exceeds_what_the_median_times_beside_it_say() -> None:
    """Compress printed 1.59x beside 15.798 -> 13.095 ms (1.21x) on a loaded machine: the median of per-round
    ratios alone. Like every other command it now gives the lower of that and the ratio of the medians."""
    from onnxsat.compression.timing import SideBySide
    from onnxsat.inputs import random_inputs
    from onnxsat.zoo.synthetic import simple_classifier

    model = simple_classifier()
    for timed in SideBySide(model, random_inputs(model), threads=1).measure([model.SerializeToString()] * 2):
        assert timed.speedup <= timed.original_ms / timed.latency_ms + 1e-9
        assert timed.low <= timed.speedup <= timed.high


def test_refinement_steps_only_to_rates_that_remove_more_channels() -> None:
    """A 32-channel group kept in multiples of 8 keeps 16 channels at 50% and at 62.5%: that step built the
    same model under another name (and spent a candidate on it). Four heads (counted one by one) lose one
    at 25% and at 37.5%."""
    search = _paced_search(100, {})
    search.settings.groups = {"conv": (32, 8), "attention": (4, 1), "small": (16, 8)}
    assert search._higher("conv", 0.0) == 0.25
    assert search._higher("conv", 0.25) == 0.5  # 37.5% keeps 24 as 25% does
    assert search._higher("conv", 0.5) == 0.75
    assert search._higher("attention", 0.25) == 0.5 and search._higher("attention", 0.75) is None
    assert search._higher("small", 0.5) == 0.625  # too few channels to round: every rate counts
    assert search._distinct_rates(["conv"]) == [0.25, 0.5, 0.75]
    assert search._distinct_rates(["conv", "small"]) == [0.25, 0.375, 0.5, 0.625, 0.75]


def test_the_report_says_how_the_final_timing_chose() -> None:
    """The finalists' re-timing decides, and the table alone left a chosen model that looked dominated."""
    search = _paced_search(100, {})
    fast, small, other = (
        Evaluated("refine", Outcome(Recipe.pruned({name: 0.5}), size=size), timed=Timed(speedup, 0.1, 0.2, low, 2.0))
        for name, size, speedup, low in (("a", 500, 1.80, 1.70), ("b", 400, 1.76, 1.72), ("c", 900, 1.20, 1.10))
    )
    search.evaluated = [other, fast, small]
    search.finalists = [fast, small]
    search._best = small
    line = compress_module._final_line(search)
    assert line == (
        "the fastest candidates timed again together: #2 1.80x [1.70-2.00], #3 1.76x [1.72-2.00]; chosen #3, the "
        "smallest file not slower than the fastest beyond timing noise"
    )


def test_quantization_after_a_pruning_that_spent_the_budget_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tagger's candidate read "no subset of nodes fits the budget (... against 0.00%)": a pass, to the eye, where
    the pruning before it had used up the 1% budget. The refusal now says what was left."""
    from onnxsat.compression import recipe as recipe_module
    from onnxsat.errors import NothingPaysError

    def refuse(model: onnx.ModelProto, options: QuantizeOptions, **kwargs: object) -> None:
        assert options.max_drop == 0.0
        raise NothingPaysError("no quantized model fits: dynamic: no subset of nodes fits the budget")

    monkeypatch.setattr(
        recipe_module, "prune_model", lambda model, options, **kwargs: (model, SimpleNamespace(notes=[]))
    )
    monkeypatch.setattr(recipe_module, "quantize_model", refuse)
    recipe = Recipe.pruned({"conv1": 0.25}).with_quantize("dynamic", 0.01, ())
    with pytest.raises(
        NothingPaysError, match=r"fits the budget \(the pruning before it leaves 0.00% of the 1.00% budget\)"
    ):
        recipe_module.build(recipe, bundled_digits_cnn(), "digits", InputSpec(), spent=lambda model: 0.012)


def test_the_fastest_float_set_s_form_is_searched_and_carries_to_pruned_models() -> None:
    """Nodes timed alone do not add up: MobileNetV2's four depthwise convolutions, slower quantized alone, were
    left in float and the model ran 1.47x, where quantizing them too made it 2.16x. Each form is built whole
    (without the budget's search) and timed on the original; the fastest is searched inside the budget, and the
    pruned models are quantized in it."""
    sets = {"slower alone": ("a",), "none": (), "slower or barely faster alone": ("a", "b")}
    speeds = {("a",): 1.5, (): 2.2, ("a", "b"): 1.4}

    class Executor:
        whole_fits = False

        def map(self, fn: object, tasks: list, **_: object) -> list[Outcome]:
            outcomes = []
            for task in tasks:
                fits = task.recipe.quantize_budget is not None or self.whole_fits
                score = SimpleNamespace(fits=lambda budget, fits=fits: fits, drop=0.0, bound=0.0)
                outcomes.append(Outcome(task.recipe, score, model=repr(task.recipe.keep_float).encode(), size=100))
            return outcomes

    class Timer:
        def measure(self, models: list[bytes]) -> list[Timed]:
            return [Timed(speeds[eval(m)], 1.0, 1.0, speeds[eval(m)], speeds[eval(m)]) for m in models]

        def run_limit(self) -> None:
            return None

    def search_with(executor: Executor) -> Search:
        settings = SearchSettings(0.01, {}, ["static"], False, time.monotonic() + 1000)
        search = Search(SimpleNamespace(model=b"original"), settings, executor, Timer(), lambda model, mode: sets)  # type: ignore[arg-type]
        search._best = Evaluated("original", Outcome(Recipe()))
        search._quantized([search._best])
        return search

    search = search_with(Executor())  # the whole forms miss the budget: timed all the same, to choose the form
    forms = [(e.stage, e.recipe.keep_float, e.recipe.quantize_budget, e.speedup) for e in search.evaluated]
    assert forms == [
        ("form", ("a",), None, 1.5), ("form", (), None, 2.2), ("form", ("a", "b"), None, 1.4),
        ("quantize", (), 0.01, 2.2),
    ]  # fmt: skip
    assert search._form == {"static": "none"} and search.best is search.evaluated[-1]

    pruned = Evaluated("prune", Outcome(Recipe.pruned({"g": 0.5}), model=b"()"), timed=Timed(1.0, 1.0, 1.0))
    search._quantized([pruned])
    (quantized,) = search.evaluated[4:]
    assert quantized.recipe.prune == (("g", 0.5),) and quantized.recipe.keep_float == ()

    # the fastest whole form fits the budget as it is: it is the candidate, nothing more is built
    executor = Executor()
    executor.whole_fits = True
    search = search_with(executor)
    assert [e.stage for e in search.evaluated] == ["form"] * 3 and search.best.recipe.keep_float == ()

    # forms that cannot be told apart: the one leaving more in float (more accurate, no slower), not the smaller file
    speeds.update({("a",): 2.19, (): 2.2})
    search = search_with(executor)
    assert search._form == {"static": "slower alone"} and search.best.recipe.keep_float == ("a",)


def test_the_float_sets_are_the_distinct_forms_that_quantize_something() -> None:
    """Three forms at most, the measured default first; none repeated, none leaving every node in float (every
    node slower alone still tries them all quantized: a Keras CNN ran 2.02x so, 1.41x without its stem)."""
    assert NodeTimes(("a",), ("b",), 4).float_sets() == {
        "slower alone": ("a",), "none": (), "slower or barely faster alone": ("a", "b"),
    }  # fmt: skip
    assert NodeTimes((), (), 4).float_sets() == {"slower alone": ()}
    assert NodeTimes((), ("b",), 4).float_sets() == {"slower alone": (), "slower or barely faster alone": ("b",)}
    assert NodeTimes(("a", "b"), (), 2).float_sets() == {"none": ()}
    assert NodeTimes(("a",), ("b",), 2).float_sets() == {"slower alone": ("a",), "none": ()}


def test_a_lone_finalist_and_a_one_step_recipe_are_not_timed_again() -> None:
    """A ViT's one candidate (fusion) was timed three times after its search: with the best, as the only
    finalist, and as the only step of its recipe, 43 s of a 3-minute budget. Once is enough."""
    from types import SimpleNamespace

    from onnxsat.compression.evaluate import Outcome
    from onnxsat.compression.search import Evaluated, Search, SearchSettings
    from onnxsat.compression.timing import Timed

    runs: list[int] = []

    class Timer:
        def measure(self, models: list[bytes]) -> list[Timed]:
            runs.append(len(models))
            return [Timed(1.2, 1.0, 1.2, 1.1, 1.3) for _ in models]

        def run_limit(self) -> None:
            return None

        def expected_seconds(self) -> float:
            return 1.0

    class Executor:
        def map(self, fn: object, tasks: list, **_: object) -> list[Outcome]:
            score = SimpleNamespace(fits=lambda budget: True, drop=0.0, bound=0.0)
            return [Outcome(task.recipe, score, model=b"fused", size=90) for task in tasks]

    settings = SearchSettings(0.01, {}, [], True, time.monotonic() + 1000)
    search = Search(SimpleNamespace(model=b"original"), settings, Executor(), Timer(), lambda model, mode: {})  # type: ignore[arg-type]
    score = SimpleNamespace(fits=lambda budget: True, drop=0.0, bound=0.0)
    fused = Evaluated(
        "fuse", Outcome(Recipe(fuse=True), score, model=b"fused", size=90), Timed(1.15, 1.0, 1.15, 1.1, 1.2)
    )  # type: ignore[arg-type]
    search.evaluated = [fused]
    search._final()
    assert runs == [] and search.best is fused and fused.speedup == 1.15
    steps = compress_module._contributions(search, fused)
    assert runs == [] and [(label, step.speedup) for step, label in steps] == [("+ fuse", 1.15)]
    second = Evaluated(
        "quantize", Outcome(Recipe().with_quantize("dynamic", 0.01), score, model=b"q", size=50), Timed(1.3, 1.0, 1.3)
    )  # type: ignore[arg-type]
    search.evaluated.append(second)
    search._final()
    assert runs == [2]  # two finalists: timed again together
