"""INT8 quantization of ONNX models on top of ``onnxruntime.quantization``."""
