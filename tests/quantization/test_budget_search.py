"""The budget search: the orders it leaves nodes in float by, the count search in each, and the fastest of the
forms that fit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.quantization import budget_search, damage
from onnxsat.quantization.budget_search import best_count, damage_rankings, fewest_in_float, within_budget
from onnxsat.quantization.candidate import Candidate
from onnxsat.quantization.report import ModeTrial
from tests.quantization.test_quantize import mlp


def test_a_fit_that_leaves_nothing_quantized_is_no_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LR-ASPP (random weights) dropped 53% fully quantized; the fewest nodes left in float that fit were 87 of 88,
    and ORT's quantizer leaves a lone Add float: the user read "ONNX Runtime's quantizer left every node in float"."""

    model = onnx.load(mlp(tmp_path / "mlp.onnx"))
    score = SimpleNamespace(drop=0.5273, bound=0.5426)
    candidate = Candidate("static", model, {}, score)  # type: ignore[arg-type]
    monkeypatch.setattr(damage, "damage_order", lambda *args: [("fc1", 1.0), ("fc2", 0.5)])
    monkeypatch.setattr(budget_search, "fewest_in_float", lambda *args: (1, model, score))
    trial = ModeTrial("static")
    found = within_budget(model, candidate, ["fc1", "fc2"], 0.01, None, None, trial)  # type: ignore[arg-type]
    assert found is None
    assert trial.error == (
        "no subset of nodes fits the budget (every node quantized: drop 52.73%, bound 54.26% with its sampling "
        "error, against 1.00%): the fewest left in float that fit, 1 of 2, leave nothing quantized"
    )


@pytest.mark.parametrize(
    ("fitting", "expected", "tried"),
    [
        # a YOLOv8n layout detector: its 3 head nodes in float fit, most larger counts (SiLU alone in int8) do not
        ({3, 4, 206}, 3, [1, 2, 4, 3]),
        (set(range(5, 207)), 5, [1, 2, 4, 8, 6, 5]),
        ({206}, 206, [1, 2, 4, 8, 16, 32, 64, 128, 206, 167, 186, 196, 201, 203, 204, 205]),
        (set(), None, [1, 2, 4, 8, 16, 32, 64, 128, 206]),
    ],
)
def test_the_bisection_tries_few_nodes_in_float_first(
    fitting: set[int], expected: int | None, tried: list[int]
) -> None:
    """Drops are not monotone in the count left in float: counts are tried from the low end, doubling, then
    bisected between the first that fits and the one before it."""

    asked: list[int] = []

    def build(left_out: list[str]) -> int:
        asked.append(len(left_out))
        return len(left_out)

    scorer = SimpleNamespace(score=lambda count: SimpleNamespace(fits=lambda budget: count in fitting))
    ranked = [f"n{i}" for i in range(207)]
    found = fewest_in_float(ranked, 0.01, scorer, build)  # type: ignore[arg-type]
    assert (found[0] if found else None) == expected and asked == tried
    if found:
        assert found[1] == expected


def _silu_model() -> onnx.ModelProto:
    """A convolution, its SiLU, and a second convolution after it."""
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("Sigmoid", ["c"], ["s"], name="gate"),
            helper.make_node("Mul", ["c", "s"], ["m"], name="silu"),
            helper.make_node("Conv", ["m", "w"], ["y"], name="conv2"),
        ],
        "silu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SILU_DAMAGE = [("conv", 0.5), ("conv2", 0.1), ("gate", 0.0), ("silu", 0.0)]


def test_the_budget_search_tries_the_last_nodes_the_worst_and_silu_given_back_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Orders the bisection leaves nodes in float by. The last nodes first: a YOLOv8n's decoding head (pixel boxes
    concatenated with 0-1 scores under one int8 scale) changes nothing quantized alone, and with four pages and a
    short budget the damage order found nothing where its 3 head nodes in float fit. The most damaging first.
    SiLU, quantized for speed alone, is kept in int8 in both and given back first in a third: ranked by damage
    among the convolutions, one page's search left 93 nodes in float (1.18x), where giving SiLU back first left 15
    (1.74x); on three pages, giving it back first left all 112 of its nodes and 3 head nodes in float (1.95x)."""

    model = _silu_model()
    ranked: list[list[str]] = []
    monkeypatch.setattr(damage, "damage_order", lambda *args: SILU_DAMAGE)
    monkeypatch.setattr(budget_search, "fewest_in_float", lambda names, *args: ranked.append(names))
    full = Candidate("static", model, {}, SimpleNamespace(drop=0.1, bound=0.1))  # type: ignore[arg-type]
    trial = ModeTrial("static")
    nodes = ["conv", "gate", "silu", "conv2"]
    within_budget(model, full, nodes, 0.01, None, None, trial)  # type: ignore[arg-type]
    assert ranked == [["conv2", "conv"], ["conv", "conv2"], ["gate", "silu", "conv", "conv2"]]
    assert trial.worst == [("conv", 0.5), ("conv2", 0.1)]
    ranked.clear()
    dynamic = replace(full, mode="dynamic")
    within_budget(model, dynamic, ["conv", "conv2"], 0.01, None, None, ModeTrial("d"))  # type: ignore[arg-type]
    assert ranked == [["conv2", "conv"], ["conv", "conv2", "gate", "silu"]]  # only static quantizes SiLU for speed
    ranked.clear()
    monkeypatch.setattr(damage, "damage_order", lambda *args: [("conv2", 0.5), ("conv", 0.1)])
    within_budget(model, dynamic, ["conv", "conv2"], 0.01, None, None, ModeTrial("d"))  # type: ignore[arg-type]
    assert ranked == [["conv2", "conv"]]  # the damage order is the last-first order: searched once


ORDERS = {
    "last nodes first": (["conv2", "conv"], 1, {"conv2"}),
    "most damaging first": (["conv", "conv2"], 2, {"conv", "conv2"}),
    "SiLU given back first": (["gate", "silu", "conv", "conv2"], 3, {"gate", "silu", "conv"}),
}
"""Per order of the test below: its ranking, how many of its first nodes the fitting form leaves in float, which."""


@pytest.mark.parametrize(
    ("speeds", "chosen"),
    [
        ((2.4, 2.0, 1.9), "last nodes first"),
        ((1.5, 1.6, 1.9), "SiLU given back first"),
        ((1.5, 1.88, 1.9), "most damaging first"),  # within noise of the fastest, with fewer nodes in float
    ],
)
def test_of_the_forms_that_fit_the_faster_is_kept(
    monkeypatch: pytest.MonkeyPatch, speeds: tuple[float, float, float], chosen: str
) -> None:
    """Several orders fit: each form is timed whole and the faster kept; within timing noise, the one leaving fewer
    nodes in float. The trial says what each form ran."""

    model = _silu_model()
    score = SimpleNamespace(drop=0.0, bound=0.0)
    forms = {}
    for label in ORDERS:
        form = onnx.ModelProto()
        form.CopyFrom(model)
        form.graph.node.append(helper.make_node("QuantizeLinear", ["y", "scale"], ["q"], name="q"))
        forms[label] = form
    monkeypatch.setattr(damage, "damage_order", lambda *args: SILU_DAMAGE)

    def bisect(names: list[str], *_: object) -> tuple[int, onnx.ModelProto, object]:
        label = next(label for label, (ranked, _, _) in ORDERS.items() if ranked == names)
        return ORDERS[label][1], forms[label], score

    speed = {id(forms[label]): figure for label, figure in zip(ORDERS, speeds, strict=True)}
    monkeypatch.setattr(budget_search, "fewest_in_float", bisect)
    full = Candidate("static", model, {}, SimpleNamespace(drop=0.1, bound=0.1))  # type: ignore[arg-type]
    trial = ModeTrial("static")

    def timed(form: onnx.ModelProto) -> dict[str, float]:
        return {"speedup": speed[id(form)]}

    nodes = ["conv", "gate", "silu", "conv2"]
    found = within_budget(model, full, nodes, 0.01, None, None, trial, None, timed)  # type: ignore[arg-type]
    assert found is not None and found.model is forms[chosen]
    assert set(found.excluded) == ORDERS[chosen][2]
    assert found.speedup == speeds[list(ORDERS).index(chosen)]
    counts = [count for _, count, _ in ORDERS.values()]
    said = [f"{label}, {n} more in float: {s:.2f}x" for label, n, s in zip(ORDERS, counts, speeds, strict=True)]
    assert trial.note == "budget search " + "; ".join(said)
    if chosen == "last nodes first":
        assert found.excluded["conv2"] == "in float for the budget: 1 of 2 from the end (damage 0.1)"


def test_the_last_nodes_that_brought_the_drop_down_lead_the_damage_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """On four pages a YOLOv8n's head in float (the last 4 nodes) brought the drop from 13% to 1.15% but no count
    of the last nodes fit: a backbone convolution lost one box. So those last nodes come first, then the most
    damaging."""

    model = _silu_model()
    ranked: list[list[str]] = []

    def bisect(names: list[str], budget: float, scorer: object, build: object, deadline: object, drops: dict) -> None:
        ranked.append(names)
        if len(ranked) == 1:  # the last nodes first: leaving conv2 in float helps, leaving conv too helps less
            drops.update({1: 0.0115, 2: 0.0238})

    monkeypatch.setattr(damage, "damage_order", lambda *args: [("conv", 0.5), ("conv2", 0.1)])
    monkeypatch.setattr(budget_search, "fewest_in_float", bisect)
    full = Candidate("dynamic", model, {}, SimpleNamespace(drop=0.134, bound=0.134))  # type: ignore[arg-type]
    within_budget(model, full, ["conv", "conv2"], 0.01, None, None, ModeTrial("d"))  # type: ignore[arg-type]
    assert ranked == [["conv2", "conv"], ["conv", "conv2"]]  # conv2 then the rest by damage: the last-first order
    assert best_count({1: 0.0115, 2: 0.0238, 4: 0.0115}, 0.134) == 1
    assert best_count({1: 0.2}, 0.134) == 0  # no better than every node quantized
    assert damage_rankings([("a", 0.5), ("b", 0.2), ("c", 0.1)], [], ["c"]) == {
        "most damaging first": ["a", "b", "c"],
        "last nodes, then most damaging": ["c", "a", "b"],
    }
