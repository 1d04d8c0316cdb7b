"""ONNX Runtime's transformers optimizer (``onnxruntime.transformers.optimizer``), as Olive's
OrtTransformersOptimization runs it.

It fuses transformer sub-graphs that ORT does not fuse when it loads a model (attention, embedding
layer + LayerNorm, SkipLayerNorm, BiasGelu, ...) into com.microsoft contrib ops, per model type
(``bert``, ``gpt2``, ``vit``, ...). Its result runs only on ONNX Runtime.

Design choices, and why:

- ``opt_level=0`` by default: the optimizer's Python fusions only. At a higher level it first runs
  ORT's own optimizer on a copy it saves with external data, which failed on real exports ("Cannot
  parse data from external tensors" in a Reshape's shape inference); ORT's own optimizations run
  anyway when the result is loaded, or offline through ``runtime.offline``.
- The model type is guessed from the graph when not given (text inputs: bert; an image input with
  Softmax and LayerNorm: vit); a graph that looks like neither is refused with the reason, since the
  optimizer would find nothing to fuse in it.
- PyTorch: some ONNX Runtime releases import it with this module; 1.31 does not, but at ``opt_level``
  1 or more it imports torch (to log its version) before running ORT. Either way a missing torch is a
  SettingsError that says so, not an ImportError; ``opt_level=0`` needs no torch in 1.31.
- The optimizer edits the proto it is given, so it gets a copy (with external weights read in, as
  its fusions read weight values).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import onnxruntime as ort

from onnxsat.errors import RuntimeUnsupportedError, SettingsError
from onnxsat.report import op_counts
from onnxsat.runtime.peephole import whole_model

OPT_LEVELS = (0, 1, 2, 99)
"""``opt_level`` values the optimizer knows: 0 its fusions only, 1 ORT basic first, 2 extended, 99 all."""

_TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def guess_model_type(model: onnx.ModelProto) -> str:
    """``'bert'`` or ``'vit'``, or raise SettingsError saying why the model does not look like a transformer.

    BERT-like: an input named like ``input_ids`` / ``attention_mask`` / ``token_type_ids``. ViT-like: an
    image input (rank 4) and a graph with Softmax and LayerNormalization (or the ReduceMean form older
    opsets export it as). Anything else, a CNN for instance, has nothing this optimizer fuses.
    """
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    if any(key in v.name.lower() for v in inputs for key in _TEXT_INPUTS):
        return "bert"
    ops = {n.op_type for n in model.graph.node}
    image = any(len(v.type.tensor_type.shape.dim) == 4 for v in inputs if v.type.HasField("tensor_type"))
    if image and "Softmax" in ops and ops & {"LayerNormalization", "ReduceMean"}:
        return "vit"
    if image:
        missing = " or ".join(op for op in ("Softmax", "LayerNormalization") if op not in ops)
        raise SettingsError(f"not a transformer: image input but no {missing} (a CNN: nothing for it to fuse)")
    raise SettingsError("not a transformer: no input_ids/attention_mask input, no image input with attention")


def _optimizer() -> tuple[Callable[..., object], tuple[str, ...]]:
    """``optimize_model`` and the model types this ORT release knows, or a SettingsError saying what is missing."""
    try:
        from onnxruntime.transformers.optimizer import MODEL_TYPES, optimize_model
    except ImportError as error:
        if (error.name or "").split(".")[0] == "torch":
            raise SettingsError(
                f"ONNX Runtime {ort.__version__}'s transformers optimizer needs PyTorch: pip install torch"
            ) from None
        raise SettingsError(
            f"ONNX Runtime {ort.__version__}'s transformers optimizer cannot be imported: {error}"
        ) from None
    return optimize_model, tuple(MODEL_TYPES)


def _import_used_domains(model: onnx.ModelProto) -> None:
    """Add an opset import (version 1) for each contrib domain a node uses but the model does not import.

    The optimizer inserts com.microsoft nodes (Gelu, SkipLayerNormalization) without importing the
    domain when the input did not have it; ORT runs such a model, but ``onnx.checker`` refuses it.
    """
    imported = {o.domain for o in model.opset_import}
    for domain in sorted({n.domain for n in model.graph.node} - imported - {"", "ai.onnx"}):
        model.opset_import.append(onnx.helper.make_opsetid(domain, 1))


def optimize_transformer(
    model: onnx.ModelProto,
    model_type: str | None = None,
    num_heads: int = 0,
    hidden_size: int = 0,
    opt_level: int = 0,
    base_dir: Path | None = None,
) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` through ORT's transformers optimizer for CPU, and notices naming what it fused.

    ``num_heads`` and ``hidden_size`` of 0 let the optimizer read them from the graph. ``base_dir`` is
    the folder of the model's external data, if it has any.
    """
    optimize_model, model_types = _optimizer()
    if model_type is None:
        model_type = guess_model_type(model)
    if model_type not in model_types:
        raise SettingsError(f"unknown transformer model type {model_type!r}; choose one of: {', '.join(model_types)}")
    if opt_level not in OPT_LEVELS:
        raise SettingsError(f"opt_level must be one of {', '.join(map(str, OPT_LEVELS))} (got {opt_level})")
    if num_heads < 0 or hidden_size < 0:
        raise SettingsError(f"num_heads and hidden_size must be >= 0 (got {num_heads}, {hidden_size})")
    original = whole_model(model, base_dir)
    before = op_counts(original)  # counted first: the optimizer edits ``original`` in place
    try:
        result = optimize_model(
            original,
            model_type=model_type,
            num_heads=num_heads,
            hidden_size=hidden_size,
            opt_level=opt_level,
            use_gpu=False,
        )
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "torch":
            raise
        raise SettingsError(
            f"ONNX Runtime {ort.__version__}'s transformers optimizer needs PyTorch at opt_level {opt_level} "
            "(it runs ORT's own optimizer first): pip install torch, or use opt_level 0"
        ) from None
    except Exception as error:  # the optimizer raises whatever its fusions and ORT raise
        text = " ".join(str(error).split())[:300] or type(error).__name__
        raise RuntimeUnsupportedError(
            f"ONNX Runtime's transformers optimizer failed ({model_type}, opt_level {opt_level}): {text}"
        ) from None
    optimized = result.model
    _import_used_domains(optimized)
    added = op_counts(optimized) - before
    spelled = ", ".join(f"{op} {count}" for op, count in sorted(added.items())) or "nothing"
    notices = [
        f"ORT transformers optimizer ({model_type}, opt_level {opt_level}): {before.total()} -> "
        f"{len(optimized.graph.node)} nodes; new ops: {spelled}"
    ]
    if any(n.domain == "com.microsoft" for n in optimized.graph.node):
        notices.append("the result uses ONNX Runtime's own ops (com.microsoft): only ONNX Runtime runs it")
    return optimized, notices
