"""``onnxsat zoo``: build the built-in and bundled models as files (``onnxsat.zoo.command``)."""

from onnxsat.zoo.command import add_zoo_parser as add_parser

ORDER = 90
__all__ = ["ORDER", "add_parser"]
