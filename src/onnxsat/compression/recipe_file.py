"""The chosen recipe written beside the compressed model: a pipeline file and the samples it was built on.

``onnxsat run OUT.recipe.yaml`` replays the recipe from the original model into the same model: quantization
calibrates on the same samples (``OUT.recipe.npz``, every search sample), pruning refits on the same ones
(``OUT.recipe.fit.npz``, the part set apart for it, when there is one), quantization leaves the same nodes in
float, and nothing in the replay searches or times. Paths in the file are relative to its folder, so the
files move together.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from onnxsat.compression.evaluate import samples_npz
from onnxsat.compression.report import CompressReport
from onnxsat.inputs import InputSpec
from onnxsat.model_io import write_bytes_atomic, write_text_atomic


def recipe_paths(output_path: str | Path) -> tuple[Path, Path, Path]:
    """(pipeline file, data file, fit data file) for a compressed model at ``output_path``."""
    output = Path(output_path)
    stem = output.name[: -len(output.suffix)] if output.suffix else output.name
    names = (f"{stem}.recipe.yaml", f"{stem}.recipe.npz", f"{stem}.recipe.fit.npz")
    return output.with_name(names[0]), output.with_name(names[1]), output.with_name(names[2])


def recipe_input_path(output_path: str | Path) -> Path:
    """Where the Python API keeps an in-memory input beside the output, for the recipe to replay from."""
    pipeline_path = recipe_paths(output_path)[0]
    return pipeline_path.with_name(pipeline_path.name.replace(".recipe.yaml", ".recipe.input.onnx"))


def write_recipe(report: CompressReport, input_path: str | Path, output_path: str | Path, inputs: InputSpec) -> Path:
    """Write the report's recipe and the samples it was built on beside ``output_path``; return the pipeline
    file's path."""
    pipeline_path, data_path, fit_path = recipe_paths(output_path)
    folder = pipeline_path.resolve().parent
    if report.search_data is None:
        raise ValueError("the report holds no search data (the model was not compressed)")
    write_bytes_atomic(samples_npz(report.search_data), data_path)
    passes = [dict(entry) for entry in report.recipe]
    apart = report.fit_data is not None and any(entry["type"] == "prune" for entry in passes)
    if apart:
        assert report.fit_data is not None
        write_bytes_atomic(samples_npz(report.fit_data), fit_path)
        for entry in passes:
            if entry["type"] == "prune":
                entry["data"] = fit_path.name
    pipeline: dict[str, object] = {
        "input_model": os.path.relpath(Path(input_path).resolve(), folder),
        "output_model": Path(output_path).name,
        "data": data_path.name,
    }
    if inputs.source is not None:
        pipeline["inputs"] = os.path.relpath(Path(inputs.source).resolve(), folder)
    shapes = {**{name: list(dims) for name, dims in inputs.shapes.items()}, **report.input_shapes}
    if shapes:  # the user's sizes, and the data input's that compress took from the data
        pipeline["input_shapes"] = shapes
    pipeline["passes"] = passes
    header = (
        f"# ONNXSat compress recipe: {report.chosen}\n"
        f"# `onnxsat run {pipeline_path.name}` rebuilds {Path(output_path).name} from {Path(input_path).name};\n"
        f"# {data_path.name} holds the samples quantization calibrates on"
        + (f", {fit_path.name} those pruning refits on.\n" if apart else " and pruning refits on.\n")
    )
    write_text_atomic(header + yaml.safe_dump(pipeline, sort_keys=False), pipeline_path)
    report.recipe_path = str(pipeline_path)
    return pipeline_path
