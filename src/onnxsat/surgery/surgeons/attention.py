"""Attention-mask constants that quantize badly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.surgery.graph_edit import consumers, copy_model
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register


@register
@dataclass
class ReplaceAttentionMaskValue(Surgeon):
    """Replace extended-attention-mask values below ``threshold`` with ``replacement``.

    Exporters fill masked positions with float32's lowest value (-3.4e38), which wrecks a quantizer's
    range. Float ``Constant``/``ConstantOfShape`` values and initializers with entries below
    ``threshold`` get ``replacement`` there, when every reader is an op a mask flows through (Add,
    Mul, Expand, Where, Shape, Cast, CastLike), so unrelated large tensors are left alone.

    Not exact: masked logits become ``replacement`` instead of ~-3.4e38. After a Softmax the masked
    probabilities become exp(replacement - max logit), 0 in float32 for the default -1e4 as long as
    the unmasked logits are above about -9900, so the outputs stay equal in practice.
    """

    exact: ClassVar[bool] = False
    ALLOWED_READERS: ClassVar[frozenset[str]] = frozenset(
        {"Add", "Mul", "Expand", "Where", "Shape", "Cast", "CastLike"}
    )

    threshold: float = -3e30
    replacement: float = -1e4

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        readers = consumers(graph)
        masks = [
            tensor
            for node in graph.node
            if node.op_type in ("Constant", "ConstantOfShape") and self._mask_reader_only(readers, node.output[0])
            for attribute in node.attribute
            if attribute.name == "value"
            for tensor in [attribute.t]
        ]
        masks += [tensor for tensor in graph.initializer if self._mask_reader_only(readers, tensor.name)]
        changed = 0
        for tensor in masks:
            if tensor.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                continue
            value = numpy_helper.to_array(tensor)
            if np.any(value < self.threshold):
                value = np.where(value < self.threshold, value.dtype.type(self.replacement), value)
                tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
                changed += 1
        if not changed:
            return SurgeryOutcome(
                result, False, f"no float constant below {self.threshold:g}: no mask value to replace"
            )
        return SurgeryOutcome(result, True, f"set {changed} mask constant(s) to {self.replacement:g}")

    def _mask_reader_only(self, readers: dict[str, list[onnx.NodeProto]], name: str) -> bool:
        return all(node.op_type in self.ALLOWED_READERS for node in readers.get(name, []))
