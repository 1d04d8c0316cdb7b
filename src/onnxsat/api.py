"""The Python API: one function per pass, from file to file, through the same runner as the command line.

The input may also be an ``onnx.ModelProto`` held in memory (what an exporter or ``onnx.load`` returns): it is
written to a temporary folder and read from there, so it goes through the same checks as a file.

Each function's keyword arguments are its options dataclass's fields (``onnxsat.optimize(..., target=
"portable", max_seconds=10)``), or a ready ``options`` object; ``report`` also writes the report as JSON,
``inputs`` gives some inputs' values (a ``.npz`` feeds file or a mapping of names to arrays; the others
are seeded random), ``input_shapes`` sizes the random ones' dynamic dims, ``force`` writes a result that
failed verification.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np
import onnx

from onnxsat.compression.compress import CompressOptions
from onnxsat.compression.recipe_file import recipe_input_path, write_recipe
from onnxsat.compression.report import CompressReport
from onnxsat.eqsat.optimizer import OptimizeOptions
from onnxsat.inputs import InputSpec
from onnxsat.passes.compress import CompressPass
from onnxsat.passes.eqsat import EqsatPass
from onnxsat.passes.prune import PrunePass
from onnxsat.passes.quantize import QuantizePass
from onnxsat.passes.sparsify import SparsifyPass
from onnxsat.pipelines.file import run_pipeline_file
from onnxsat.pruning.prune import PruneOptions
from onnxsat.pruning.report import PruneReport
from onnxsat.quantization.quantize import QuantizeOptions
from onnxsat.quantization.report import QuantizeReport
from onnxsat.report import OptimizeReport
from onnxsat.runner import ModelLike, PathLike, run_file, save_in_memory
from onnxsat.sparsity.report import SparsifyReport
from onnxsat.sparsity.sparsify import SparsifyOptions
from onnxsat.verification import DEFAULT_RUN_TIMEOUT, Tolerance

Feeds = Union[PathLike, Mapping[str, Any], InputSpec, None]  # noqa: UP007  (a runtime alias)
"""Given input values: a ``.npz`` feeds file, a mapping of input names to arrays, or a ready spec."""


def input_spec(input_shapes: Mapping[str, Sequence[int]] | None = None, inputs: Feeds = None) -> InputSpec:
    """The spec the API's ``input_shapes`` and ``inputs`` keywords describe: ``inputs`` is a ``.npz`` feeds
    file, a mapping of input names to arrays, or a ready spec."""
    if isinstance(inputs, InputSpec):
        return inputs if not input_shapes else InputSpec({**inputs.shapes, **input_shapes}, inputs.given, inputs.source)
    if inputs is None or isinstance(inputs, (str, Path)):
        shapes = [f"{name}:{','.join(map(str, dims))}" for name, dims in (input_shapes or {}).items()]
        return InputSpec.from_options(shapes, inputs)
    return InputSpec(dict(input_shapes or {}), {name: np.asarray(value) for name, value in inputs.items()})


def optimize(
    input_path: ModelLike,
    output_path: PathLike,
    options: OptimizeOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    inputs: Feeds = None,
    rtol: float = Tolerance.rtol,
    atol: float = Tolerance.atol,
    ort_rounding: float = Tolerance.ort_rounding,
    force: bool = False,
    run_timeout: float = DEFAULT_RUN_TIMEOUT,
    **settings: Any,
) -> OptimizeReport:
    """Optimize ``input_path`` into ``output_path`` by equality saturation; verified against the original
    before writing (``settings``: ``OptimizeOptions``' fields, e.g. ``target="portable"``)."""
    step = EqsatPass(options or OptimizeOptions(**settings))
    tolerance = Tolerance(rtol, atol, ort_rounding) if options is None else options.tolerance
    timeout = run_timeout if options is None else options.run_timeout
    return run_file(step, input_path, output_path, report, _spec(input_shapes, inputs), tolerance, force, timeout)


def sparsify(
    input_path: ModelLike,
    output_path: PathLike,
    options: SparsifyOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    inputs: Feeds = None,
    force: bool = False,
    **settings: Any,
) -> SparsifyReport:
    """Zero small weights of ``input_path`` into ``output_path`` (``settings``: ``SparsifyOptions``' fields,
    e.g. ``sparsity=0.5`` or ``max_drop=0.01, data="digits-test"``)."""
    step = SparsifyPass(options or SparsifyOptions(**settings))
    return run_file(step, input_path, output_path, report, _spec(input_shapes, inputs), force=force)


def quantize(
    input_path: ModelLike,
    output_path: PathLike,
    options: QuantizeOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    inputs: Feeds = None,
    force: bool = False,
    **settings: Any,
) -> QuantizeReport:
    """Quantize ``input_path`` into ``output_path`` where it pays (``settings``: ``QuantizeOptions``' fields,
    e.g. ``mode="static", max_drop=0.005, data="digits-test"``)."""
    step = QuantizePass(options or QuantizeOptions(**settings))
    return run_file(step, input_path, output_path, report, _spec(input_shapes, inputs), force=force)


def prune(
    input_path: ModelLike,
    output_path: PathLike,
    options: PruneOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    inputs: Feeds = None,
    force: bool = False,
    **settings: Any,
) -> PruneReport:
    """Remove whole channels of ``input_path`` into ``output_path`` (``settings``: ``PruneOptions``' fields,
    e.g. ``rate=0.3, reconstruct=True, data="digits-train"``)."""
    step = PrunePass(options or PruneOptions(**settings))
    return run_file(step, input_path, output_path, report, _spec(input_shapes, inputs), force=force)


def compress(
    input_path: ModelLike,
    output_path: PathLike,
    options: CompressOptions | None = None,
    *,
    report: PathLike | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    inputs: Feeds = None,
    force: bool = False,
    **settings: Any,
) -> CompressReport:
    """The fastest model inside the budget into ``output_path``, its recipe beside it (``settings``:
    ``CompressOptions``' fields, e.g. ``data="digits-train", eval_data="digits-test", max_drop=0.005``)."""
    step = CompressPass(options or CompressOptions(**settings))
    spec = _spec(input_shapes, inputs)
    if not isinstance(input_path, onnx.ModelProto):
        result = run_file(step, input_path, output_path, report, spec, force=force)
        if result.written:
            write_recipe(result, input_path, output_path, spec or step.options.inputs)
        return result
    # the recipe replays from the original, so an in-memory one is kept beside it (removed if nothing is written)
    kept = recipe_input_path(output_path)
    save_in_memory(input_path, kept)
    written = False
    try:
        result = run_file(step, kept, output_path, report, spec, force=force)
        if result.written:
            write_recipe(result, kept, output_path, spec or step.options.inputs)
        written = result.written
    finally:
        if not written:
            kept.unlink(missing_ok=True)
    return result


run_pipeline = run_pipeline_file
"""Read, check and run the pipeline file at ``path`` (the other arguments override its paths)."""


def _spec(input_shapes: Mapping[str, Sequence[int]] | None, inputs: Feeds) -> InputSpec | None:
    """None when neither keyword was given, so that an options object's own inputs count."""
    return input_spec(input_shapes, inputs) if input_shapes or inputs is not None else None
