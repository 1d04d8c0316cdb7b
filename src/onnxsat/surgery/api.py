"""The Python surgery API: the vendor guide's workflow (load, edit, clear and re-infer shapes, check,
save, compare with the original) as methods on one object.

    from onnxsat.surgery.api import Surgery

    s = Surgery.load("ufld.onnx")
    s.remove_nodes_by_op({"Reshape": 1})
    s.gemm_to_conv("/cls/cls.1/Gemm", kernel=(10, 25), channels=8, outputs=2048, output_4d=True)
    s.gemm_slices_to_convs("/cls/cls.3/Gemm", output_4d=True)
    s.clear_shapes()
    s.infer_shapes()
    print(format_differences(s.compare()))   # against the model as loaded
    s.save("ufld_4d.onnx")

Every edit works on a copy of the model and replaces it only when the edit succeeds, so a refused
edit (a :class:`SurgeryError`, exit code 9, one line naming the problem) leaves the model as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.external_data_helper import load_external_data_for_model

from onnxsat import model_io
from onnxsat.errors import InvalidModelError
from onnxsat.surgery import graph_edit, node_edits
from onnxsat.surgery.split_merge import (
    OutputDifference,
    compare_models,
    fed_inputs,
    format_differences,
    merge_models,
    split_model,
)
from onnxsat.surgery.surgeon import SurgeryError

__all__ = ["OutputDifference", "Surgery", "SurgeryError", "format_differences"]

Dim = int | str | None
"""A dimension: a size, a symbolic name, or None for unknown."""


class Surgery:
    """An ONNX model under surgery: a private copy, edited by the methods, and the model it started as.

    ``model`` is the edited model (the live object: read it, or hand it to other tools); ``original``
    is the model as given, kept for :meth:`compare`.
    """

    def __init__(self, model: onnx.ModelProto, source: str | os.PathLike[str] | None = None) -> None:
        self.model = graph_edit.copy_model(model)
        self.original = graph_edit.copy_model(model)
        self.source = Path(source) if source is not None else None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Surgery:
        """Load ``path`` (refusing a missing or non-ONNX file), weights included, and remember it so
        :meth:`save` never overwrites it."""
        model, _ = model_io.load_runnable(path)
        load_external_data_for_model(model, str(model_io.model_folder(path)))  # references checked by load_model
        return cls(model, source=path)

    def _edit(self) -> onnx.ModelProto:
        """A working copy; the caller assigns it to ``self.model`` once its edit has succeeded."""
        return graph_edit.copy_model(self.model)

    # Initializers

    def find_initializer(self, name: str) -> np.ndarray | None:
        """The value of initializer ``name``, or None if the model has no such initializer."""
        for tensor in self.model.graph.initializer:
            if tensor.name == name:
                return numpy_helper.to_array(tensor)
        return None

    def add_initializer(self, name: str, value: np.ndarray, replace: bool = False) -> None:
        """Add ``value`` as initializer ``name``; ``replace`` overwrites an existing initializer of that name.

        A name some other tensor or node already uses is refused: the graph would silently rewire.
        """
        graph = self.model.graph
        exists = self.find_initializer(name) is not None
        if exists and not replace:
            raise SurgeryError(f"initializer {name!r} already exists; pass replace=True to overwrite it")
        if not exists and name in graph_edit.used_names(graph):
            raise SurgeryError(f"cannot add initializer {name!r}: a tensor or node of the model has that name")
        tensor = numpy_helper.from_array(np.asarray(value), name)
        if exists:
            next(t for t in graph.initializer if t.name == name).CopyFrom(tensor)
        else:
            graph.initializer.append(tensor)

    def remove_initializer(self, name: str, force: bool = False) -> None:
        """Remove initializer ``name``; refused while a node or graph output reads it, unless ``force``
        (then the model is incomplete until something else defines ``name``)."""
        graph = self.model.graph
        if self.find_initializer(name) is None:
            raise SurgeryError(f"the model has no initializer named {name!r}")
        readers = [node.name or node.op_type for node in graph_edit.consumers(graph).get(name, [])]
        readers += [f"graph output {name!r}"] if any(item.name == name for item in graph.output) else []
        if readers and not force:
            raise SurgeryError(
                f"initializer {name!r} is still read by {', '.join(readers[:3])}"
                f"{' and others' if len(readers) > 3 else ''}; pass force=True to remove it anyway"
            )
        node_edits.remove_where(graph.initializer, lambda tensor: tensor.name == name)
        node_edits.remove_where(graph.input, lambda item: item.name == name)  # an old-IR model lists it as an input

    # Nodes

    def remove_nodes(self, names: Iterable[str]) -> None:
        """Remove the named nodes, each bypassed: its readers read its data input instead.

        Suits Reshape, Flatten, Identity, Transpose, Squeeze and other one-input (plus constants),
        one-output nodes; a node that cannot be bypassed is refused.
        """
        if isinstance(names, str):
            names = [names]
        model = self._edit()
        node_edits.remove_nodes(model, [node_edits.find_node(model.graph, name) for name in names])
        self.model = model

    def remove_nodes_by_op(self, counts: Mapping[str, int]) -> None:
        """Remove the first ``count`` nodes of each op type, in graph order (``{"Reshape": 5}``).

        Refused when the model has fewer, since a count is only given when the user has counted them.
        """
        model = self._edit()
        chosen = []
        for op_type, count in counts.items():
            found = [node for node in model.graph.node if node.op_type == op_type]
            if count < 0 or count > len(found):
                raise SurgeryError(f"cannot remove {count} {op_type} nodes: the model has {len(found)}")
            chosen.extend(found[:count])
        node_edits.remove_nodes(model, chosen)
        self.model = model

    def gemm_to_conv(
        self,
        name: str,
        kernel: tuple[int, int] = (1, 1),
        channels: int | None = None,
        outputs: int | None = None,
        output_4d: bool = False,
    ) -> str:
        """Rewrite Gemm ``name`` as a Conv (R×S ``kernel``, C ``channels``, K ``outputs``, each checked
        against the weight when given); returns the Conv's name. See :func:`node_edits.gemm_to_conv`."""
        model = self._edit()
        conv = node_edits.gemm_to_conv(model, name, kernel, channels, outputs, output_4d)
        self.model = model
        return conv

    def gemm_slices_to_convs(
        self, name: str, kernel: tuple[int, int] = (1, 1), channels: int | None = None, output_4d: bool = False
    ) -> list[str]:
        """Rewrite Gemm ``name`` and the Slices reading it as one Conv per Slice; returns the Convs' names.
        See :func:`node_edits.gemm_slices_to_convs`."""
        model = self._edit()
        convs = node_edits.gemm_slices_to_convs(model, name, kernel, channels, output_4d)
        self.model = model
        return convs

    # Shapes

    def set_input_shape(self, name: str, shape: Sequence[Dim]) -> None:
        """Declare graph input ``name``'s shape (sizes, symbolic names, or None for unknown)."""
        self._set_shape(self.model.graph.input, "input", name, shape, fed_inputs(self.model.graph))

    def set_output_shape(self, name: str, shape: Sequence[Dim]) -> None:
        """Declare graph output ``name``'s shape, e.g. after a rewrite made it 4D."""
        graph = self.model.graph
        self._set_shape(graph.output, "output", name, shape, [item.name for item in graph.output])

    @staticmethod
    def _set_shape(
        values: Iterable[onnx.ValueInfoProto], kind: str, name: str, shape: Sequence[Dim], names: list[str]
    ) -> None:
        value = next((item for item in values if item.name == name and name in names), None)
        if value is None:
            raise SurgeryError(f"the model has no graph {kind} named {name!r} (its {kind}s: {', '.join(names)})")
        if not value.type.HasField("tensor_type"):
            raise SurgeryError(f"graph {kind} {name!r} is not a tensor; it has no shape to set")
        bad = [dim for dim in shape if not (dim is None or isinstance(dim, str) or (isinstance(dim, int) and dim >= 0))]
        if bad or isinstance(shape, str):
            raise SurgeryError(f"shape for {kind} {name!r} must list sizes >= 0, names or None; got {shape!r}")
        dims = value.type.tensor_type.shape.dim
        del dims[:]
        value.type.tensor_type.shape.SetInParent()  # a rank-0 shape is still a shape
        for dim in shape:
            entry = dims.add()
            if isinstance(dim, str):
                entry.dim_param = dim
            elif dim is not None:
                entry.dim_value = dim

    def clear_shapes(self) -> None:
        """Forget every inferred intermediate shape: after an edit they are stale (the guide's step 3)."""
        graph_edit.clear_shapes(self.model)

    def infer_shapes(self) -> None:
        """Re-infer intermediate and output shapes strictly; an inconsistent graph is refused (exit 5)."""
        try:
            self.model = onnx.shape_inference.infer_shapes(
                self.model, check_type=True, strict_mode=True, data_prop=True
            )
        except onnx.shape_inference.InferenceError as error:
            text = " ".join(str(error).split())
            raise InvalidModelError(f"shape inference fails on the edited model: {text[:400]}") from None

    # Split, merge, compare

    def split(self, at: Sequence[str]) -> tuple[Surgery, Surgery]:
        """(head, tail) at the tensors ``at``, each to edit on its own and :meth:`merge` back."""
        head, tail = split_model(self.model, at)
        return Surgery(head), Surgery(tail)

    @classmethod
    def merge(cls, head: Surgery, tail: Surgery) -> Surgery:
        """One model from ``head`` feeding ``tail``; its ``original`` is the merge of their originals, so
        :meth:`compare` checks the edits of both parts against the unsplit model."""
        merged = cls(merge_models(head.model, tail.model))
        merged.original = merge_models(head.original, tail.original)
        return merged

    def compare(
        self,
        reference: onnx.ModelProto | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        seed: int = 0,
    ) -> list[OutputDifference]:
        """Per-output differences of the edited model from ``reference`` (default: ``original``) on
        ``inputs`` or seeded random ones; :func:`format_differences` prints them as a table."""
        return compare_models(self.original if reference is None else reference, self.model, inputs, shapes, seed)

    # Check and save

    def check(self) -> None:
        """Run the ONNX checker; raises InvalidModelError (exit 5) with its message."""
        model_io.check_model(self.model)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Check the model, then write it atomically to ``path``: never the loaded file, never half a file."""
        # Without a loaded file there is no input to protect; os.devnull stands in as one no path can be.
        target = model_io.check_output_path(self.source if self.source is not None else os.devnull, path)
        self.check()
        model_io.save_model(self.model, target)
