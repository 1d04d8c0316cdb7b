"""The retraining-free sparsification methods: which weight elements become zero.

Each method gives every element a score and zeroes the lowest ones; they differ in the score and in
whether the count is chosen per layer or for the whole model (Ashouri, Abdelrahman, Dos Remedios 2019):

- ``relative``: per layer, the ``s`` fraction of elements with the smallest |w| (a per-layer percentile).
- ``flat``: one threshold T for every layer, T a fraction of the smallest layer's span (max w - min w).
  The fraction is whatever makes the whole model reach ``s``: zeroing the globally smallest |w|.
- ``triangular``: per-layer thresholds growing linearly from the first layer's span to the last layer's
  (first convolution to last fully connected layer in a CNN), all scaled by one fraction; reaching ``s``
  overall means zeroing the globally smallest |w| / reference_l.
- ``calibrated``: per layer, score |w| times the L2 norm of the input channel the element multiplies,
  measured on calibration data (a small weight on a loud channel matters more than on a quiet one).

Counts are exact: ``round(s * n)`` elements per layer (or overall for the global methods), ties at the
threshold broken by position, already-zero weights counted (they score 0 and go first). A percentile
threshold compared with ``<`` would miss the requested level whenever values tie at the threshold.

Each method is a :class:`SparsityMethod` registered in :data:`METHODS` at the end of this module: a
per-layer method supplies the score its layers are cut on, a global one the reference span of every
layer. A new method is one more registered object here, plus its test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from onnxsat.errors import SettingsError
from onnxsat.registry import Registry
from onnxsat.sparsity.targets import SparsityTarget

LayerScores = Callable[[SparsityTarget, np.ndarray, Mapping[str, np.ndarray] | None], np.ndarray]
"""(weight, its flat |w|, activation norms per weight or None) -> the flat scores its lowest are cut on."""
References = Callable[[list[float]], np.ndarray]
"""The layers' weight spans (max w - min w, in layer order) -> each layer's reference span."""


@dataclass(frozen=True)
class SparsityMethod:
    """How one method chooses the zeros: per layer (``layer_scores``) or by one cut over the whole model
    on |w| / the layer's reference span (``references``)."""

    name: str
    layer_scores: LayerScores | None = None
    references: References | None = None
    needs_activations: bool = False
    """Scores use activation norms measured on calibration data (``sparsity.calibration``)."""

    @property
    def per_layer(self) -> bool:
        """Levels may differ per layer (the budget search's per-layer mode applies)."""
        return self.layer_scores is not None


METHODS: Registry[SparsityMethod] = Registry("sparsity method", "method")
"""Method name -> method, in registration order (the order ``--method`` lists them)."""


def register_method(method: SparsityMethod) -> SparsityMethod:
    if (method.layer_scores is None) == (method.references is None):
        raise TypeError(f"sparsity method {method.name} needs exactly one of layer_scores and references")
    return METHODS.register(method.name, method)


get_method = METHODS.lookup


@dataclass(frozen=True)
class LayerSparsity:
    """What pruning did to one weight."""

    name: str
    op_type: str
    shape: tuple[int, ...]
    zeros_before: int
    zeros_after: int
    threshold: float
    """Largest |w| set to zero (0.0 if none was)."""

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def sparsity(self) -> float:
        return self.zeros_after / self.size if self.size else 0.0


@dataclass
class MaskResult:
    """Per-layer masks (True = set to zero) and what they reach."""

    method: str
    layers: list[LayerSparsity]
    masks: dict[str, np.ndarray]
    notes: list[str] = field(default_factory=list)
    span_fraction: float | None = None
    """For flat and triangular: the common threshold as a fraction of its reference span(s)."""

    @property
    def total(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def zeros(self) -> int:
        return sum(layer.zeros_after for layer in self.layers)

    @property
    def sparsity(self) -> float:
        return self.zeros / self.total if self.total else 0.0


def check_sparsity(value: float, option: str = "--sparsity") -> float:
    if not 0.0 <= value < 1.0:
        raise SettingsError(f"{option} must be in [0, 1), got {value:g}")
    return value


def smallest(scores: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of the ``k`` smallest entries of a flat array; ties at the cut go by position."""
    mask = np.zeros(scores.size, dtype=bool)
    if k <= 0:
        return mask
    if k >= scores.size:
        mask[:] = True
        return mask
    cut = np.partition(scores, k - 1)[k - 1]
    below = scores < cut
    mask |= below
    ties = np.flatnonzero(scores == cut)[: k - int(below.sum())]
    mask[ties] = True
    return mask


def _span(values: np.ndarray) -> float:
    return float(values.max() - values.min()) if values.size else 0.0


def triangular_references(spans: list[float]) -> np.ndarray:
    """Per-layer reference spans growing linearly (in layer order) from the first layer's to the last's."""
    if len(spans) == 1:
        return np.array(spans, dtype=np.float64)
    return np.linspace(spans[0], spans[-1], num=len(spans))


def sparsity_masks(
    method: str,
    targets: list[SparsityTarget],
    weights: Mapping[str, np.ndarray],
    sparsity: float | Mapping[str, float],
    channel_norms: Mapping[str, np.ndarray] | None = None,
) -> MaskResult:
    """Masks for ``method`` at ``sparsity`` (one level, or for per-layer methods a level per weight name)."""
    chosen = get_method(method)
    if not targets:
        raise SettingsError("the model has no prunable weights (Conv, ConvTranspose, Gemm or MatMul initializers)")
    levels = {t.name: sparsity.get(t.name, 0.0) for t in targets} if isinstance(sparsity, Mapping) else None
    if levels is not None and not chosen.per_layer:
        per_layer = ", ".join(name for name, m in METHODS.items() if m.per_layer)
        raise SettingsError(f"per-layer levels need a per-layer method ({per_layer}), not {method}")
    magnitudes = {t.name: np.abs(np.asarray(weights[t.name], dtype=np.float64)).ravel() for t in targets}
    result = MaskResult(method=method, layers=[], masks={})
    if chosen.layer_scores is None:
        assert isinstance(sparsity, float | int) and chosen.references is not None
        _global_masks(chosen, targets, weights, magnitudes, float(sparsity), result)
    else:
        for target in targets:
            level = levels[target.name] if levels is not None else float(sparsity)  # type: ignore[arg-type]
            scores = chosen.layer_scores(target, magnitudes[target.name], channel_norms)
            result.masks[target.name] = smallest(scores, round(check_sparsity(level) * scores.size))
    for target in targets:
        mask, value = result.masks[target.name], magnitudes[target.name]
        result.layers.append(
            LayerSparsity(
                name=target.name,
                op_type=target.op_type,
                shape=target.shape,
                zeros_before=int(np.count_nonzero(value == 0)),
                zeros_after=int(np.count_nonzero(mask | (value == 0))),
                threshold=float(value[mask].max()) if mask.any() else 0.0,
            )
        )
        result.masks[target.name] = mask.reshape(target.shape)
    return result


def _global_masks(
    method: SparsityMethod,
    targets: list[SparsityTarget],
    weights: Mapping[str, np.ndarray],
    magnitudes: Mapping[str, np.ndarray],
    sparsity: float,
    result: MaskResult,
) -> None:
    """Flat and triangular: one cut over every layer's |w| / reference, reaching ``sparsity`` overall."""
    check_sparsity(sparsity)
    spans = [_span(np.asarray(weights[t.name], dtype=np.float64)) for t in targets]
    assert method.references is not None
    references = method.references(spans)
    references = np.where(references > 0, references, 1.0)  # an all-constant layer: plain |w|
    normalized = np.concatenate([magnitudes[t.name] / r for t, r in zip(targets, references, strict=True)])
    mask = smallest(normalized, round(sparsity * normalized.size))
    fraction = float(normalized[mask].max()) if mask.any() else 0.0
    result.span_fraction = fraction
    if fraction > 1.0:
        result.notes.append(
            f"reaching {sparsity:.1%} needs a threshold of {fraction:.2f}x the reference span: beyond the "
            f"{method.name} method's bound of 1x (the layers' weight ranges are narrow for this level)"
        )
    offset = 0
    for target in targets:
        result.masks[target.name] = mask[offset : offset + target.size]
        offset += target.size


def _calibrated_scores(
    target: SparsityTarget, magnitudes: np.ndarray, channel_norms: Mapping[str, np.ndarray] | None
) -> np.ndarray:
    if channel_norms is None or target.name not in channel_norms:
        raise SettingsError(f"the calibrated method needs activation norms for {target.name!r}")
    return magnitudes * channel_norms[target.name][target.channel_of_elements()].ravel()


register_method(SparsityMethod("flat", references=lambda spans: np.full(len(spans), min(spans))))
register_method(SparsityMethod("triangular", references=triangular_references))
register_method(SparsityMethod("relative", layer_scores=lambda target, magnitudes, norms: magnitudes))
register_method(SparsityMethod("calibrated", layer_scores=_calibrated_scores, needs_activations=True))
