"""``eqsat``: ONNXSat's equality-saturation optimizer (``onnxsat optimize``): lossless, verified inside
(``optimize_model`` also runs the checker on its input, its ``check`` phase)."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.core import OptionsPass
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model


@dataclass
class EqsatPass(
    OptionsPass,
    kind="eqsat",
    options_class=OptimizeOptions,
    transform=optimize_model,
    checks_input=True,
    weights_on_disk=True,
):
    options: OptimizeOptions

    def refusal(self) -> str:
        return "the optimized model does not match the original; nothing was written (use --force to write it anyway)"
