"""Peephole optimization through well-kept libraries: onnxscript's optimizer or onnxoptimizer.

Olive's OnnxPeepholeOptimizer runs these two; ONNXSat offers them as a pass rather than re-implementing
their rules. They matter where ONNX Runtime does not fold: an export with ``optimize=False`` builds
Conv biases through ``Expand(CastLike(...))`` chains that only onnxscript's constant folding removes,
which then lets ORT fuse Conv+BN (measured with ONNX Runtime 1.31: ORT all alone ran such exports
at 1.00x of ORT off; onnxscript's optimizer then ORT all, 1.57x on ResNet-18 and 2.87x on MobileNetV2).

Design choices, and why:

- onnxscript is a core dependency (maintained with the PyTorch exporter); onnxoptimizer stays
  optional (``pip install 'onnxsat[bench]'``): a missing package is a SettingsError that says how to
  install it, not an ImportError traceback.
- Both libraries need every weight in memory (they fold constants). A model whose weights are in
  external data is given ``base_dir``; its references are checked first (inside that folder, in
  range), then a copy is filled, so the caller's model is never modified.
- The notices give the node count before and after, and warn about what ORT would otherwise have to
  redo: nodes computing only from weights (onnxoptimizer writes its BN-into-Conv fold that way) and
  weights left listed as graph inputs, which ORT treats as overridable and cannot constant-fold
  (onnxoptimizer raises IR 3 to 4 but keeps them listed; its Q/K/V merge left as a runtime Concat ran
  ViT at 0.90x under ORT off).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import onnx

from onnxsat.errors import SettingsError
from onnxsat.external_data import check_references, has_external_data

TOOLS = ("onnxscript", "onnxoptimizer")
"""Names :func:`peephole` accepts, in the order a user would try them."""

_MODULES = {"onnxscript": "onnxscript.optimizer", "onnxoptimizer": "onnxoptimizer"}


def whole_model(model: onnx.ModelProto, base_dir: Path | None) -> onnx.ModelProto:
    """A copy of ``model`` with every weight in memory, read from ``base_dir`` when it is external.

    Python optimizers read ``raw_data`` directly; an external reference would be an empty tensor to
    them, or a path resolved against the current directory.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if has_external_data(copy):
        if base_dir is None:
            raise SettingsError("the model keeps its weights in external data: give base_dir, the folder they are in")
        check_references(copy, base_dir)
        onnx.load_external_data_for_model(copy, str(base_dir))
    return copy


def weight_only_nodes(model: onnx.ModelProto) -> int:
    """Nodes (other than Constant) of the main graph whose inputs all derive from weights alone.

    onnxoptimizer's BN-into-Conv fusion writes the folded weights as such a chain of ops rather than
    as new initializers; a runtime that does not fold constants would recompute them on every run.
    Initializers also listed as graph inputs do not count as weights: a caller may override them.
    """
    graph = model.graph
    listed = {v.name for v in graph.input}
    constant = {t.name for t in graph.initializer if t.name not in listed} | {""}  # "": an omitted optional input
    count = 0
    for node in graph.node:  # topologically sorted, as the checker requires
        if node.op_type == "Constant" or (node.input and all(name in constant for name in node.input)):
            constant.update(node.output)
            count += node.op_type != "Constant"
    return count


def import_tool(tool: str) -> ModuleType:
    """The optimizer's module, or a SettingsError naming the unknown tool or the package to install."""
    if tool not in _MODULES:
        raise SettingsError(f"unknown peephole tool {tool!r}; choose one of: {', '.join(TOOLS)}")
    try:
        return importlib.import_module(_MODULES[tool])
    except ImportError as error:
        raise SettingsError(
            f"the {tool} peephole optimizer is not installed ({error}); pip install 'onnxsat[bench]'"
        ) from None


def peephole(
    model: onnx.ModelProto, tool: str = "onnxscript", base_dir: Path | None = None
) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` through onnxscript's optimizer or onnxoptimizer's default passes, and notices.

    onnxscript: constant folding and propagation, dead-code removal, function inlining and its rewrite
    rules. onnxoptimizer: its default fuse-and-eliminate passes (BN into Conv, nop elimination, ...).
    """
    module = import_tool(tool)
    original = whole_model(model, base_dir)
    before = len(original.graph.node)
    optimized = module.optimize(original)  # both take and return a ModelProto
    notices = [f"{tool}: {before} -> {len(optimized.graph.node)} nodes"]
    folded_late = weight_only_nodes(optimized)
    if folded_late:
        notices.append(
            f"{folded_late} nodes compute only from weights: they run on every inference unless the runtime "
            "constant-folds them (ORT does from level basic on; onnxscript's optimizer folds them offline)"
        )
    initializers = {t.name for t in optimized.graph.initializer}
    listed = [v.name for v in optimized.graph.input if v.name in initializers]
    if listed:
        names = ", ".join(listed[:3]) + (", ..." if len(listed) > 3 else "")
        notices.append(
            f"weights still listed as graph inputs ({len(listed)}: {names}): ONNX Runtime treats them as "
            "inputs a caller may override and does not constant-fold them"
        )
    return optimized, notices
