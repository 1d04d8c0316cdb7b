"""A seeded generator of random valid ONNX models, for differential fuzzing of the optimizer.

``generate_model(seed)`` builds one model from ``numpy.random.default_rng(seed)`` alone, so a seed is a complete
bug report; ``pattern_census`` and ``op_types`` read back what a model contains, from its structure.

- ``builder``: the graph under construction and the pool of tensors ops read, with their shapes and magnitudes.
- ``catalog``: how op builders register, with a draw weight and a first opset.
- ``elementwise``, ``reductions``, ``shapes``, ``nn``, ``control``: the op builders, one module per family.
- ``patterns``: what the rewrite rules match (Conv -> BatchNormalization -> Relu/Clip, Gemm -> Relu) and the
  near-misses they must refuse.
- ``generate``: assembling a model: opset, inputs, ops drawn from the catalog, outputs.
- ``census``: which op types, rule patterns, near-misses and graph features a model contains.
- ``bodies``: a separate generator (``generate_bodies_model``) of models with If/Loop/Scan nodes whose bodies are
  random graphs drawn from the same catalog, and ``control_census`` to count what control flow a model holds.
"""

from __future__ import annotations

from tools.fuzz.graphs.census import op_types, pattern_census
from tools.fuzz.graphs.generate import generate_model

__all__ = ["generate_model", "op_types", "pattern_census"]
