"""Pipelines: an ordered list of passes read from a JSON or YAML file and run by ``onnxsat run``."""
