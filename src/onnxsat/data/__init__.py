"""Samples for measuring accuracy (digits, image folders, CIFAR-10, .npz) and the metrics computed on them."""

from onnxsat.data.metrics import Accuracy, evaluate, fidelity, run_logits, topk_accuracy
from onnxsat.data.sources import Dataset, load_dataset

__all__ = ["Accuracy", "Dataset", "evaluate", "fidelity", "load_dataset", "run_logits", "topk_accuracy"]
