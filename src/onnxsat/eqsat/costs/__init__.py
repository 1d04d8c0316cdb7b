"""Cost models that price one ONNX node from its signature, in estimated microseconds.

The extractor describes each candidate node as a ``NodeSignature`` and adds up ``node_cost`` over the
candidate graph, so the cheapest equivalent graph is the one predicted to run fastest. Three models:

* ``uniform``: 1.0 per node (fewer nodes is better); shapes are ignored.
* ``analytic`` (the default): a roofline of flops and bytes moved, calibrated on one core of this machine.
* ``measured``: each distinct signature timed alone in ONNX Runtime, cached on disk per machine,
  with the analytic figure as the fallback for what cannot be timed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from onnxsat.eqsat.costs.analytic import AnalyticCost
from onnxsat.eqsat.costs.measured import CostStats, Figure, MeasuredCost
from onnxsat.eqsat.costs.signature import CostModel, NodeSignature, TensorInfo
from onnxsat.eqsat.costs.uniform import UniformCost
from onnxsat.errors import SettingsError

DEFAULT_COST_MODEL = "analytic"

COST_MODELS: dict[str, Callable[..., CostModel]] = {
    UniformCost.name: UniformCost,
    AnalyticCost.name: AnalyticCost,
    MeasuredCost.name: MeasuredCost,
}
"""Cost model name -> factory taking the model's keyword options."""


def get_cost_model(name: str = DEFAULT_COST_MODEL, **options: object) -> CostModel:
    """The cost model called ``name``, built with ``options``; ``SettingsError`` for an unknown name or option."""
    factory = COST_MODELS.get(name)
    if factory is None:
        raise SettingsError(f"unknown cost model {name!r}; choose from {', '.join(sorted(COST_MODELS))}")
    accepted = [p for p in inspect.signature(factory).parameters if p != "self"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise SettingsError(
            f"cost model {name!r} has no option {', '.join(unknown)}; its options are {', '.join(accepted) or 'none'}"
        )
    return factory(**options)


__all__ = [
    "COST_MODELS",
    "DEFAULT_COST_MODEL",
    "AnalyticCost",
    "CostModel",
    "CostStats",
    "Figure",
    "MeasuredCost",
    "NodeSignature",
    "TensorInfo",
    "UniformCost",
    "get_cost_model",
]
