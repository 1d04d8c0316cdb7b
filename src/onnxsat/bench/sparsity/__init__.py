"""Experiments 2 and 3 of ``bench experiment``: how sparse a model can go, and what sparsity gives.

- **Experiment 2** (:mod:`.experiment2`, "how sparse can we go?"): every model, method and level, pruned and
  scored for top-1 and top-5 (or fidelity to the dense model without labels).
- **Experiment 3** (:mod:`.experiment3`, "what does sparsity give?"): the budget search's sparsest model inside
  the budget, timed against the dense model with dense and with sparse storage.
- :mod:`.common`: the settings, datasets and writers both share.

Settings decided deliberately (and written to ``experiment*_settings.json``):

- The baseline and every pruned variant run under the same ORT level (all optimizations: how the
  models would be deployed), in both experiments: a ratio between two levels would measure the level.
- Drops are baseline minus pruned, as fractions; the markdown shows them as points (0.01 = 1 point).
- Sparsity is zeros / elements over the prunable weights (Conv, ConvTranspose, Gemm, MatMul weights);
  biases and other tensors are not counted. The reached sparsity is reported beside the requested level.
- Speed ratios are medians over rounds of (dense time / variant time) *in that round*, which cancels
  drift; a second session of the dense model is timed as a noise probe, and a ratio is "faster" or
  "slower" only when its 90% bootstrap interval lies outside the probe's band (as ``bench compare``).
- Without ``data``, inputs are seeded standard-normal samples and the metric is fidelity; a model
  whose batch dim is fixed is fed batches of exactly that size (samples are trimmed to a multiple).
"""

from onnxsat.bench.sparsity.common import DEFAULT_LEVELS, ExperimentResult, SparsityExperimentSettings
from onnxsat.bench.sparsity.experiment2 import LevelRow, experiment_two
from onnxsat.bench.sparsity.experiment3 import DENSE, NOISE_PROBE, PRUNED, SPARSE, VARIANTS, TimingRow, experiment_three

__all__ = [
    "DEFAULT_LEVELS",
    "DENSE",
    "NOISE_PROBE",
    "PRUNED",
    "SPARSE",
    "VARIANTS",
    "ExperimentResult",
    "LevelRow",
    "SparsityExperimentSettings",
    "TimingRow",
    "experiment_three",
    "experiment_two",
]
