"""The transformers benchmark (issue 20): ONNXSat, ORT's transformers optimizer and onnxslim on real exports.

``python -m tools.transformers_bench [--models DIR] [--build] [--markdown FILE] [--pairs N]``: each
tool optimizes BERT, ViT, GPT-2 and a tiny Llama in its own child process (wall time and that child's
peak RSS), then every result is timed against the original under ONNX Runtime by ``bench compare``'s
loop. A developer tool, not installed with onnxsat: building the models needs torch and transformers.
"""
