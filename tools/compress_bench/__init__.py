"""``python -m tools.compress_bench``: ``onnxsat compress`` on a trained ResNet and the real-model suite."""
