"""``onnxsat profile``: MACs, parameters and memory per layer and in total, and two models side by side."""
