"""Surgeons that rewrite one computation as another: contrib ops lowered to standard ONNX ops (for
runtimes without ONNX Runtime's contrib kernels), and Erf and RMS normalization replaced by the forms
NPU compilers handle (Tanh, LpNormalization).

Each new node takes the place of the node it replaces in the node list, so the graph stays in
topological order, and the replacement's last node keeps the original output name, so readers and
graph outputs are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsat.op_kinds import DEFAULT_DOMAINS, FLOAT_TYPES, default_opset_version
from onnxsat.surgery.graph_edit import (
    constant_value,
    consumers,
    copy_model,
    initializers,
    unique_name,
    used_names,
)
from onnxsat.surgery.surgeon import Surgeon, SurgeryError, SurgeryOutcome, register
from onnxsat.surgery.surgeons.shapes import static_dims, tensor_types

_MS = "com.microsoft"
_INT64_MAX = 2**63 - 1

ERF_TANH_SCALE = 605 / 503
"""The a in erf(x) ~ tanh(a*x) (Olive's constant; 1.2028, within 0.001 of the minimax choice)."""


def _attribute(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _elem_type(types: dict[str, onnx.TypeProto.Tensor], name: str) -> int:
    """The element type of tensor ``name`` (0, ONNX's UNDEFINED, when unknown)."""
    return types[name].elem_type if name in types else TensorProto.UNDEFINED


def _splice(graph: onnx.GraphProto, replacements: dict[int, list[onnx.NodeProto]]) -> None:
    """Put each list of new nodes where the node at that index was, dropping it (an empty list drops it)."""
    nodes = []
    for index, node in enumerate(graph.node):
        nodes.extend(replacements.get(index, [node]))
    del graph.node[:]
    graph.node.extend(nodes)


def _drop_unread(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the initializers and Constant nodes among ``names`` that nothing reads any more."""
    read = set(consumers(graph)) | {value.name for value in graph.output}
    dead = names - read
    kept_tensors = [tensor for tensor in graph.initializer if tensor.name not in dead]
    del graph.initializer[:]
    graph.initializer.extend(kept_tensors)
    kept_nodes = [node for node in graph.node if not (node.op_type == "Constant" and node.output[0] in dead)]
    del graph.node[:]
    graph.node.extend(kept_nodes)


class _Emitter:
    """Builds the nodes that replace one node, each named ``<prefix>_<part>`` and unique in the graph."""

    def __init__(self, graph: onnx.GraphProto, prefix: str, opset: int, taken: set[str]) -> None:
        self.graph, self.prefix, self.opset, self.taken = graph, prefix, opset, taken
        self.nodes: list[onnx.NodeProto] = []

    def name(self, part: str) -> str:
        return unique_name(self.graph, f"{self.prefix}_{part}", self.taken)

    def constant(self, part: str, values: list[int] | float, elem_type: int = TensorProto.INT64) -> str:
        """A new initializer: ``values`` as a 1-D int64 tensor, or a float scalar of ``elem_type``."""
        name = self.name(part)
        shape = [len(values)] if isinstance(values, list) else []
        flat = values if isinstance(values, list) else [values]
        self.graph.initializer.append(helper.make_tensor(name, elem_type, shape, flat))
        return name

    def op(self, op_type: str, inputs: list[str], part: str, **attributes: object) -> str:
        output = self.name(f"{part}_output")
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=self.name(part), **attributes))
        return output

    def unsqueeze(self, value: str, axes: list[int], part: str) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [value, self.constant(f"{part}_axes", axes)], part)
        return self.op("Unsqueeze", [value], part, axes=axes)

    def slice(self, value: str, start: int, end: int, part: str) -> str:
        """``value[..., start:end]``."""
        if self.opset >= 10:
            bounds = [self.constant(f"{part}_start", [start]), self.constant(f"{part}_end", [end])]
            return self.op("Slice", [value, *bounds, self.constant(f"{part}_axes", [-1])], part)
        return self.op("Slice", [value], part, starts=[start], ends=[end], axes=[-1])

    def finish(self, output: str) -> list[onnx.NodeProto]:
        """The nodes built, the last one now writing ``output`` (the replaced node's output)."""
        self.nodes[-1].output[0] = output
        return self.nodes


def _prefix(node: onnx.NodeProto) -> str:
    return node.name or node.output[0]


@register
@dataclass
class ReplaceErfWithTanh(Surgeon):
    """Replace ``Erf(x)`` with ``Tanh(a*x)``, a = 605/503, for NPUs that have Tanh but no Erf.

    An approximation. Measured on a 4e-6 grid over [0, 8] (both sides are odd; beyond 8 both are 1 in
    float64): max |erf(x) - tanh(a*x)| = 0.01901, reached at |x| = 1.443. In GELU, x*(1 + erf(x/sqrt 2))/2,
    the absolute error 0.5*|x|*|erf(x/sqrt 2) - tanh(a*x/sqrt 2)| peaks at 0.02044 (|x| = 2.268) and
    stays below 1e-3 for |x| > 5.01
    (1e-4 for |x| > 6.52). Float32 rounding adds about 1e-7 to either bound.
    Erf nodes whose input is not a float tensor of known type are left as they are.
    """

    exact: ClassVar[bool] = False

    ERF_BOUND: ClassVar[float] = 0.0191
    GELU_BOUND: ClassVar[float] = 0.0205

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        types, taken = tensor_types(model), used_names(graph)
        replacements: dict[int, list[onnx.NodeProto]] = {}
        untyped = 0
        for index, node in enumerate(graph.node):
            if node.op_type != "Erf" or node.domain not in DEFAULT_DOMAINS:
                continue
            elem_type = _elem_type(types, node.input[0])
            if elem_type not in FLOAT_TYPES:
                untyped += 1
                continue
            count = len(replacements)
            scale = unique_name(graph, f"scale_{count}", taken)
            graph.initializer.append(helper.make_tensor(scale, elem_type, [], [ERF_TANH_SCALE]))
            scaled = unique_name(graph, f"mul_{count}", taken)
            replacements[index] = [
                helper.make_node(
                    "Mul", [node.input[0], scale], [scaled], name=unique_name(graph, f"Sub_Mul_{count}", taken)
                ),
                helper.make_node(
                    "Tanh", [scaled], [node.output[0]], name=unique_name(graph, f"Sub_Tanh_{count}", taken)
                ),
            ]
        left = f"; {untyped} left: input not of a known float type" if untyped else ""
        if not replacements:
            notice = "no Erf node: nothing to replace" if not untyped else f"no Erf node replaced{left}"
            return SurgeryOutcome(result, False, notice)
        _splice(graph, replacements)
        return SurgeryOutcome(
            result, True, f"replaced {len(replacements)} Erf nodes with Tanh({ERF_TANH_SCALE:.4f}*x){left}"
        )


@register
@dataclass
class DecomposeQuickGelu(Surgeon):
    """Lower ``com.microsoft`` QuickGelu to ``x * Sigmoid(alpha * x)`` (Mul, Sigmoid, Mul).

    Uses the node's own ``alpha`` attribute (1.702 by default); Olive always uses 1.702.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        types, taken = tensor_types(model), used_names(graph)
        replacements: dict[int, list[onnx.NodeProto]] = {}
        for index, node in enumerate(graph.node):
            if node.op_type != "QuickGelu" or node.domain != _MS:
                continue
            elem_type = _elem_type(types, node.input[0])
            if elem_type not in FLOAT_TYPES:
                continue
            emit = _Emitter(graph, _prefix(node), default_opset_version(result), taken)
            alpha = emit.constant("alpha", float(_attribute(node, "alpha", 1.702)), elem_type)
            gate = emit.op("Sigmoid", [emit.op("Mul", [node.input[0], alpha], "mul1")], "sigmoid")
            emit.op("Mul", [node.input[0], gate], "mul2")
            replacements[index] = emit.finish(node.output[0])
        if not replacements:
            return SurgeryOutcome(result, False, "no QuickGelu node of known float type: nothing to decompose")
        _splice(graph, replacements)
        return SurgeryOutcome(result, True, f"decomposed {len(replacements)} QuickGelu nodes into Mul-Sigmoid-Mul")


@register
@dataclass
class DecomposeRotaryEmbedding(Surgeon):
    """Lower ``com.microsoft`` RotaryEmbedding to Gather, Slice, Mul, Sub, Add and Concat (RoPE).

    Follows ONNX Runtime's kernel: input (batch, seq, hidden) or (batch, heads, seq, head_size);
    cos/sin caches (max_position, rotary_dim / 2) gathered at ``position_ids`` (batch, seq); each pair
    (x1, x2) of the first rotary_dim features (halves, or neighbours when ``interleaved``) becomes
    (x1*cos - x2*sin, x1*sin + x2*cos), the rest pass through. Olive's version assumes one head and the
    full head rotated; this one handles ``num_heads``, ``rotary_embedding_dim`` and ``interleaved``.
    Left as they are: nodes whose input rank or cache width is unknown, scalar position offsets,
    packed batching, and a ``scale`` other than 1 (ONNX Runtime's CPU kernel ignores it).
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        types, taken = tensor_types(model), used_names(graph)
        replacements: dict[int, list[onnx.NodeProto]] = {}
        skipped: list[str] = []
        for index, node in enumerate(graph.node):
            if node.op_type != "RotaryEmbedding" or node.domain != _MS:
                continue
            emit = _Emitter(graph, _prefix(node), default_opset_version(result), taken)
            reason = self._decompose(node, types, emit)
            if reason:
                skipped.append(f"{_prefix(node)}: {reason}")
            else:
                replacements[index] = emit.finish(node.output[0])
        left = f"; left {len(skipped)}: " + "; ".join(skipped) if skipped else ""
        if not replacements:
            return SurgeryOutcome(result, False, f"no RotaryEmbedding node decomposed{left}")
        _splice(graph, replacements)
        return SurgeryOutcome(result, True, f"decomposed {len(replacements)} RotaryEmbedding nodes{left}")

    @staticmethod
    def _decompose(node: onnx.NodeProto, types: dict[str, onnx.TypeProto.Tensor], emit: _Emitter) -> str:
        """Build the replacement into ``emit``; return why not instead when it cannot be built."""
        x, positions, cos_cache, sin_cache = node.input[:4]
        interleaved = bool(_attribute(node, "interleaved", 0))
        heads = int(_attribute(node, "num_heads", 0))
        rotary = int(_attribute(node, "rotary_embedding_dim", 0))
        x_dims, cache_dims = static_dims(types.get(x)), static_dims(types.get(cos_cache))
        position_dims = static_dims(types.get(positions))
        if float(_attribute(node, "scale", 1.0)) != 1.0 or _attribute(node, "is_packed_batching", 0):
            return "scale or packed batching set"
        if x_dims is None or len(x_dims) not in (3, 4):
            return "input rank unknown"
        if position_dims is None or len(position_dims) != 2:
            return "position_ids is not (batch, sequence)"
        if cache_dims is None or len(cache_dims) != 2 or cache_dims[1] is None:
            return "cos_cache width unknown"
        half = cache_dims[1]
        if rotary and (rotary != 2 * half or not heads):
            return "rotary_embedding_dim is not twice the cache width or num_heads is missing"
        if len(x_dims) == 3:  # (batch, seq, hidden) -> (batch, seq, heads, head_size)
            shape = [0, 0, heads, -1] if heads else [0, 0, -1, 2 * half]
            x = emit.op("Reshape", [x, emit.constant("split_heads_shape", shape)], "split_heads")
        heads_axis = 2 if len(x_dims) == 3 else 1
        axes = [heads_axis, 4] if interleaved else [heads_axis]
        cos = emit.unsqueeze(emit.op("Gather", [cos_cache, positions], "cos_g", axis=0), axes, "cos_r")
        sin = emit.unsqueeze(emit.op("Gather", [sin_cache, positions], "sin_g", axis=0), axes, "sin_r")
        rotated = emit.slice(x, 0, rotary, "rotated") if rotary else x
        if interleaved:  # (..., rotary) -> (..., rotary / 2, 2): each neighbour pair on the last axis
            pairs = emit.op("Reshape", [rotated, emit.constant("pairs_shape", [0, 0, 0, -1, 2])], "pairs")
            real, imag = emit.slice(pairs, 0, 1, "real"), emit.slice(pairs, 1, 2, "imag")
        else:
            real, imag = emit.slice(rotated, 0, half, "real"), emit.slice(rotated, half, 2 * half, "imag")
        out_real = emit.op(
            "Sub", [emit.op("Mul", [real, cos], "real_cos"), emit.op("Mul", [imag, sin], "imag_sin")], "out_r"
        )
        out_imag = emit.op(
            "Add", [emit.op("Mul", [real, sin], "real_sin"), emit.op("Mul", [imag, cos], "imag_cos")], "out_i"
        )
        out = emit.op("Concat", [out_real, out_imag], "concat", axis=-1)
        if interleaved:
            out = emit.op("Reshape", [out, emit.constant("unpair_shape", [0, 0, 0, -1])], "unpair")
        if rotary:
            passed = emit.slice(x, rotary, _INT64_MAX, "passed")
            out = emit.op("Concat", [out, passed], "join_passed", axis=-1)
        if len(x_dims) == 3:
            emit.op("Reshape", [out, emit.constant("merge_heads_shape", [0, 0, -1])], "merge_heads")
        return ""


def _l2norm_weight(weight: np.ndarray, width: int) -> np.ndarray:
    """The Mul weight that turns LpNormalization(x) back into RMS normalization: weight * sqrt(width).

    x / sqrt(mean(x^2)) = sqrt(N) * x / ||x||. An all-ones weight (rotated QuaRot/SpinQuant models)
    becomes the one-element [sqrt(N)], which broadcasts the same and is cheaper to multiply.
    """
    if np.all(weight == 1):
        weight = np.ones([1], dtype=weight.dtype)
    return (weight * np.sqrt(width)).astype(weight.dtype)


def _width(types: dict[str, onnx.TypeProto.Tensor], x: str, weight: np.ndarray) -> int | None:
    """N, the size of the normalized last axis: from x's static shape, else from the weight's last axis."""
    dims = static_dims(types.get(x))
    if dims and dims[-1]:
        return dims[-1]
    return int(weight.shape[-1]) if weight.ndim and weight.shape[-1] > 1 else None


class _ScaledWeights:
    """New initializers holding weight * sqrt(N), one per original weight, shared by every norm that
    shares that weight (a weight also read elsewhere keeps its value there)."""

    def __init__(self, graph: onnx.GraphProto, taken: set[str]) -> None:
        self.graph, self.taken = graph, taken
        self.names: dict[str, str] = {}

    def __call__(self, weight: str, width: int) -> str:
        if weight not in self.names:
            scaled = _l2norm_weight(numpy_helper.to_array(initializers(self.graph)[weight]), width)
            self.names[weight] = unique_name(self.graph, f"{weight}_l2norm_scaled", self.taken)
            self.graph.initializer.append(numpy_helper.from_array(scaled, self.names[weight]))
        return self.names[weight]


def _l2norm(emit: _Emitter, x: str) -> str:
    return emit.op("LpNormalization", [x], "L2Norm", axis=-1, p=2)


def _const_equals(graph: onnx.GraphProto, name: str, expected: float) -> bool:
    value = constant_value(graph, name)
    return value is not None and value.size == 1 and float(value.reshape(-1)[0]) == expected


@register
@dataclass
class RMSNormToL2Norm(Surgeon):
    """Replace the RMSNorm subgraph x / Sqrt(ReduceMean(Pow(x, 2), -1) + eps) * w with
    LpNormalization(x, p=2, axis=-1) * (w * sqrt(N)), N the normalized width.

    Also matched: x * (1 / Sqrt(...)) for the division, and a Cast before the weight Mul. The weight
    must be an initializer; every intermediate must have no other reader.

    Not exact: the epsilon under the root is dropped. For eps > 0 every output's relative error is
    sqrt(1 + eps/mean(x^2)) - 1 <= eps / (2*mean(x^2)): 5e-7 for eps = 1e-6 on rows with mean(x^2) = 1
    (float32 rounding level), but large on rows whose mean square is near eps. Rows of zeros stay zeros.
    """

    exact: ClassVar[bool] = False

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        types, taken = tensor_types(model), used_names(graph)
        positions = {node.output[0]: index for index, node in enumerate(graph.node)}
        scaled = _ScaledWeights(graph, taken)
        replacements: dict[int, list[onnx.NodeProto]] = {}
        replaced: list[onnx.NodeProto] = []
        for node in list(graph.node):
            match = self._match(graph, node) if node.op_type == "Pow" and node.domain in DEFAULT_DOMAINS else None
            if match is None:
                continue
            chain, weight_mul, weight = match
            width = _width(types, node.input[0], numpy_helper.to_array(initializers(graph)[weight]))
            if width is None:
                continue
            emit = _Emitter(graph, _prefix(node), default_opset_version(result), taken)
            normalized = _l2norm(emit, node.input[0])
            reader = consumers(graph)[chain[-1].output[0]][0]
            reader.input[:] = [normalized if name == chain[-1].output[0] else name for name in reader.input]
            weight_mul.input[:] = [scaled(weight, width) if name == weight else name for name in weight_mul.input]
            replacements.update({positions[part.output[0]]: [] for part in chain})
            replacements[positions[chain[-1].output[0]]] = emit.nodes
            replaced.extend(chain)
        if not replacements:
            return SurgeryOutcome(
                result, False, "no RMSNorm subgraph (Pow-ReduceMean-Add-Sqrt-Div-Mul): nothing to replace"
            )
        inputs = {name for part in replaced for name in part.input} | set(scaled.names)
        _splice(graph, replacements)
        _drop_unread(graph, inputs)
        count = sum(1 for part in replaced if part.op_type == "Pow")
        return SurgeryOutcome(result, True, f"replaced {count} RMSNorm subgraphs with LpNormalization")

    @staticmethod
    def _match(
        graph: onnx.GraphProto, power: onnx.NodeProto
    ) -> tuple[list[onnx.NodeProto], onnx.NodeProto, str] | None:
        """(the nodes from Pow to the last one before the weight Mul, that Mul, its weight), or None."""
        readers, outputs = consumers(graph), {value.name for value in graph.output}
        x = power.input[0]

        def only_reader(node: onnx.NodeProto, op_type: str) -> onnx.NodeProto | None:
            found = readers.get(node.output[0], [])
            if len(found) != 1 or found[0].op_type != op_type or node.output[0] in outputs:
                return None
            return found[0]

        if not _const_equals(graph, power.input[1], 2.0):
            return None
        mean = only_reader(power, "ReduceMean")
        if mean is None or not RMSNormToL2Norm._last_axis_kept(graph, mean):
            return None
        add = only_reader(mean, "Add")
        sqrt = only_reader(add, "Sqrt") if add is not None else None
        divide = only_reader(sqrt, "Div") if sqrt is not None else None
        if (
            divide is None
            or constant_value(graph, add.input[1] if add.input[0] == mean.output[0] else add.input[0]) is None
        ):
            return None
        chain = [power, mean, add, sqrt, divide]
        if list(divide.input) != [x, sqrt.output[0]]:  # the x * (1 / sqrt) form
            multiply = only_reader(divide, "Mul")
            if not _const_equals(graph, divide.input[0], 1.0) or multiply is None or x not in multiply.input:
                return None
            chain.append(multiply)
        last = chain[-1]
        following = only_reader(last, "Mul") or only_reader(last, "Cast")
        if following is not None and following.op_type == "Cast":
            following = only_reader(following, "Mul")
        if following is None:
            return None
        weight = next((name for name in following.input if name in initializers(graph)), None)
        graph_inputs = {value.name for value in graph.input}
        return None if weight is None or weight in graph_inputs else (chain, following, weight)

    @staticmethod
    def _last_axis_kept(graph: onnx.GraphProto, mean: onnx.NodeProto) -> bool:
        """Whether the ReduceMean averages over the last axis only, keeping it (axes as attribute or input)."""
        if not _attribute(mean, "keepdims", 1):
            return False
        axes = _attribute(mean, "axes", None)
        if axes is None and len(mean.input) > 1:
            value = constant_value(graph, mean.input[1])
            axes = None if value is None else value.reshape(-1).tolist()
        return axes is not None and list(axes) == [-1]


@register
@dataclass
class SimplifiedLayerNormToL2Norm(Surgeon):
    """Replace SimplifiedLayerNormalization (and RMSNormalization) with LpNormalization(x) * (w * sqrt(N)),
    and SkipSimplifiedLayerNormalization with Add(input, skip[, bias]) followed by the same.

    The Add keeps the skip node's ``input_skip_bias_sum`` output name. ``op_types`` (Olive's optional
    key) limits which of the three op types are converted (all by default). Left as they are: nodes
    whose scale is not an initializer, whose mean / inv_std_var outputs are read, or that normalize
    another axis than the last.

    Not exact: the epsilon under the root is dropped. For eps > 0 every output's relative error is
    sqrt(1 + eps/mean(x^2)) - 1 <= eps / (2*mean(x^2)): 5e-7 for eps = 1e-6 on rows with mean(x^2) = 1
    (float32 rounding level), but large on rows whose mean square is near eps. Rows of zeros stay zeros.
    """

    op_types: list[str] | None = None

    exact: ClassVar[bool] = False
    SUPPORTED: ClassVar[tuple[str, ...]] = (
        "SimplifiedLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "RMSNormalization",
    )

    def __post_init__(self) -> None:
        unknown = next((op for op in self.op_types or [] if op not in self.SUPPORTED), None)
        if unknown is not None:
            raise SurgeryError(
                f"SimplifiedLayerNormToL2Norm: cannot convert {unknown!r}; "
                f"op_types may hold {', '.join(self.SUPPORTED)}"
            )

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        types, taken = tensor_types(model), used_names(graph)
        wanted = set(self.op_types or self.SUPPORTED)
        scaled = _ScaledWeights(graph, taken)
        replacements: dict[int, list[onnx.NodeProto]] = {}
        for index, node in enumerate(graph.node):
            if node.op_type not in wanted or not self._convertible(graph, node, types):
                continue
            skip = node.op_type == "SkipSimplifiedLayerNormalization"
            weight = node.input[2 if skip else 1]
            width = _width(types, node.input[0], numpy_helper.to_array(initializers(graph)[weight]))
            if width is None:
                continue
            emit = _Emitter(graph, _prefix(node), default_opset_version(result), taken)
            x = node.input[0]
            if skip:
                x = emit.op("Add", node.input[:2], "Add")
                if len(node.input) > 3 and node.input[3]:
                    x = emit.op("Add", [x, node.input[3]], "AddBias")
                if len(node.output) > 3 and node.output[3]:
                    emit.nodes[-1].output[0] = node.output[3]
                    x = node.output[3]
            emit.op("Mul", [_l2norm(emit, x), scaled(weight, width)], "Mul")
            replacements[index] = emit.finish(node.output[0])
        if not replacements:
            kinds = "/".join(sorted(wanted))
            return SurgeryOutcome(result, False, f"no convertible {kinds} node: nothing to replace")
        _splice(graph, replacements)
        _drop_unread(graph, set(scaled.names))
        return SurgeryOutcome(result, True, f"replaced {len(replacements)} normalization nodes with LpNormalization")

    @staticmethod
    def _convertible(graph: onnx.GraphProto, node: onnx.NodeProto, types: dict[str, onnx.TypeProto.Tensor]) -> bool:
        """Whether the node is in its expected domain, normalizes the last axis, has an initializer scale
        and leaves its statistics outputs (mean, inv_std_var) unread."""
        skip = node.op_type == "SkipSimplifiedLayerNormalization"
        if node.domain not in ((_MS,) if skip else (*DEFAULT_DOMAINS, _MS)):
            return False
        axis = int(_attribute(node, "axis", -1))
        rank = len(static_dims(types.get(node.input[0])) or [])
        if axis != -1 and axis != rank - 1:
            return False
        weight = node.input[2 if skip else 1] if len(node.input) > (2 if skip else 1) else ""
        if weight not in initializers(graph) or weight in {value.name for value in graph.input}:
            return False
        statistics = node.output[1:3] if skip else node.output[1:]
        read = set(consumers(graph)) | {value.name for value in graph.output}
        return not any(name and name in read for name in statistics)
