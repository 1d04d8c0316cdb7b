"""How much each node costs the outputs when it is quantized: the order in which the budget search gives
nodes back to float.

Measured exactly for a few nodes (the node alone quantized, the model scored), estimated from one run of
the float and the fully quantized model side by side for the rest: measuring all 200 of a text
recognizer's nodes exactly took 4 minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.errors import RuntimeUnsupportedError
from onnxsat.metrics.scorer import ModelScorer
from onnxsat.quantization.candidate import Candidate
from onnxsat.time_budget import Deadline, late
from onnxsat.verification import session, with_outputs

EXACT_DAMAGE_NODES = 32
"""At most this many nodes have their damage measured exactly (quantized alone, the model scored); the
rest are estimated from one run (see ``damage_order``): measuring all 200 of a text recognizer's took 4 minutes."""
ERROR_SAMPLES = 8


def nan_as_worst(value: float) -> float:
    """A damage that came out NaN (the node quantized alone made the outputs NaN: an Add before a Sqrt and a
    Log) is the worst there is, not a value that sorts anywhere."""
    return math.inf if math.isnan(value) else value


def damage_order(
    model: onnx.ModelProto,
    candidate: Candidate,
    nodes: list[str],
    scorer: ModelScorer,
    build: Callable[..., onnx.ModelProto],
    exact_limit: int,
    deadline: Deadline | None = None,
) -> list[tuple[str, float]]:
    """The nodes, most damaging first, with the damage measured. Exactly, for up to ``exact_limit``:
    the scored outputs' relative change with that node alone quantized. With more,
    one run of the float and the fully quantized model side by side estimates each node's share (the
    relative error it adds, see ``error_jumps``); the worst ``exact_limit`` by that estimate are
    then measured exactly and lead the order, the rest follow the estimate. Measured nodes are ordered by
    the budget's drop, then by the distortion. At ``deadline`` the nodes not yet measured follow the
    estimate too."""
    estimate: dict[str, float] | None = None
    suspects, rest = nodes, []
    if len(nodes) > exact_limit:
        estimate = error_jumps(model, candidate.model, nodes, scorer)
        by_estimate = sorted(nodes, key=lambda n: -estimate[n])
        suspects, rest = by_estimate[:exact_limit], [(n, estimate[n]) for n in by_estimate[exact_limit:]]
    exact: dict[str, tuple[float, float]] = {}
    for name in _progress(suspects, f"{candidate.mode}: damage per node"):
        if late(deadline):
            unmeasured = [n for n in suspects if n not in exact]
            estimate = estimate or error_jumps(model, candidate.model, unmeasured, scorer)
            rest = sorted(((n, estimate[n]) for n in unmeasured), key=lambda item: -item[1]) + rest
            break
        try:
            score, distortion = scorer.judge(build([], alone=name))
            exact[name] = (nan_as_worst(score.drop), nan_as_worst(distortion))
        except RuntimeUnsupportedError:
            exact[name] = (float("inf"), float("inf"))
    # the budget's own drop first (a LayerNorm's Add flipped 23% of Magika's labels while barely moving its
    # logits), the smooth distortion to order the nodes whose drop is nil
    ordered = sorted(exact.items(), key=lambda item: (-item[1][0], -item[1][1]))
    harmful = [(name, distortion) for name, (drop, distortion) in ordered if drop > 0 or distortion > 0]
    # a node that changes nothing quantized alone (often an Add ORT's quantizer leaves as it is without
    # quantized neighbours) comes last, after the estimated ones: kept in float it buys no accuracy, but
    # costs a DequantizeLinear/QuantizeLinear pair around it (on a Paddle detector 30 such Adds were
    # kept in float ahead of every estimated node)
    harmless = [(name, distortion) for name, (drop, distortion) in ordered if drop <= 0 and distortion <= 0]
    if estimate is not None:
        # ...unless the whole quantized model says otherwise: a Concat of pixel boxes and 0-1 scores stays float
        # quantized alone (no quantized neighbour), yet with its neighbours one int8 scale erases every score
        # (a YOLOv8 head: F1 100% -> 0%); such a node takes its place among the estimated ones
        jumps = [(name, estimate.get(name, 0.0)) for name, _ in harmless if estimate.get(name, 0.0) > 0]
        rest = sorted(rest + jumps, key=lambda item: -item[1])
        harmless = [(name, distortion) for name, distortion in harmless if estimate.get(name, 0.0) <= 0]
    return harmful + rest + harmless


def _progress(items: Sequence[str], what: str) -> Iterable[str]:
    """``items`` with a progress bar on a terminal when tqdm (the ``bench`` extra) is installed; without it,
    or off a terminal, the items as they are."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=what, unit="node", leave=False, disable=None)


def error_jumps(
    prepared: onnx.ModelProto, quantized: onnx.ModelProto, nodes: list[str], scorer: ModelScorer
) -> dict[str, float]:
    """Per node: the relative error (float vs fully quantized model, on a few samples) of its output as its
    consumers read it (after its QuantizeLinear/DequantizeLinear, ``<name>_DequantizeLinear_Output``) minus
    the largest of its activation inputs': what quantizing this node (its weight, its output's rounding)
    adds to what reached it."""
    weights = {t.name for t in prepared.graph.initializer}
    produced = {out for node in quantized.graph.node for out in node.output}

    def as_read(name: str) -> str | None:
        rounded = f"{name}_DequantizeLinear_Output"
        return rounded if rounded in produced else name if name in produced else None

    watched = {
        node.name: ([t for t in node.input if t and t not in weights], node.output[0])
        for node in prepared.graph.node
        if node.name in nodes and node.output
    }
    pairs = {t: as_read(t) for ins, out in watched.values() for t in (*ins, out)}
    pairs = {
        t: q
        for t, q in pairs.items()
        if q is not None and t in {o for n in prepared.graph.node for o in n.output} | scorer.feed_names
    }
    feeds = scorer.sample_feeds(ERROR_SAMPLES)
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the fake-quantized graph as written: every tensor kept
    floats = [t for t in pairs if t not in scorer.feed_names]
    reference = dict(zip(floats, session(with_outputs(prepared, floats), level).run(floats, feeds), strict=True))
    reference.update({t: feeds[t] for t in pairs if t in scorer.feed_names})
    read = list(pairs.values())
    rounded = dict(zip(read, session(with_outputs(quantized, read), level).run(read, feeds), strict=True))
    # A name the quantizer reused for another tensor (a shape that differs) tells nothing: left out, as unread.
    error = {
        t: relative_error(reference[t], rounded[q])
        for t, q in pairs.items()
        if np.shape(reference[t]) == np.shape(rounded[q])
    }
    damage = {}
    for name in nodes:
        sources, result = watched.get(name, ([], ""))
        before = [error.get(t, 0.0) for t in sources]
        after = error.get(result, 0.0)
        if any(math.isnan(e) for e in before):  # NaN reached it: what it adds cannot be told
            damage[name] = 0.0
        elif math.isnan(after):  # it made the NaN
            damage[name] = math.inf
        else:
            damage[name] = max(0.0, after - max(before, default=0.0))
    return damage


def relative_error(reference: np.ndarray, value: np.ndarray) -> float:
    reference = np.asarray(reference, dtype=np.float64)
    noise = np.linalg.norm(np.asarray(value, dtype=np.float64) - reference)
    return float(noise / max(np.linalg.norm(reference), 1e-12))
