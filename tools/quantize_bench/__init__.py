"""Issue 21's quantization benchmark: ORT's quantizer alone, ``onnxsat quantize`` and Intel's onnx-neural-compressor,
side by side in one run, on a ResNet trained here and on the real-model suite.

Per model: the fp32 model under ORT with every optimization is the baseline; each quantizer's output is
checked (does ORT load it?), scored on held-out real inputs that no quantizer calibrated on (top-1 against
labels for the digits ResNet, the catalogue's agreement with the fp32 outputs for the real models), and
timed against the baseline in the same interleaved rounds (``onnxsat.timing``: one intra-op thread,
batch 1, median of per-round ratios). Modules: ``cases`` (models and their calibration/evaluation data),
``quantizers`` (one function per quantizer, each timed on its own), ``latency`` (the rounds), ``table``
(rows, Markdown, geometric means), ``bench`` (the loop), ``inc_runner`` (runs inside the neural-compressor
venv).

``python -m tools.quantize_bench --markdown benchmarks/quantize_issue21.md [--models digits_resnet ppocr_cls]``
from the repository root.
"""
