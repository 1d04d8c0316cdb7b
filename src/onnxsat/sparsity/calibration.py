"""Per-channel L2 norms of the activations that prunable weights multiply, measured with ONNX Runtime.

The calibrated method scores a weight element by |w| times the norm of its input channel over the
calibration inputs. The activations are captured by exposing each target's input tensor as an extra
graph output of a copy of the model and running every calibration batch through it; only running sums
of squares per channel are kept, so memory stays at one batch of activations.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat.sparsity.targets import SparsityTarget
from onnxsat.verification import session, with_outputs


def channel_norms(
    model: onnx.ModelProto, targets: list[SparsityTarget], batches: Iterable[dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """For each target weight, the L2 norm per input channel of its activation over all ``batches``."""
    activations = sorted({t.activation for t in targets})
    runner = session(with_outputs(model, activations), ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    sums: dict[str, np.ndarray] = {}
    axis_of = {t.activation: t.activation_axis for t in targets}
    ran = False
    for feeds in batches:
        ran = True
        for name, value in zip(activations, runner.run(activations, feeds), strict=True):
            value = np.asarray(value, dtype=np.float64)
            axis = axis_of[name] % value.ndim
            squares = np.sum(np.square(value), axis=tuple(a for a in range(value.ndim) if a != axis))
            sums[name] = sums.get(name, 0.0) + squares
    if not ran:
        raise ValueError("no calibration batch")
    return {t.name: np.sqrt(sums[t.activation]) for t in targets}
