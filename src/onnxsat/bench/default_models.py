"""The models each experiment runs on when the user names none: built from the zoo, no PyTorch needed.

Experiment 1 (fusion) wants architectures with fusable patterns: the trained digits CNN, the zoo's
SimpleClassifier, the demo CNN (BN, ReLU6, depthwise) and two of the real architectures shipped with
the onnx package (SqueezeNet, ShuffleNet) when this onnx build has them. Experiments 2 and 3 measure
accuracy, so they run on the one model with real data and real accuracy: the digits CNN on its
held-out digits.
"""

from __future__ import annotations

from pathlib import Path

from onnxsat import model_io
from onnxsat.zoo.catalogue import zoo_models

EXPERIMENT_MODELS = {
    1: ("digits_cnn", "simple_classifier", "demo_cnn", "light_squeezenet", "light_shufflenet"),
    2: ("digits_cnn",),
    3: ("digits_cnn",),
}
DEFAULT_DATA = "digits-test"
"""The data experiments 2 and 3 use with their default model."""


def experiment_models(number: int, out: Path) -> list[Path]:
    """Write experiment ``number``'s default models into ``out/models`` and return their paths
    (models this onnx build does not ship are left out)."""
    folder = model_io.output_folder(str(out / "models"), "--out")
    assert folder is not None
    available = zoo_models()
    return [available[name].write(folder, 0) for name in EXPERIMENT_MODELS[number] if name in available]
