"""INT8 and 4-bit quantization on ONNX Runtime's quantizer, measured per node and kept inside a budget."""
