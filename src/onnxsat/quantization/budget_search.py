"""The budget search: which nodes to leave in float so the drop fits, as few as it can.

Each order (a ranking of the nodes) is searched for the fewest of its first nodes that fit
(``fewest_in_float``); the orders are the last nodes first, which needs no measurement, and the most
damaging first (``damage``). The forms that fit are timed whole and the fastest kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import onnx

from onnxsat.errors import RuntimeUnsupportedError
from onnxsat.metrics import Score
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.quantization import damage
from onnxsat.quantization.candidate import Candidate, timing_ties
from onnxsat.quantization.damage import nan_as_worst
from onnxsat.quantization.modes import silu_nodes
from onnxsat.quantization.report import ModeTrial
from onnxsat.quantized_already import integer_nodes
from onnxsat.time_budget import Deadline, late

WORST_SHOWN = 5
"""How many of a budget search's most damaging nodes its trial keeps for the report."""


def within_budget(
    model: onnx.ModelProto,
    candidate: Candidate,
    nodes: list[str],
    budget: float,
    scorer: ModelScorer,
    build: Callable[..., onnx.ModelProto],
    trial: ModeTrial,
    deadline: Deadline | None = None,
    time_model: Callable[[onnx.ModelProto], dict[str, float]] | None = None,
) -> Candidate | None:
    """Leave the fewest nodes in float so the drop fits, searched in several orders (``fewest_in_float`` finds the
    fewest of each order's first nodes): the last nodes first, then the most damaging first (see
    ``damage.damage_order``). Every search stops at ``deadline`` with what it has; the damage measurements get half the
    time left, so their bisection always runs. The forms that fit are timed whole (``time_model``) and the
    faster kept.

    Why several orders: a detector's decoding head concatenates pixel boxes with 0-1 scores, and one int8
    scale erases the scores; quantized alone, those nodes change nothing, and the estimate of the rest
    (relative error of whole tensors) does not see them. On a YOLOv8n layout detector with four pages and a
    short budget (inside ``compress``), the damage order found nothing where the last nodes first found
    its head (3 nodes in float, 2.47x). SiLU's nodes, which static mode quantizes for speed alone, are
    kept in int8 in those orders and given back first in another: on one page, ranking them among the
    convolutions left 93 nodes in float (1.18x) where giving them back first left 15 more (1.74x); on
    three pages, giving them back first left all 112 and 3 head nodes in float (1.95x) where those 3 alone
    fit (2.48x)."""
    silu = silu_nodes(model.graph) if candidate.mode == "static" else set()
    extras = [node.name for node in model.graph.node if node.name in silu]
    # needs no damage measured: tried first, so a short budget still tries it
    tail = _last_first(model, nodes, set(extras))
    last_first = {LAST_FIRST: tail}
    drops: dict[int, float] = {}
    found = _fitting(last_first, budget, scorer, build, _halfway(deadline), drops=drops)
    # no count of the last nodes fits, but the best brought the drop down (a head put back in float): those
    # first, then the most damaging (on four pages the head in float lost one box, a backbone convolution's)
    head = best_count(drops, full_drop=candidate.score.drop) if not found else 0
    ordered = damage.damage_order(model, candidate, nodes, scorer, build, damage.EXACT_DAMAGE_NODES, _halfway(deadline))
    found += _fitting(damage_rankings(ordered, extras, tail[:head]), budget, scorer, build, deadline, last_first)
    if not found and len(nodes) > damage.EXACT_DAMAGE_NODES and not late(deadline):
        # the estimate misled: measure every node alone
        ordered = damage.damage_order(model, candidate, nodes, scorer, build, len(nodes), _halfway(deadline))
        found = _fitting(damage_rankings(ordered, extras, tail[:head]), budget, scorer, build, deadline, last_first)
    full = candidate.score
    fully = f"every node quantized: drop {full.drop:.2%}, bound {full.bound:.2%} with its sampling error"
    fully += f", against {budget:.2%}"
    trial.worst = [item for item in ordered if item[0] not in extras][:WORST_SHOWN]
    if not found:
        if late(deadline):  # cut short: it cannot say that none fits
            trial.error = f"no subset of nodes inside the budget found before --budget-minutes ran out ({fully})"
        else:
            trial.error = f"no subset of nodes fits the budget ({fully})"
        return None
    damages = dict(ordered)
    searched: list[tuple[str, Candidate]] = []
    nothing_left = ""
    for label, ranked, (count, quantized, score) in found:
        if integer_nodes(quantized) <= integer_nodes(model):  # what is left alone, ORT leaves float (a lone Relu)
            nothing_left = (
                f"no subset of nodes fits the budget ({fully}): the fewest left in float that fit, {count} of "
                f"{len(ranked)}, leave nothing quantized"
            )
            continue
        # the bisection leaves the first ``count`` of the ranking in float, harmless ones too when it must reach
        # them
        left = {n: _why_left(label, i, len(ranked), damages[n], n in silu) for i, n in enumerate(ranked[:count])}
        excluded = {**candidate.excluded, **left}
        form = replace(candidate, model=quantized, excluded=excluded, score=score, sensitivity=damages, latency={})
        searched.append((label, form))
    if not searched:
        trial.error = nothing_left
        return None
    if len(searched) == 1 or time_model is None:
        return searched[0][1]
    return _faster_form(searched, candidate, time_model, trial)


LAST_FIRST = "last nodes first"
BY_DAMAGE = "most damaging first"
SILU_FIRST = "SiLU given back first"
HEAD_THEN_DAMAGE = "last nodes, then most damaging"


def _why_left(label: str, index: int, total: int, damage: float, silu: bool) -> str:
    """Why the ``index``-th node of a ranking of ``total`` (by ``label``) was left in float."""
    if silu:
        return "in float for the budget: SiLU, given back before any other node"
    if label == LAST_FIRST:
        return f"in float for the budget: {index + 1} of {total} from the end (damage {damage:.3g})"
    return f"in float for the budget: ranked {index + 1} of {total} (damage {damage:.3g})"


def _last_first(model: onnx.ModelProto, nodes: Sequence[str], kept: set[str]) -> list[str]:
    """``nodes`` but ``kept`` (quantized for speed: never given back in this order), last in the graph first."""
    searched = set(nodes) - kept
    return [node.name for node in reversed(model.graph.node) if node.name in searched]


def best_count(drops: Mapping[int, float], full_drop: float) -> int:
    """The count tried with the lowest drop (the fewest of those), when it is below ``full_drop``; else 0."""
    if not drops:
        return 0
    count = min(drops, key=lambda c: (nan_as_worst(drops[c]), c))
    return count if nan_as_worst(drops[count]) < full_drop else 0


def damage_rankings(
    ordered: list[tuple[str, float]], extras: Sequence[str], head: Sequence[str] = ()
) -> dict[str, list[str]]:
    """The damage orders the bisection leaves nodes in float by: the most damaging first, and with ``extras``
    (nodes quantized for speed alone), that order with them kept in int8, then with them given back first.
    With ``head`` (the last nodes whose return to float brought the drop down most), also ``head`` first, then
    the most damaging."""
    first = set(extras)
    by_damage = [name for name, _ in ordered if name not in first]
    rankings = {BY_DAMAGE: by_damage}
    if head:
        rankings[HEAD_THEN_DAMAGE] = [*head, *(name for name in by_damage if name not in set(head))]
    if extras:
        rankings[SILU_FIRST] = [name for name, _ in _extras_first(ordered, extras)]
    return rankings


def _fitting(
    rankings: Mapping[str, list[str]],
    budget: float,
    scorer: ModelScorer,
    build: Callable[..., onnx.ModelProto],
    deadline: Deadline | None,
    searched: Mapping[str, list[str]] | None = None,
    drops: dict[int, float] | None = None,
) -> list[tuple[str, list[str], tuple[int, onnx.ModelProto, Score]]]:
    """Each ranking (by label) with the fewest of its first nodes left in float that fit (``fewest_in_float``), where
    any do; one the same as a ranking ``searched`` already is skipped. Every ranking but the last gets half
    the time left, so the last is always searched. ``drops``: the drop per count tried (of one ranking)."""
    done = list((searched or {}).values())
    todo = [(label, ranked) for label, ranked in rankings.items() if ranked not in done]
    found = []
    for number, (label, ranked) in enumerate(todo):
        last = number == len(todo) - 1
        best = fewest_in_float(ranked, budget, scorer, build, deadline if last else _halfway(deadline), drops)
        if best is not None:
            found.append((label, ranked, best))
    return found


def _faster_form(
    searched: list[tuple[str, Candidate]],
    full: Candidate,
    time_model: Callable[[onnx.ModelProto], dict[str, float]],
    trial: ModeTrial,
) -> Candidate:
    """Of the budget search's forms (one per order that found one), the faster timed whole; one within timing
    noise of the fastest that leaves fewer nodes in float (the smaller file) is kept instead."""
    for _, candidate in searched:
        candidate.latency = time_model(candidate.model)
    tied = timing_ties([candidate for _, candidate in searched])
    chosen = min(tied, key=lambda c: (len(c.excluded), -(c.speedup or 0.0)))
    said = [
        f"{label}, {len(c.excluded) - len(full.excluded)} more in float: {c.speedup or 0.0:.2f}x"
        for label, c in searched
    ]
    trial.add_note(f"budget search {'; '.join(said)}")
    return chosen


def _extras_first(ordered: list[tuple[str, float]], extras: Sequence[str]) -> list[tuple[str, float]]:
    """``ordered`` with the nodes of ``extras`` first, in the order ``extras`` gives (graph order, so a SiLU's
    Sigmoid and Mul go back to float together, not one of them with a round trip between), then the rest."""
    damages, first = dict(ordered), set(extras)
    return [(n, damages[n]) for n in extras if n in damages] + [item for item in ordered if item[0] not in first]


def _halfway(deadline: Deadline | None) -> Deadline | None:
    """Half the time left until ``deadline``, from now (None: no limit)."""
    return deadline.halfway() if deadline is not None else None


def fewest_in_float(
    ranked: list[str],
    budget: float,
    scorer: ModelScorer,
    build: Callable[..., onnx.ModelProto],
    deadline: Deadline | None = None,
    drops: dict[int, float] | None = None,
) -> tuple[int, onnx.ModelProto, Score] | None:
    """The fewest of the first ``ranked`` nodes to leave in float for the drop to fit; None when leaving all
    but one out still does not fit. At ``deadline``, the fewest found so far. ``drops``, when given, gets the
    drop of every count tried.

    Counts are tried from the low end, doubling (1, 2, 4, ... and all but one), then bisected between the
    first that fits and the one before it. Drops are not monotone in the count: on a YOLOv8n layout detector
    (four pages) SiLU alone in int8, everything else in float, lost a box that the model with 3 head nodes in
    float and everything else in int8 kept, so a bisection from the middle of 207 went up, to larger and
    larger counts, and never tried 3."""
    best: tuple[int, onnx.ModelProto, Score] | None = None  # the fewest that fit so far (one model held)

    def fits(count: int) -> bool:
        nonlocal best
        try:
            quantized = build(ranked[:count])
        except RuntimeUnsupportedError:
            return False
        score = scorer.score(quantized)
        if drops is not None:
            drops[count] = score.drop
        if not score.fits(budget):
            return False
        if best is None or count < best[0]:
            best = (count, quantized, score)
        return True

    top = len(ranked) - 1
    low, high = 0, None
    count = 1
    while count <= top and not late(deadline):
        if fits(count):
            high = count
            break
        low = count
        count = top if count < top <= 2 * count else 2 * count
    if high is None:
        return None
    # the fewest that fit lies in (low, high]: bisect there (each count is tried once)
    while high - low > 1 and not late(deadline):
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return best
