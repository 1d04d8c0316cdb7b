"""The default cost model: a roofline estimate of one node's run time from shapes alone.

Why a roofline: counting nodes (``uniform``) cannot tell a 3x3 Conv from a Relu, nor see why a fusion
pays. Run time on a CPU is bounded by arithmetic and by memory traffic, so a node costs

    us = flops / FLOPS_PER_US + bytes / BYTES_PER_US + PER_NODE_OVERHEAD_US        (roofline="sum", default)
    us = max(flops / FLOPS_PER_US, bytes / BYTES_PER_US) + PER_NODE_OVERHEAD_US    (roofline="max")

The sum is the default because ORT kernels mostly do not overlap compute with memory traffic on one core,
and because it keeps every saved byte and flop visible to the extractor (with ``max`` a saving on the
non-binding side is worth nothing, so equal-cost ties multiply).

What ``bytes`` counts, per node:
  * every input that is present, read once in full: activations, and constant inputs (weights and folded
    tensors) too, since the kernel still reads them; what a constant does NOT cost is a producer, because it
    is already in memory when the model runs;
  * every output, written once in full;
  * for Gather, GatherElements and GatherND, the data input only up to the size of the output (a lookup
    in a large embedding table reads the rows it copies, not the table);
  * nothing for view ops (Identity, Reshape, Squeeze, Unsqueeze, Flatten, inference Dropout, Constant),
    whose ORT kernels alias their input or become initializers, and only the output for Shape and Size,
    which read no tensor data.
So a fused node is cheaper than the chain it replaces by the intermediate tensor it no longer writes and
re-reads, plus one ``PER_NODE_OVERHEAD_US``.

``flops`` are the effective flops of ``flops.py`` (GEMM-like ops at 2 per multiply-add, slow elementwise
functions weighted up by their measured cost). Unknown shapes never raise: an unknown or symbolic dim
counts as ``default_dim`` (default 1; pass the expected batch size, say), a tensor of unknown rank as
``default_numel`` elements (default 4096), an unknown element type as 4 bytes.

Calibration (run once by hand, not at import; AMD EPYC Zen 5 with AVX-512, 2 vCPUs, onnxruntime 1.31.1,
CPUExecutionProvider, one intra-op thread, spinning off, ORT_ENABLE_ALL, median of 30-50 timed runs):
  * FLOPS_PER_US = 240 000 (240 GFLOP/s): float32 MatMul 256^3 took 138 us (242 000 flop/us), 512^3 took
    1.11 ms (241 000-243 000), 1024^3 took 9.3-10.1 ms (213 000-230 000); a dense 3x3 Conv 64->64 on 56x56
    ran at 257 000 and a 1x1 Conv 256->256 on 14x14 at 232 000. Process CPU time / wall time was 0.82,
    so this is one core.
  * BYTES_PER_US = 60 000 (60 GB/s): float32 Add of two 2^20-element vectors (12 MiB moved) took 137-139 us
    (91 000 bytes/us, largely cache-resident), 2^22 elements 0.92-0.97 ms (52 000-55 000), 2^24 elements
    (192 MiB) 4.6-4.8 ms (42 000-43 000, DRAM). 60 000 sits between the cache and DRAM regimes, where the
    activations of typical models fall.
  * PER_NODE_OVERHEAD_US = 0.2: a chain of 201 tiny nodes (Relu, Add, Sigmoid, Transpose on 1-64 elements,
    ORT_DISABLE_ALL) took 0.155-0.22 us more per node than a single one. The ~3.2 us fixed cost of one
    ``session.run`` call from Python is per model, not per node, and is not counted.
  * The elementwise weights in ``flops.ELEMENTWISE_FLOPS`` come from the same setup: each unary op on
    2^20 float32 elements, minus the time of Relu, times FLOPS_PER_US, per element.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.eqsat.costs.flops import GATHER_OPS, METADATA_OPS, VIEW_OPS, count_flops
from onnxsat.eqsat.costs.signature import NodeSignature, TensorInfo
from onnxsat.eqsat.costs.tensors import DEFAULT_DIM, DEFAULT_NUMEL, nbytes
from onnxsat.errors import SettingsError

FLOPS_PER_US = 240_000.0
"""Effective float32 flops per microsecond of one core (see the calibration above)."""

BYTES_PER_US = 60_000.0
"""Bytes read or written per microsecond by a memory-bound kernel on one core (see the calibration above)."""

PER_NODE_OVERHEAD_US = 0.2
"""Fixed cost of dispatching one kernel inside an ORT session (see the calibration above)."""

MIN_COST_US = 1e-3
"""Floor on any cost, so that a cost is always > 0 even with the overhead option set to 0."""

ROOFLINES = ("sum", "max")


@dataclass(frozen=True)
class Estimate:
    """The parts of one analytic figure, for reports and tests."""

    flops: float
    bytes: float
    us: float


class AnalyticCost:
    """Roofline cost in microseconds (see the module docstring for the formula and what it counts)."""

    name = "analytic"

    def __init__(
        self,
        default_dim: int = DEFAULT_DIM,
        default_numel: int = DEFAULT_NUMEL,
        flops_per_us: float = FLOPS_PER_US,
        bytes_per_us: float = BYTES_PER_US,
        overhead_us: float = PER_NODE_OVERHEAD_US,
        roofline: str = "sum",
    ) -> None:
        _require_positive_int("default_dim", default_dim)
        _require_positive_int("default_numel", default_numel)
        for option, value in (("flops_per_us", flops_per_us), ("bytes_per_us", bytes_per_us)):
            if not isinstance(value, (int, float)) or not value > 0:
                raise SettingsError(f"cost model option {option} must be a positive number, not {value!r}")
        if not isinstance(overhead_us, (int, float)) or not overhead_us >= 0:
            raise SettingsError(f"cost model option overhead_us must be a number >= 0, not {overhead_us!r}")
        if roofline not in ROOFLINES:
            raise SettingsError(f"cost model option roofline must be one of {', '.join(ROOFLINES)}, not {roofline!r}")
        self.default_dim = default_dim
        self.default_numel = default_numel
        self.flops_per_us = float(flops_per_us)
        self.bytes_per_us = float(bytes_per_us)
        self.overhead_us = float(overhead_us)
        self.roofline = roofline

    def flops(self, node: NodeSignature) -> float:
        return count_flops(node, self.default_dim, self.default_numel)

    def bytes_moved(self, node: NodeSignature) -> float:
        """Bytes read and written by ``node`` (see the module docstring for what is counted)."""
        if node.op_type in VIEW_OPS:
            return 0.0
        size = self._nbytes
        written = sum(size(t) for t in node.outputs)
        if node.op_type in METADATA_OPS:
            return written
        read = [size(t) for t in node.inputs]
        if node.op_type in GATHER_OPS and read and node.outputs:
            read[0] = min(read[0], size(node.outputs[0]))
        return sum(read) + written

    def estimate(self, node: NodeSignature) -> Estimate:
        flops, moved = self.flops(node), self.bytes_moved(node)
        compute, memory = flops / self.flops_per_us, moved / self.bytes_per_us
        bound = compute + memory if self.roofline == "sum" else max(compute, memory)
        return Estimate(flops, moved, max(bound + self.overhead_us, MIN_COST_US))

    def node_cost(self, node: NodeSignature) -> float:
        return self.estimate(node).us

    def _nbytes(self, info: TensorInfo | None) -> float:
        return nbytes(info, self.default_dim, self.default_numel)


def _require_positive_int(option: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"cost model option {option} must be a positive integer, not {value!r}")
