"""Benchmarks that print measured figures (``onnxsat bench ...``); they never assert timings."""
