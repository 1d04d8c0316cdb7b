"""How a fused activation is written as attributes of ONNX Runtime's FusedConv and FusedGemm.

The com.microsoft contrib ops take the activation's name plus its parameters as attributes
(``activation_params`` for FusedConv). Clip's bounds are attributes before opset 11 and optional
constant inputs from opset 11 on; a missing bound means no bound.
"""

from __future__ import annotations

import numpy as np
import onnx

FLOAT32_MIN = float(np.finfo(np.float32).min)
FLOAT32_MAX = float(np.finfo(np.float32).max)


def activation_attributes(
    act_op: str, act_attrs: list[onnx.AttributeProto], act_inputs: list[np.ndarray | None]
) -> list[onnx.AttributeProto]:
    """Attributes that tell a fused op to apply ``act_op`` with these attributes and extra inputs."""
    result = [onnx.helper.make_attribute("activation", act_op)]
    if act_op == "Clip":
        by_name = {a.name: a for a in act_attrs}
        low = float(by_name["min"].f) if "min" in by_name else FLOAT32_MIN
        high = float(by_name["max"].f) if "max" in by_name else FLOAT32_MAX
        bounds = [*act_inputs, None, None][:2]
        if bounds[0] is not None:
            low = float(np.asarray(bounds[0]).reshape(-1)[0])
        if bounds[1] is not None:
            high = float(np.asarray(bounds[1]).reshape(-1)[0])
        result.append(onnx.helper.make_attribute("activation_params", [low, high]))
    return result
