"""The opsets quantized forms need, and bringing a model to one with ONNX's version converter."""

from __future__ import annotations

import onnx

from onnxsat.op_kinds import default_opset_version
from onnxsat.surgery.graph_edit import drop_unused_initializers

PER_CHANNEL_OPSET = 13
"""Per-channel weights need DequantizeLinear's ``axis``, from opset 13; ORT's quantizer writes it whatever
the model's opset, and ORT then refuses an opset-12 model (Paddle2ONNX exports are opset 11-12). Older
models (the classic model-zoo CNNs are opset 7-9) are converted the same way."""
INT4_OPSET = 21
"""The first opset whose tensors may be 4-bit: ORT's quantizer stamps it on a model whose embedding tables it
quantizes, whatever ops the model holds (a ReduceMean with an ``axes`` attribute is then invalid)."""


def at_least_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` itself when its standard opset is ``opset`` or later, else converted there, at the IR version
    that opset came with, and checked. Raises what the converter or the checker raises on ops it cannot lift."""
    if default_opset_version(model, missing=opset) >= opset:
        return model
    from onnx import version_converter

    converted = version_converter.convert_version(model, opset)
    # the converter keeps the IR version: below 4 every initializer must also be a graph input, which the
    # quantizer's new scales and zero points are not; there the listing was a formality, not an input a
    # caller may override, and ORT neither folds nor pre-packs a weight listed as an input
    if converted.ir_version < 4:
        weights = {t.name for t in converted.graph.initializer}
        inputs = [v for v in converted.graph.input if v.name not in weights]
        del converted.graph.input[:]
        converted.graph.input.extend(inputs)
        drop_unused_initializers(converted.graph)  # the shapes folding left unread
    minimum = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)])
    converted.ir_version = max(converted.ir_version, minimum)
    onnx.checker.check_model(converted)
    return converted
