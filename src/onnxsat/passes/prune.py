"""``prune``: structured pruning along node association trees (``onnxsat prune``); its keys are
``PruneOptions``' fields, the names of the command's options (``data`` defaults to the run's)."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.core import OptionsPass
from onnxsat.pruning.prune import PruneOptions, prune_model


@dataclass
class PrunePass(
    OptionsPass, kind="prune", options_class=PruneOptions, transform=prune_model, lossy=True, dense_weights=True
):
    options: PruneOptions
    result_name = "the pruned model"
