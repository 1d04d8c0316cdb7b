"""ONNX Runtime's optimizers and other well-kept peephole tools as lossless passes: ``ort`` (offline graph
optimization at a level), ``peephole`` (onnxscript's optimizer or onnxoptimizer) and ``ort-transformers``
(ONNX Runtime's transformers optimizer, as Olive's OrtTransformersOptimization runs it)."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsat.core import Model, Pass, PassContext, PassResult, lossless
from onnxsat.errors import SettingsError
from onnxsat.runtime.offline import LEVELS, optimize_offline
from onnxsat.runtime.peephole import TOOLS, peephole
from onnxsat.runtime.transformers import OPT_LEVELS, optimize_transformer


@dataclass
class OrtPass(Pass, kind="ort"):
    """ONNX Runtime's offline graph optimization at ``level`` basic, extended or all."""

    level: str = "extended"

    def check(self, place: str) -> None:
        if self.level not in LEVELS:
            raise SettingsError(f"{place}.level: unknown {self.level!r}; choose from {', '.join(LEVELS)}")

    def run(self, model: Model, context: PassContext) -> PassResult:
        return lossless(context, model, *optimize_offline(model.proto, self.level, model.base_dir))


@dataclass
class PeepholePass(Pass, kind="peephole"):
    """A well-kept peephole optimizer (onnxscript's, or onnxoptimizer)."""

    tool: str = "onnxscript"

    def check(self, place: str) -> None:
        if self.tool not in TOOLS:
            raise SettingsError(f"{place}.tool: unknown {self.tool!r}; choose from {', '.join(TOOLS)}")

    def run(self, model: Model, context: PassContext) -> PassResult:
        return lossless(context, model, *peephole(model.proto, self.tool, model.base_dir))


@dataclass
class OrtTransformersPass(Pass, kind="ort-transformers"):
    """ONNX Runtime's transformers optimizer."""

    model_type: str | None = None
    num_heads: int = 0
    hidden_size: int = 0
    opt_level: int = 0

    def check(self, place: str) -> None:
        if self.opt_level not in OPT_LEVELS:
            raise SettingsError(f"{place}.opt_level: must be one of {', '.join(map(str, OPT_LEVELS))}")

    def run(self, model: Model, context: PassContext) -> PassResult:
        optimized = optimize_transformer(
            model.proto, self.model_type, self.num_heads, self.hidden_size, self.opt_level, model.base_dir
        )
        return lossless(context, model, *optimized)
