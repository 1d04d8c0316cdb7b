"""Element types for the tensors ONNX's shape inference cannot type, so the quantizer sees them.

ONNX Runtime's quantizer calibrates and quantizes only tensors whose type it finds in the model's
``value_info`` after ONNX's shape inference, and that inference knows no ``com.microsoft`` op: every
tensor an ORT-optimized model computes after its first ``SkipLayerNormalization`` or ``BiasGelu`` goes
untyped. The quantizer then leaves those activations unquantized yet still quantizes the biases of the
Gemms that read them, and fails ("Unable to get valid quantization scale for input ... when quantizing
bias"). ONNX Runtime types every tensor when it loads a model, contrib ops included: its types fill the
gaps.
"""

from __future__ import annotations

import onnx
import onnxruntime as ort
from onnx import helper

from onnxsat.external_data import structure_view
from onnxsat.verification import ort_element_type, session, with_outputs


def untyped_tensors(model: onnx.ModelProto) -> list[str]:
    """The main graph's node outputs ONNX's shape inference gives no type, in graph order."""
    try:
        inferred = onnx.shape_inference.infer_shapes(structure_view(model)).graph
    except Exception:  # onnx raises several types on graphs it cannot infer; the quantizer's own run says why
        return []
    typed = {
        v.name for v in [*inferred.input, *inferred.value_info, *inferred.output] if v.type.HasField("tensor_type")
    }
    typed |= {t.name for t in model.graph.initializer}
    return [name for node in model.graph.node for name in node.output if name and name not in typed]


def type_from_runtime(model: onnx.ModelProto) -> int:
    """In place: a ``value_info`` with the element type ONNX Runtime gives each tensor of
    :func:`untyped_tensors` (no shape: the quantizer needs the type only); how many were typed. A model ORT
    cannot load is left as it is (the quantizer's own error says what fails)."""
    names = untyped_tensors(model)
    if not names:
        return 0
    try:
        loaded = session(with_outputs(model, names), ort.GraphOptimizationLevel.ORT_DISABLE_ALL, lean=True)
    except Exception:  # ORT's load errors have many types; the untyped tensors stay as they were
        return 0
    types = {arg.name: ort_element_type(arg.type) for arg in loaded.get_outputs()}
    typed = 0
    for name in names:
        elem_type = types.get(name)
        if elem_type is not None:
            model.graph.value_info.append(helper.make_tensor_value_info(name, elem_type, None))
            typed += 1
    return typed
