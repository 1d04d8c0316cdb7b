"""The empirical cost model: time each distinct node signature in ONNX Runtime on this machine.

Why: the analytic roofline is a guess about kernels it cannot see (whether ORT has a fused kernel for a
pattern, how well it vectorizes an op, what pre-packing buys). Timing the node itself answers that for the
machine the model will run on. Each signature is timed once (see ``microbench.py``) and the figure kept in
memory and in a per-machine JSON file (see ``disk_cache.py``), so later runs reuse it.

A figure is the median ``session.run`` time of the one-node model minus the median time of a trivial
one-node model (the fixed cost of a Python ``session.run`` call, ~3 us here, which a node inside a real
model does not pay), plus the analytic model's per-node dispatch overhead, so figures stay comparable
with analytic estimates and a node never costs 0. Symbolic and unknown dims are replaced by
``default_dim`` before timing, and the cache is keyed by that resolved signature.

A signature that cannot be timed (a subgraph op, unknown rank or element type, tensors over ``max_bytes``,
an analytic estimate over ``max_estimate_us``, or ORT rejecting or failing it) is priced by the analytic
model instead and counted as estimated; ``figure()`` says which and why.

What a one-node model cannot show: a node whose inputs are all constant is folded away by ORT, so it
times as about the baseline (as it would cost in an ORT-optimized model); a view op (Reshape, Squeeze...)
must copy from a graph input to a graph output, which inside a model it usually avoids by aliasing; and
a layout-sensitive op may pay for layout conversions ORT would share between neighbouring nodes.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from onnxsat.eqsat.costs import disk_cache
from onnxsat.eqsat.costs.analytic import PER_NODE_OVERHEAD_US, AnalyticCost
from onnxsat.eqsat.costs.microbench import (
    TimingPlan,
    Unbenchmarkable,
    baseline_model,
    benchmark,
    check_benchmarkable,
    make_session,
    time_session,
)
from onnxsat.eqsat.costs.signature import NodeSignature, TensorInfo
from onnxsat.eqsat.costs.tensors import DEFAULT_DIM, resolve_dim
from onnxsat.errors import SettingsError

logger = logging.getLogger(__name__)

MAX_BYTES = 256 * 2**20
"""Largest total size of a signature's tensors that is timed (bigger ones would take seconds and GBs)."""

MAX_ESTIMATE_US = 200_000.0
"""Signatures the analytic model expects to take longer than this (0.2 s per run) are estimated, not timed."""

BASELINE_PLAN = TimingPlan(warmup=10, min_runs=50, max_runs=200, budget_s=0.05)


@dataclass(frozen=True)
class Figure:
    """One node's cost and where it came from: ``measured`` now, ``cache`` (measured earlier), ``estimated``."""

    us: float
    source: str
    reason: str = ""


@dataclass
class CostStats:
    """Distinct signatures priced by one model instance, by where the figure came from."""

    measured: int = 0
    from_cache: int = 0
    estimated: int = 0
    memory_hits: int = 0
    """Lookups of a signature this instance had already priced (not counted in the three above)."""


class MeasuredCost:
    """Micro-benchmarked node costs in microseconds, cached on disk per machine (see the module docstring)."""

    name = "measured"

    def __init__(
        self,
        default_dim: int = DEFAULT_DIM,
        cache_dir: str | Path | None = None,
        persist: bool = True,
        max_bytes: float = MAX_BYTES,
        max_estimate_us: float = MAX_ESTIMATE_US,
        warmup: int = 3,
        min_runs: int = 5,
        max_runs: int = 20,
        budget_ms: float = 50.0,
    ) -> None:
        for option, value, lowest in (("warmup", warmup, 0), ("min_runs", min_runs, 1), ("max_runs", max_runs, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise SettingsError(f"cost model option {option} must be an integer >= {lowest}, not {value!r}")
        limits = {"budget_ms": budget_ms, "max_bytes": max_bytes, "max_estimate_us": max_estimate_us}
        for option, number in limits.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not number >= 0:
                raise SettingsError(f"cost model option {option} must be a number >= 0, not {number!r}")
        self.analytic = AnalyticCost(default_dim=default_dim)  # validates default_dim
        self.default_dim = default_dim
        self.persist = persist
        self.max_bytes = max_bytes
        self.max_estimate_us = max_estimate_us
        self.plan = TimingPlan(warmup, min(min_runs, max_runs), max_runs, budget_ms / 1000.0)
        self.path = disk_cache.cache_path(Path(cache_dir).expanduser() if cache_dir is not None else None)
        cache = disk_cache.load(self.path) if persist else disk_cache.empty_cache()
        self._disk: dict[str, dict] = cache["entries"]
        self._baseline_us: float | None = cache["baseline_us"]
        self._figures: dict[str, Figure] = {}  # by resolved key, and by the key each node was asked with
        self._stats = CostStats()

    @property
    def stats(self) -> CostStats:
        return dataclasses.replace(self._stats)

    def node_cost(self, node: NodeSignature) -> float:
        return self.figure(node).us

    def figure(self, node: NodeSignature) -> Figure:
        """The cost of ``node`` with its provenance; measures it (once) if nothing is known yet."""
        known = self._figures.get(node.key())
        if known is None:
            resolved = self.resolve(node)
            key = resolved.key()
            known = self._figures.get(key)
        if known is not None:
            self._stats.memory_hits += 1
            self._figures[node.key()] = known
            return known
        entry = self._disk.get(key)
        if entry is not None:
            figure = Figure(self._net_us(entry["us"]), "cache")
            self._stats.from_cache += 1
        else:
            figure = self._measure(resolved, key)
        self._figures[key] = self._figures[node.key()] = figure
        return figure

    def resolve(self, node: NodeSignature) -> NodeSignature:
        """``node`` with every symbolic or unknown dim replaced by ``default_dim`` (unknown ranks stay unknown)."""
        return dataclasses.replace(
            node,
            inputs=tuple(None if t is None else self._resolve_tensor(t) for t in node.inputs),
            outputs=tuple(self._resolve_tensor(t) for t in node.outputs),
        )

    def _resolve_tensor(self, info: TensorInfo) -> TensorInfo:
        if info.shape is None:
            return info
        return dataclasses.replace(info, shape=tuple(resolve_dim(d, self.default_dim) for d in info.shape))

    def _measure(self, node: NodeSignature, key: str) -> Figure:
        estimate = self.analytic.node_cost(node)
        try:
            check_benchmarkable(node, self.max_bytes)
            if estimate > self.max_estimate_us:
                raise Unbenchmarkable(f"the analytic estimate {estimate:.0f} us is over {self.max_estimate_us:.0f} us")
            timing = benchmark(node, self.plan)
        except Unbenchmarkable as error:
            logger.debug("estimating %s: %s", key, error)
            self._stats.estimated += 1
            return Figure(estimate, "estimated", str(error))
        self._stats.measured += 1
        self._disk[key] = {"us": timing.median_us, "runs": timing.runs}
        figure = Figure(self._net_us(timing.median_us), "measured")  # measures the baseline first if needed
        self._save({key: self._disk[key]})
        return figure

    def _save(self, entries: dict[str, dict]) -> None:
        # After one failed write (warned about by disk_cache), keep figures in memory only.
        if self.persist and not disk_cache.save(self.path, self._baseline_us, entries):
            self.persist = False

    def _net_us(self, raw_us: float) -> float:
        return max(raw_us - self.baseline_us(), 0.0) + PER_NODE_OVERHEAD_US

    def baseline_us(self) -> float:
        """Median time of a trivial ``session.run`` on this machine (measured once, then cached with the figures)."""
        if self._baseline_us is None:
            model, feeds = baseline_model()
            self._baseline_us = time_session(make_session(model), feeds, BASELINE_PLAN).median_us
            self._save({})
        return self._baseline_us
