"""Pipeline files (JSON or YAML): read, every key checked before any pass runs, then run by the runner.

A pipeline that fails in its fifth pass after minutes of saturation because of a typo in that pass
wastes the user's time, so every key of every pass and surgeon is checked first, and each problem is
one error naming the file and the place in it (``pipe.yaml: passes[2].surgeries[0]: ...``).

Relative paths in the file (``input_model``, ``output_model``, ``report``, ``inputs``, and ``data``, at the
top or in a pass, when it is a file there) are read from the file's folder, so a pipeline and its model can
move together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from onnxsat import model_io
from onnxsat.config_check import checked_keys
from onnxsat.data.sources import check_data_spec
from onnxsat.errors import DataError, InputNotFoundError, OnnxSatError, SettingsError
from onnxsat.inputs import InputSpec
from onnxsat.passes import Pass, catalogue
from onnxsat.runner import PipelineReport, RunSettings, run
from onnxsat.verification import Tolerance


@dataclass
class PipelineSettings:
    """The top-level keys of a pipeline file."""

    input_model: str
    output_model: str
    passes: list[dict[str, Any]]
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    """Sizes for dynamic input dims (verification, calibration, MACs), like ``--input-shape``."""
    inputs: str | None = None
    """A ``.npz`` feeds file of input values to use as given, like ``--inputs`` (relative to this file)."""
    data: str | None = None
    """Data for the passes that take it (sparsify, prune) unless a pass names its own; a path is read from
    the file's folder when it exists there."""
    rtol: float = 1e-4
    atol: float = 1e-5
    ort_rounding: float = 2.0
    """An output beyond rtol/atol still passes within this many times ONNX Runtime's own rounding (0: off)."""
    force: bool = False
    """Write the result even when a pass's verification fails (that pass and the rest still run)."""
    report: str | None = None
    """Where to write the pipeline report as JSON."""


@dataclass
class Pipeline:
    """A checked pipeline: resolved paths, and one built pass per entry of ``passes``."""

    source: Path
    settings: PipelineSettings
    input_path: Path
    output_path: Path
    report_path: Path | None
    steps: list[tuple[str, Pass]]
    """(place in the file, pass) in order."""
    inputs: InputSpec


def read_pipeline(
    path: str | Path,
    input_model: str | Path | None = None,
    output_model: str | Path | None = None,
    report: str | Path | None = None,
) -> Pipeline:
    """Read and check the pipeline at ``path``; the other arguments override the file's paths."""
    source = Path(path)
    if not source.is_file():
        raise InputNotFoundError(f"pipeline file not found: {source}")
    config = _parse(source)
    if input_model is not None:
        config["input_model"] = str(Path(input_model).resolve())
    if output_model is not None:
        config["output_model"] = str(Path(output_model).resolve())
    if report is not None:
        config["report"] = str(Path(report).resolve())
    try:
        return _checked(source, config)
    except OnnxSatError as error:
        raise type(error)(f"{source.name}: {error}") from None


def _parse(source: Path) -> dict[str, Any]:
    text = source.read_text(encoding="utf-8", errors="replace")
    try:
        if source.suffix.lower() == ".json":
            config = json.loads(text, object_pairs_hook=_json_mapping)
        else:
            config = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except DuplicateKeyError as error:
        raise SettingsError(f"{source.name}: {error}") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno}, column {error.colno}"
        raise SettingsError(f"{source.name}: not valid JSON: {error.msg} ({where})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SettingsError(f"{source.name}: not valid YAML: {problem}{where}") from None
    if not isinstance(config, dict):
        raise SettingsError(f"{source.name}: expected a mapping with input_model, output_model and passes")
    return config


class DuplicateKeyError(ValueError):
    """A key given twice in one mapping: YAML and JSON readers keep the last silently, so ``max_drop: 1%`` then
    ``max_drop: 5%`` further down would run with 5%, and a pass's second ``method`` would replace its first."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *defaults``: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise DuplicateKeyError(f"{key!r} is given twice (line {mark.line + 1}); give each key once")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _json_mapping(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise DuplicateKeyError(f"{key!r} is given twice in one object; give each key once")
        mapping[key] = value
    return mapping


def _checked(source: Path, config: dict[str, Any]) -> Pipeline:
    settings = PipelineSettings(**checked_keys(PipelineSettings, config, "pipeline", "a pipeline file"))
    if not settings.passes:
        raise SettingsError("passes: the list is empty; nothing to run")
    steps = [_step(entry, f"passes[{i}]") for i, entry in enumerate(settings.passes)]
    folder = source.resolve().parent
    input_path = (folder / settings.input_model).resolve()
    try:
        model_io.check_input_path(input_path)
        output_path = model_io.check_output_path(input_path, folder / settings.output_model)
        report_path = None
        if settings.report is not None:
            report_path = model_io.check_report_path(folder / settings.report, input_path, output_path)
    except OnnxSatError as error:
        raise type(error)(f"{_key_of(error)}{error}") from None
    named = {"data": settings.data} if settings.data is not None else {}
    named |= {f"{place}.{name}": spec for place, step in steps for name, spec in step.data_specs().items()}
    for key, spec in named.items():
        try:
            check_data_spec(spec, folder)
        except DataError as error:
            raise DataError(f"{key}: {error}") from None
    shapes = [f"{name}:{','.join(map(str, dims))}" for name, dims in settings.input_shapes.items()]
    feeds = folder / settings.inputs if settings.inputs is not None else None
    try:
        inputs = InputSpec.from_options(shapes, feeds)
    except OnnxSatError as error:
        raise type(error)(f"inputs: {error}") from None
    return Pipeline(source, settings, input_path, output_path, report_path, steps, inputs)


def _key_of(error: OnnxSatError) -> str:
    """Which key a path error came from, for the message."""
    return "input_model: " if isinstance(error, InputNotFoundError) else ""


def _step(entry: Any, place: str) -> tuple[str, Pass]:
    if not isinstance(entry, dict):
        raise SettingsError(f"{place}: expected a mapping with a 'type' key, got {type(entry).__name__}")
    passes = catalogue()
    kind = entry.get("type")
    if kind not in passes:
        raise SettingsError(f"{place}.type: unknown pass {kind!r}; known: {', '.join(sorted(passes))}")
    return place, passes[kind].from_config(entry, place)


def run_pipeline(pipeline: Pipeline, force: bool = False) -> PipelineReport:
    """Run ``pipeline`` and write its output; ``force`` (or the file's ``force``) writes a failing result.

    Raises :class:`VerificationFailedError` (with ``.report``) when a pass fails and nothing is forced.
    """
    settings = pipeline.settings
    folder = pipeline.source.resolve().parent
    data = settings.data
    if data is not None and (folder / data).exists():
        data = str(folder / data)
    for _, step in pipeline.steps:  # a pass's own data files, as the top-level one, are read from this folder
        for name, own in step.data_specs().items():
            if (folder / own).exists():
                setattr(step.options, name, str(folder / own))  # type: ignore[attr-defined]  (an OptionsPass)
    run_settings = RunSettings(
        inputs=pipeline.inputs,
        tolerance=Tolerance(settings.rtol, settings.atol, settings.ort_rounding),
        data=data,
        force=force or settings.force,
        reads=(str(pipeline.source),),
    )
    return run(
        pipeline.input_path,
        pipeline.output_path,
        pipeline.steps,
        run_settings,
        pipeline.report_path,
        pipeline=str(pipeline.source),
    )


def run_pipeline_file(
    path: str | Path,
    input_model: str | Path | None = None,
    output_model: str | Path | None = None,
    report: str | Path | None = None,
    force: bool = False,
) -> PipelineReport:
    """Read, check and run the pipeline file at ``path`` (the other arguments override its paths)."""
    return run_pipeline(read_pipeline(path, input_model, output_model, report), force)
