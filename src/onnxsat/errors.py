"""Errors a user can cause, each with its own exit code, so scripts can tell them apart."""

from __future__ import annotations

from typing import Any


class OnnxSatError(Exception):
    """A problem with the user's input or settings: reported as one line, never a traceback."""

    exit_code = 1
    report: Any = None
    """What the command found before it stopped, when that is worth showing (a search's candidates): printed,
    and written where ``--report`` and ``--html`` say, as a result's report would be."""


class InputNotFoundError(OnnxSatError):
    """The model path does not exist or is not a regular file."""

    exit_code = 3


class InputChangedError(InputNotFoundError):
    """The model file, or a data file it reads, changed on disk during the run: weights read from it by then
    would mix its old and new contents."""


class NotOnnxError(OnnxSatError):
    """The file does not parse as an ONNX model (wrong format or truncated)."""

    exit_code = 4


class InvalidModelError(OnnxSatError):
    """The model parses but fails ``onnx.checker`` or refers to tensors nobody defines."""

    exit_code = 5


class RuntimeUnsupportedError(OnnxSatError):
    """ONNX Runtime cannot load or run the model (an opset or op it does not implement)."""

    exit_code = 6


class GuessedSizesError(RuntimeUnsupportedError):
    """ONNX Runtime cannot run the model on random inputs whose dynamic dims nobody sized: a run over larger
    sizes may (see ``runner``)."""


class OutputPathError(OnnxSatError):
    """The output path cannot be written safely (missing folder, same file as the input, a directory)."""

    exit_code = 7


class VerificationFailedError(OnnxSatError):
    """The optimized model does not match the original; it was not written."""

    exit_code = 8


class SettingsError(OnnxSatError):
    """An option has a value ONNXSat cannot use (a malformed --input-shape, an unknown target)."""

    exit_code = 9


class OutOfMemoryError(OnnxSatError):
    """The machine ran out of memory (a model, or inputs for its verification, too large for it)."""

    exit_code = 11


class UnsafeModelError(OnnxSatError):
    """The model asks ONNXSat to read a file outside its folder (external data); nothing was read."""

    exit_code = 10


class DataError(OnnxSatError):
    """Calibration or evaluation data ONNXSat cannot use: missing or empty, unreadable, of a shape the
    model does not take, or with labels outside the model's classes."""

    exit_code = 12


class MissingToolError(OnnxSatError):
    """A system program a command needs is not installed (Graphviz's ``dot`` for pictures of graphs)."""

    exit_code = 13


class MissingExtraError(OnnxSatError):
    """A command needs an optional part of ONNXSat that is not installed (``pip install 'onnxsat[report]'``)."""

    exit_code = 14


class NothingPaysError(SettingsError):
    """A search found no result worth writing: none inside the accuracy budget, or none faster (for
    ``quantize``, nor smaller) than the input beyond timing noise. Nothing was written; the report says
    what came closest. A ``SettingsError`` (a budget or mode to change), with its own exit code: no flag
    was wrong, and a script can tell the two apart."""

    exit_code = 15
