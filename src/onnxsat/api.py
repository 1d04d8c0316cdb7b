"""The Python API: one function per pass, from file to file, through the same runner as the command line.

Each function's keyword arguments are its options dataclass's fields (``onnxsat.optimize(..., target=
"portable", max_seconds=10)``), or a ready ``options`` object; ``report`` also writes the report as JSON,
``input_shapes`` sizes dynamic input dims, ``force`` writes a result that failed verification.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxsat.core import Pass
from onnxsat.eqsat.optimizer import OptimizeOptions
from onnxsat.passes.eqsat import EqsatPass
from onnxsat.passes.prune import PrunePass
from onnxsat.passes.sparsify import SparsifyPass
from onnxsat.pipelines.file import run_pipeline_file
from onnxsat.pruning.prune import PruneOptions
from onnxsat.pruning.report import PruneReport
from onnxsat.report import OptimizeReport
from onnxsat.runner import RunSettings, run_one
from onnxsat.sparsity.report import SparsifyReport
from onnxsat.sparsity.sparsify import SparsifyOptions
from onnxsat.verification import DEFAULT_RUN_TIMEOUT, Tolerance

PathLike = str | Path


def run_file(
    step: Pass,
    input_path: PathLike,
    output_path: PathLike,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    tolerance: Tolerance | None = None,
    force: bool = False,
    run_timeout: float | None = None,
) -> Any:
    """Run one pass from ``input_path`` to ``output_path``; its settings checked before anything is read."""
    options = getattr(step, "options", None)
    if options is not None:
        options.check()
        # settings an options object carries count unless given here
        input_shapes = getattr(options, "input_shapes", None) if input_shapes is None else input_shapes
        tolerance = tolerance or getattr(options, "tolerance", None)
        force = force or getattr(options, "force", False)
    settings = RunSettings(
        input_shapes={name: list(dims) for name, dims in (input_shapes or {}).items()},
        tolerance=tolerance or Tolerance(),
        force=force,
        run_timeout=run_timeout,
    )
    return run_one(step, input_path, output_path, settings, report)


def optimize(
    input_path: PathLike,
    output_path: PathLike,
    options: OptimizeOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    rtol: float = Tolerance.rtol,
    atol: float = Tolerance.atol,
    force: bool = False,
    run_timeout: float = DEFAULT_RUN_TIMEOUT,
    **settings: Any,
) -> OptimizeReport:
    """Optimize ``input_path`` into ``output_path`` by equality saturation; verified against the original
    before writing (``settings``: ``OptimizeOptions``' fields, e.g. ``target="portable"``)."""
    step = EqsatPass(options or OptimizeOptions(**settings))
    tolerance = Tolerance(rtol, atol) if options is None else options.tolerance
    timeout = run_timeout if options is None else options.run_timeout
    return run_file(step, input_path, output_path, report, input_shapes, tolerance, force, timeout)


def sparsify(
    input_path: PathLike,
    output_path: PathLike,
    options: SparsifyOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    force: bool = False,
    **settings: Any,
) -> SparsifyReport:
    """Zero small weights of ``input_path`` into ``output_path`` (``settings``: ``SparsifyOptions``' fields,
    e.g. ``sparsity=0.5`` or ``max_drop=0.01, data="digits-test"``)."""
    step = SparsifyPass(options or SparsifyOptions(**settings))
    return run_file(step, input_path, output_path, report, input_shapes, force=force)


def prune(
    input_path: PathLike,
    output_path: PathLike,
    options: PruneOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    force: bool = False,
    **settings: Any,
) -> PruneReport:
    """Remove whole channels of ``input_path`` into ``output_path`` (``settings``: ``PruneOptions``' fields,
    e.g. ``rate=0.3, reconstruct=True, data="digits-train"``)."""
    step = PrunePass(options or PruneOptions(**settings))
    return run_file(step, input_path, output_path, report, input_shapes, force=force)


run_pipeline = run_pipeline_file
"""Read, check and run the pipeline file at ``path`` (the other arguments override its paths)."""
