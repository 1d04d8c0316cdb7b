"""Other ONNX optimizers that ``onnxsat bench compare`` measures ONNXSat against.

ONNXSat's claim is "smaller and faster without retraining"; that claim only means something next to
what the tools people already use achieve on the same model, timed in the same process. Each peer is
one entry in :data:`PEERS`: a name and a function ``ModelProto -> ModelProto``. Adding a peer is
adding one entry.

Design choices, and why:

- Most peers are optional (``pip install 'onnxsat[bench]'``; onnxscript and ONNX Runtime are core
  dependencies): none is needed to optimize, and CI installs only ``.[dev]``. Each function imports
  its package when called (the peephole and transformers peers through ``onnxsat.runtime``, which
  the ``peephole`` and ``ort-transformers`` pipeline passes use too); a missing package or a peer
  that fails is reported by the benchmark as *skipped* with a one-line reason, never a crash.
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

from onnxsat.errors import SettingsError
from onnxsat.runtime.peephole import peephole
from onnxsat.runtime.transformers import guess_model_type, optimize_transformer

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


@requires("onnxslim")
def onnxslim_slim(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxslim.slim`` with its defaults (constant folding, dead code, its pattern fusions)."""
    import onnxslim

    return onnxslim.slim(model)


@requires("onnxoptimizer")
def onnxoptimizer_optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxoptimizer.optimize`` with its default passes (fuse and eliminate), via ``runtime.peephole``."""
    return peephole(model, "onnxoptimizer")[0]


@requires("onnxscript.optimizer", "onnxscript")
def onnxscript_optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnxscript.optimizer.optimize`` (constant folding, dead code, inlining), via ``runtime.peephole``."""
    return peephole(model, "onnxscript")[0]


def guess_transformer_type(model: onnx.ModelProto) -> str:
    """``runtime.transformers.guess_model_type``, with a model that is not a transformer a skipped row."""
    try:
        return guess_model_type(model)
    except SettingsError as why:
        raise PeerSkipped(str(why)) from None


@requires("onnxruntime.transformers.optimizer", "onnxruntime")
def ort_transformers_optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``runtime.transformers.optimize_transformer`` for CPU at opt_level 0, model type guessed from the graph.

    ``num_heads`` and ``hidden_size`` are 0: the optimizer detects them from the graph where it can.
    ``opt_level=0`` (its Python fusions only; see ``runtime.transformers`` for why): ORT's own
    optimizations run anyway when the benchmark times the result under ORT all.
    """
    return optimize_transformer(model, guess_transformer_type(model), opt_level=0)[0]


PEERS: dict[str, PeerFunction] = {
    "onnxsim": onnxsim_simplify,
    "onnxslim": onnxslim_slim,
    "onnxoptimizer": onnxoptimizer_optimize,
    "onnxscript": onnxscript_optimize,
    "ort-transformers": ort_transformers_optimize,
}
"""Peer name -> function. Each result is timed under ONNX Runtime with all its optimizations on."""
