"""Other ONNX optimizers that ``onnxsat bench compare`` measures ONNXSat against.

ONNXSat's claim is "smaller and faster without retraining"; that claim only means something next to
what the tools people already use achieve on the same model, timed in the same process. Each peer is
one entry in :data:`PEERS`: a name and a function ``ModelProto -> ModelProto``. Adding a peer is
adding one entry.

Design choices, and why:

- The peers are optional (``pip install 'onnxsat[bench]'``): none is needed to optimize, and CI
  installs only ``.[dev]``. Each function imports its package when called; a missing package or a
  peer that fails is reported by the benchmark as *skipped* with a one-line reason, never a crash.
- A peer that does not apply to a model raises :class:`PeerSkipped` with the reason (ONNX Runtime's
  transformers optimizer has nothing to fuse in a CNN), so the table says why the row is empty.
- :func:`requires` names the module a peer imports, so the benchmark can import it *before* starting
  the clock (an import is not optimization time) and print the package's version.
- Each peer gets its own copy of the model: ORT's transformers optimizer edits the proto it is given.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata
from typing import TypeVar

import onnx

PeerFunction = Callable[[onnx.ModelProto], onnx.ModelProto]


class PeerSkipped(Exception):
    """The peer does not apply to this model; the message says why (one line)."""


_F = TypeVar("_F", bound=PeerFunction)


def requires(module: str, distribution: str | None = None) -> Callable[[_F], _F]:
    """Mark a peer function with the module it imports and the distribution that provides it."""

    def mark(function: _F) -> _F:
        function.requires = (module, distribution or module.split(".")[0])  # type: ignore[attr-defined]
        return function

    return mark


def requirement(function: PeerFunction) -> tuple[str, str] | None:
    """``(module, distribution)`` a peer imports, or None for a peer that needs nothing optional."""
    return getattr(function, "requires", None)


def import_requirement(function: PeerFunction) -> str:
    """Import what the peer needs (raises ImportError) and return ``"<distribution> <version>"`` or ``""``."""
    needed = requirement(function)
    if needed is None:
        return ""
    module, distribution = needed
    importlib.import_module(module)
    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return distribution


@requires("onnxsim")
def onnxsim_simplify(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxsim.simplify`` with its defaults (constant folding, shape inference, its fusions)."""
    import onnxsim

    simplified, _checked = onnxsim.simplify(model)  # check_n=0 by default: nothing to check
    return simplified


@requires("onnxoptimizer")
def onnxoptimizer_optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxoptimizer.optimize`` with its default passes (fuse and eliminate)."""
    import onnxoptimizer

    return onnxoptimizer.optimize(model)


@requires("onnxscript.optimizer", "onnxscript")
def onnxscript_optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxscript.optimizer.optimize``: constant folding, dead code, inlining, its rewrite rules."""
    import onnxscript.optimizer

    return onnxscript.optimizer.optimize(model)


_TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def guess_transformer_type(model: onnx.ModelProto) -> str:
    """``'bert'`` or ``'vit'`` for ORT's transformers optimizer, or raise PeerSkipped saying why not.

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
        raise PeerSkipped(f"not a transformer: image input but no {missing} (a CNN: nothing for it to fuse)")
    raise PeerSkipped("not a transformer: no input_ids/attention_mask input, no image input with attention")


@requires("onnxruntime.transformers.optimizer", "onnxruntime")
def ort_transformers_optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxruntime.transformers.optimizer.optimize_model`` for CPU, model type guessed from the graph.

    ``num_heads`` and ``hidden_size`` are 0: the optimizer detects them from the graph where it can.
    ``opt_level=0``: its Python fusions only. With the default level it first runs ONNX Runtime's own
    optimizer on a copy saved with external data, which fails on today's exports ("Cannot parse data
    from external tensors" in a Reshape's shape inference); ORT's own optimizations run anyway when
    the benchmark times the result under ORT all.
    """
    model_type = guess_transformer_type(model)
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(model, model_type=model_type, num_heads=0, hidden_size=0, use_gpu=False, opt_level=0)
    return optimized.model


PEERS: dict[str, PeerFunction] = {
    "onnxsim": onnxsim_simplify,
    "onnxoptimizer": onnxoptimizer_optimize,
    "onnxscript": onnxscript_optimize,
    "ort-transformers": ort_transformers_optimize,
}
"""Peer name -> function. Each result is timed under ONNX Runtime with all its optimizations on."""
