"""``onnxsat bench scale``: how the optimizer's phases scale on large synthetic graphs.

Two workloads from ``onnxsat.zoo.synthetic``: a deep chain of Conv-BN-Relu blocks (3 nodes each, no
sharing, every block fuses) and a DenseNet-like DAG (every layer reads the Concat of all earlier
outputs, so sharing is heavy and argument lists grow with depth). The issue's goal is for the chain
of 2,000 blocks (6,000 nodes): optimized end to end in under 10 s, peak RSS under 2 GiB.

Design choices, and why:

- Each workload runs in a fresh *spawned* process. Peak RSS (``ru_maxrss``) is a high-water mark
  that never goes down, so two workloads measured in one process would both report the larger peak;
  a forked child would start with a copy of the parent's pages. The parent imports nothing heavy.
- Phase times are the optimizer's own (``OptimizeReport.phases`` of ``optimize_model``), not a second
  copy of the pipeline, so the benchmark times exactly what ``onnxsat optimize`` runs. Its "encode"
  includes shape inference, "extract" is freeze + extract, and "verify" is both ORT runs (original
  and result) plus the checker. End to end is the wall time of the whole ``optimize_model`` call;
  building the synthetic model is timed separately and excluded.
- Figures are printed, never asserted: timings depend on the machine. The exit code is 0 when every
  workload finished and its result passed verification, 1 otherwise; a missed goal is reported in
  words ("NOT MET"), not as a failure, because the benchmark's job is to measure.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata

GOAL_BLOCKS = 2000
"""The goal is stated for this chain length (2,000 blocks = 6,000 nodes)."""
GOAL_SECONDS = 10.0
GOAL_RSS_MIB = 2048.0

PHASES = ("encode", "saturate", "extract", "decode", "verify")
"""Columns taken from the report; everything else in the end-to-end time is shown as "other"."""


@dataclass(frozen=True)
class Workload:
    kind: str  # "chain" or "densenet"
    size: int  # blocks of the chain, layers of the DenseNet-like DAG

    @property
    def label(self) -> str:
        return f"chain({self.size})" if self.kind == "chain" else f"densenet({self.size})"


@dataclass
class Measurement:
    """What one child process measured (plain data, so it pickles back to the parent)."""

    workload: Workload
    nodes_before: int = 0
    nodes_after: int = 0
    enodes_before: int = 0
    enodes_after: int = 0
    eclasses: int = 0
    iterations: int = 0
    fusions: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    build_seconds: float = 0.0
    end_to_end_seconds: float = 0.0
    peak_rss_mib: float = 0.0
    verified: bool = False
    error: str = ""

    @property
    def other_seconds(self) -> float:
        """End to end minus the phase columns: the input check and assembling the report."""
        return self.end_to_end_seconds - sum(self.phases.get(p, 0.0) for p in PHASES)


def _peak_rss_mib() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def measure(workload: Workload) -> Measurement:
    """Build the workload's model and optimize it once (runs in the child process)."""
    from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model
    from onnxsat.zoo.synthetic import conv_bn_relu_chain, densenet_like

    start = time.perf_counter()
    model = conv_bn_relu_chain(workload.size) if workload.kind == "chain" else densenet_like(workload.size)
    built = time.perf_counter()
    _, report = optimize_model(model, OptimizeOptions(target="ort"), source=workload.label)
    done = time.perf_counter()
    graph = report.egraph
    return Measurement(
        workload=workload,
        nodes_before=sum(report.nodes_before.values()),
        nodes_after=sum(report.nodes_after.values()),
        enodes_before=int(graph.get("enodes_before", 0)),  # type: ignore[call-overload]
        enodes_after=int(graph.get("enodes_after", 0)),  # type: ignore[call-overload]
        eclasses=int(graph.get("eclasses", 0)),  # type: ignore[call-overload]
        iterations=int(graph.get("iterations", 0)),  # type: ignore[call-overload]
        fusions=sum(report.fusions.values()),
        phases=dict(report.phases),
        build_seconds=built - start,
        end_to_end_seconds=done - built,
        peak_rss_mib=_peak_rss_mib(),
        verified=report.verification is not None and report.verification.ok,
    )


def measure_in_child(workload: Workload) -> Measurement:
    """``measure`` in a fresh spawned process; a crash or an exception becomes ``Measurement.error``."""
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(measure, workload).result()
    except Exception as error:  # includes BrokenProcessPool when the child is killed (e.g. out of memory)
        return Measurement(workload=workload, error=f"{type(error).__name__}: {error}".strip())


HEADER = (
    f"{'workload':<16}{'nodes':>7}{'after':>7}{'e-nodes':>17}{'e-classes':>10}{'iters':>6}"
    + "".join(f"{p:>9}" for p in PHASES)
    + f"{'other':>7}{'total s':>9}{'peak RSS':>11}  verified"
)


def format_row(m: Measurement) -> str:
    """One table row; seconds per phase, end to end, peak RSS, verification status."""
    if m.error:
        return f"{m.workload.label:<16}  FAILED: {m.error}"
    enodes = f"{m.enodes_before}->{m.enodes_after}"
    return (
        f"{m.workload.label:<16}{m.nodes_before:>7}{m.nodes_after:>7}{enodes:>17}{m.eclasses:>10}{m.iterations:>6}"
        + "".join(f"{m.phases.get(p, 0.0):>9.3f}" for p in PHASES)
        + f"{m.other_seconds:>7.3f}{m.end_to_end_seconds:>9.3f}{m.peak_rss_mib:>7.0f} MiB  "
        + ("PASSED" if m.verified else "FAILED")
    )


def goal_line(chain: Measurement) -> str:
    """Whether the 6,000-node chain met the goal, with the measured numbers; honest when it did not."""
    goal = (
        f"goal: {GOAL_BLOCKS * 3:,}-node chain end to end < {GOAL_SECONDS:g} s, peak RSS < {GOAL_RSS_MIB / 1024:g} GiB"
    )
    if chain.workload.size != GOAL_BLOCKS:
        nodes = chain.workload.size * 3
        return f"{goal}: not evaluated (this run's chain has {nodes:,} nodes; use --blocks {GOAL_BLOCKS})"
    if chain.error:
        return f"{goal}: NOT MET (the run failed: {chain.error})"
    fast = chain.end_to_end_seconds < GOAL_SECONDS
    small = chain.peak_rss_mib < GOAL_RSS_MIB
    verdict = "MET" if fast and small and chain.verified else "NOT MET"
    return (
        f"{goal}: {verdict} (measured {chain.end_to_end_seconds:.2f} s {'<' if fast else '>='} {GOAL_SECONDS:g} s, "
        f"{chain.peak_rss_mib:.0f} MiB {'<' if small else '>='} {GOAL_RSS_MIB:.0f} MiB, "
        f"verification {'passed' if chain.verified else 'FAILED'})"
    )


def environment_line() -> str:
    versions = []
    for package in ("egglog", "onnx", "onnxruntime"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} ?")
    return f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; " + ", ".join(versions)


def run_scale_benchmark(blocks: int, dense_layers: int) -> int:
    """Measure the chain and the DenseNet-like DAG, print a row each and the goal verdict; exit code."""
    from onnxsat.errors import SettingsError

    if blocks < 1 or dense_layers < 1:
        raise SettingsError(f"--blocks and --dense-layers must be at least 1 (got {blocks} and {dense_layers})")
    workloads = [Workload("chain", blocks), Workload("densenet", dense_layers)]
    print(f"ONNXSat scale benchmark (target ort, one fresh process per workload; {environment_line()})")
    print("seconds per phase from the optimizer's report; total = optimize_model end to end (model build excluded)")
    print()
    print(HEADER, flush=True)
    results = []
    for workload in workloads:
        result = measure_in_child(workload)
        results.append(result)
        print(format_row(result), flush=True)
    print()
    print(goal_line(results[0]))
    return 0 if all(not m.error and m.verified for m in results) else 1
