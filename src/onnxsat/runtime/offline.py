"""ONNX Runtime's offline mode: run its graph optimizations once and keep the optimized model.

ORT optimizes every model when a session is created ("online"); setting
``SessionOptions.optimized_model_filepath`` makes it also write the result, so a later session can
start from the optimized graph. Levels are cumulative: ``basic`` (constant folding, redundant-node
elimination, Conv+Add/Mul/BatchNorm fusion), ``extended`` (adds fusions into com.microsoft contrib
ops: FusedConv, Gelu, LayerNorm, attention), ``all`` (adds layout optimizations such as NCHWc).

Design choices, and why:

- The session is made from the model's bytes with external data read from ``base_dir`` (the same
  way ``verify.session`` does), and ORT writes into a private temporary folder. A model that had
  external data is written with its weights in a data file there, since ORT cannot put more than
  2 GiB in one protobuf; the result is then loaded whole, so nothing points into the deleted folder.
- Level ``all`` gets a warning: its NCHWc layouts and blocked weights are chosen for this CPU's
  vector width by this ORT build. Another machine or ORT version may run it slower or not at all.
- ORT lists every domain it knows in the written model's opset imports; the ones no node uses are
  dropped, so other tools do not trip over domains (``ai.onnx.training``) they have never heard of.
- Weights listed as graph inputs (IR 3 exports, such as the models bundled with the onnx package) are
  inputs a caller may override, so ORT neither folds them nor writes a model that runs without them
  (an ORT-optimized file of an IR-3 model still listed the folded-away weights as required inputs
  and would not run). They are optimized as the constants they are: a copy lists them as
  initializers only (IR version raised to 4, the first that allows it) and a notice says so. A result
  that still needs inputs the original did not is refused.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

from onnxsat import custom_ops
from onnxsat.errors import RuntimeUnsupportedError, SettingsError
from onnxsat.external_data import has_external_data
from onnxsat.proto_fields import drop_unused_domains
from onnxsat.verification import tidy_ort_message

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
"""Offline levels by name; each includes the ones before it."""

LAYOUT_WARNING = (
    "level 'all' writes hardware-specific layouts (NCHWc and other blocked formats) for this machine's CPU "
    f"and ONNX Runtime {ort.__version__}: only this machine's ORT build should run the result; "
    "ship 'extended' to other machines"
)

_CONTRIB_DOMAINS = ("com.microsoft", "com.microsoft.nchwc")
_DATA_FILE = "optimized.onnx.data"


def _options(level: str, target: Path, external: bool, base_dir: Path | None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 4  # ORT's own log lines would break the one-line error rule
    custom_ops.register(options)
    if base_dir is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    if external:
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", _DATA_FILE)
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    return options


def _required_inputs(model: onnx.ModelProto) -> set[str]:
    initializers = {t.name for t in model.graph.initializer}
    return {v.name for v in model.graph.input if v.name not in initializers}


def _weights_as_constants(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model``, or a copy whose initializers are no longer listed as graph inputs, and a notice."""
    initializers = {t.name for t in model.graph.initializer}
    listed = [v for v in model.graph.input if v.name in initializers]
    if not listed:
        return model, []
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for index in reversed(range(len(copy.graph.input))):
        if copy.graph.input[index].name in initializers:
            del copy.graph.input[index]
    copy.ir_version = max(copy.ir_version, 4)
    notice = f"{len(listed)} weights listed as graph inputs (IR {model.ir_version}) were optimized as constants"
    return copy, [notice]


def optimize_offline(
    model: onnx.ModelProto, level: str, base_dir: Path | None = None
) -> tuple[onnx.ModelProto, list[str]]:
    """ORT's offline optimization of ``model`` at ``level`` (basic, extended or all), and notices.

    ``base_dir`` is the folder of the model's external data, if it has any. Raises SettingsError for
    an unknown level and RuntimeUnsupportedError when ORT cannot load the model.
    """
    if level not in LEVELS:
        raise SettingsError(f"unknown ORT optimization level {level!r}; choose one of: {', '.join(LEVELS)}")
    external = has_external_data(model)
    if external and base_dir is None:
        raise SettingsError("the model keeps its weights in external data: give base_dir, the folder they are in")
    model, notices = _weights_as_constants(model)
    with tempfile.TemporaryDirectory(prefix="onnxsat-ort-") as folder:
        target = Path(folder) / "optimized.onnx"
        try:
            ort.InferenceSession(
                model.SerializeToString(),
                _options(level, target, external, base_dir),
                providers=["CPUExecutionProvider"],
            )
        except Exception as error:  # ORT raises several unrelated exception types
            message = tidy_ort_message(" ".join(str(error).split()))[:400] or type(error).__name__
            raise RuntimeUnsupportedError(f"ONNX Runtime cannot load the model to optimize it: {message}") from None
        optimized = onnx.load(str(target))  # external data, if ORT wrote any, is read into memory here
    drop_unused_domains(optimized)
    extra = _required_inputs(optimized) - _required_inputs(model)
    if extra:
        raise RuntimeUnsupportedError(
            f"ONNX Runtime's offline model requires inputs the original does not: {', '.join(sorted(extra))} "
            "(weights listed as graph inputs in an old IR version?); not using it"
        )
    notices.insert(0, f"ORT {level}: {len(model.graph.node)} -> {len(optimized.graph.node)} nodes")
    contrib = sorted({n.domain for n in optimized.graph.node if n.domain in _CONTRIB_DOMAINS})
    if contrib:
        notices.append(f"the result uses ONNX Runtime's own ops ({', '.join(contrib)}): only ONNX Runtime runs it")
    if level == "all":
        notices.append(LAYOUT_WARNING)
    return optimized, notices
