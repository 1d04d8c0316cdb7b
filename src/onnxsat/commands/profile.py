"""``onnxsat profile``: MACs, parameters and memory per layer (``onnxsat.profile.command``)."""

from onnxsat.profile.command import add_profile_parser as add_parser

ORDER = 80
__all__ = ["ORDER", "add_parser"]
