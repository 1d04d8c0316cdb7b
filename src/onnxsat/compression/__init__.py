"""``onnxsat compress``: the fastest model inside an accuracy budget, searched over pruning, quantization and fusion."""
