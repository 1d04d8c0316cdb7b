"""``sparsify``: unstructured sparsity (``onnxsat sparsify``), optionally inside an accuracy budget; its keys
are ``SparsifyOptions``' fields, the names of the command's options (``data`` defaults to the run's)."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.core import OptionsPass
from onnxsat.sparsity.sparsify import SparsifyOptions, sparsify_model


@dataclass
class SparsifyPass(
    OptionsPass,
    kind="sparsify",
    options_class=SparsifyOptions,
    transform=sparsify_model,
    lossy=True,
    dense_weights=True,
):
    options: SparsifyOptions
    result_name = "the sparsified model"
