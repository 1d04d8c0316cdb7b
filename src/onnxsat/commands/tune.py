"""``onnxsat tune``: ONNX Runtime session settings measured side by side (``onnxsat.runtime.command``)."""

from onnxsat.runtime.command import add_tune_parser as add_parser

ORDER = 50
__all__ = ["ORDER", "add_parser"]
