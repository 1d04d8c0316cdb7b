"""Matrix products rewritten into the forms a consumer prefers: Gemm, a 1x1 Conv (accelerators), a Gemm
back as MatMul + Add (ONNX Runtime's 4-bit MatMulNBits quantizer takes MatMuls only), an Einsum that is a
MatMul as one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat.op_kinds import FLOAT_TYPES
from onnxsat.proto_fields import bodies_of
from onnxsat.surgery.graph_edit import (
    constant_value,
    consumers,
    copy_model,
    drop_unused_initializers,
    initializers,
    unique_name,
)
from onnxsat.surgery.surgeon import Surgeon, SurgeryOutcome, register
from onnxsat.surgery.surgeons._editing import Splice, attribute, inferred_shapes, static


@register
@dataclass
class MatMulAddToGemm(Surgeon):
    """Fuse ``MatMul(A, B) + bias`` into ``Gemm(A, B, bias)`` (alpha = beta = 1).

    B must be 2D and the bias 1D of B's column count (or 1). A 2D A may have dynamic dims; a higher
    rank A needs static shapes and is reshaped to 2D before the Gemm and back after it. The Add's
    output keeps its name. Exact (same products and sums, up to float rounding order).
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        shapes = inferred_shapes(result)
        readers = consumers(graph)
        position = {id(node): index for index, node in enumerate(graph.node)}
        outputs = {item.name for item in graph.output}
        splice = Splice(result)
        fused = 0
        for index, matmul in enumerate(graph.node):
            (add, *others) = readers.get(matmul.output[0], [None]) if matmul.op_type == "MatMul" else [None]
            if add is None or others or add.op_type != "Add" or matmul.output[0] in outputs:
                continue
            bias = add.input[1] if add.input[0] == matmul.output[0] else add.input[0]
            a, b, c = (shapes.get(name) for name in (matmul.input[0], matmul.input[1], bias))
            if a is None or b is None or c is None or len(b) != 2 or len(c) != 1 or c[0] not in (1, b[1]) or len(a) < 2:
                continue
            base = matmul.name or "MatMul"
            if len(a) == 2:
                splice.after(
                    index, splice.node("Gemm", [matmul.input[0], matmul.input[1], bias], add.output[0], f"{base}_Gemm")
                )
            elif static(a) is not None and static(b) is not None:
                rows = splice.name(f"{base}_2d")
                product = splice.name(f"{base}_gemm_output")
                flat = splice.const(f"{base}_Reshape_pre_shape", np.array([math.prod(a[:-1]), a[-1]], dtype=np.int64))
                back = splice.const(f"{base}_Reshape_post_shape", np.array([*a[:-1], b[1]], dtype=np.int64))
                splice.after(
                    index,
                    splice.node("Reshape", [matmul.input[0], flat], rows, f"{base}_Reshape_pre"),
                    splice.node("Gemm", [rows, matmul.input[1], bias], product, f"{base}_Gemm"),
                    splice.node("Reshape", [product, back], add.output[0], f"{base}_Reshape_post"),
                )
            else:
                continue
            splice.drop(index)
            splice.drop(position[id(add)])
            fused += 1
        if not fused:
            return SurgeryOutcome(result, False, "no MatMul (2D weight) followed by Add (1D bias): nothing to fuse")
        splice.commit()
        return SurgeryOutcome(result, True, f"fused {fused} MatMul + Add pair(s) into Gemm")


@register
@dataclass
class GemmToMatMulAdd(Surgeon):
    """Split ``Gemm(A, B, C)`` with a constant 2D weight B into ``MatMul(A, B') + C'``.

    ``B'`` is B transposed (``transB``) and scaled by alpha, a new weight (B itself goes when nothing else
    reads it); ``C'`` is C scaled by beta (a constant, or a Mul when C is computed); ``transA`` becomes a
    Transpose of A. Nodes are named ``<gemm>_MatMul`` and ``<gemm>_Add``, as ONNX Runtime's dynamic quantizer
    names its own split, and the Gemm's output keeps its name. Exact up to float rounding order (and the
    rounding of ``alpha * B``). Gemms sharing a weight (an unrolled RNN's steps) share its remade copy. A weight
    that is also a graph input (a feed may replace it) or lies in a data file is not remade: its Gemm stays.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        weights = initializers(graph)
        splice = Splice(result)
        inputs = {item.name for item in graph.input}
        replaced: set[str] = set()
        remakes: dict[tuple[str, bool, float], str] = {}  # (weight, transB, alpha) -> its remade copy, made once
        split = 0
        for index, gemm in enumerate(graph.node):
            if gemm.op_type != "Gemm" or gemm.domain not in ("", "ai.onnx") or gemm.input[1] not in weights:
                continue
            stored = weights[gemm.input[1]]
            if len(stored.dims) != 2 or stored.data_type not in FLOAT_TYPES:
                continue
            alpha, beta = float(attribute(gemm, "alpha", 1.0)), float(attribute(gemm, "beta", 1.0))
            remade = bool(attribute(gemm, "transB", 0)) or alpha != 1.0
            if remade and (gemm.input[1] in inputs or stored.data_location == onnx.TensorProto.EXTERNAL):
                continue  # a weight a feed may replace stays what the node reads; one on disk is not read here
            base, output = gemm.name or "Gemm", gemm.output[0]
            nodes = []
            a = gemm.input[0]
            if attribute(gemm, "transA", 0):
                a = splice.name(f"{a}_transposed")
                nodes.append(splice.node("Transpose", [gemm.input[0]], a, f"{base}_Transpose", perm=[1, 0]))
            b = gemm.input[1]
            key = (b, bool(attribute(gemm, "transB", 0)), alpha)
            if remade and key in remakes:  # an unrolled RNN's Gemms share a weight: they share its copy too
                b = remakes[key]
            elif remade:
                weight = numpy_helper.to_array(stored)
                value = (weight.T if attribute(gemm, "transB", 0) else weight) * np.asarray(alpha, weight.dtype)
                b = remakes[key] = splice.const(f"{gemm.input[1]}_MatMul", np.ascontiguousarray(value))
                replaced.add(gemm.input[1])
            bias = gemm.input[2] if len(gemm.input) > 2 and gemm.input[2] else None
            product = splice.name(f"{output}_MatMul") if bias else output
            nodes.append(splice.node("MatMul", [a, b], product, f"{base}_MatMul"))
            if bias and beta != 1.0:
                constant = constant_value(graph, bias)
                if constant is not None:
                    bias = splice.const(f"{bias}_scaled", constant * np.asarray(beta, constant.dtype))
                else:
                    scale = splice.const(
                        f"{base}_beta", np.asarray(beta, onnx.helper.tensor_dtype_to_np_dtype(stored.data_type))
                    )
                    scaled = splice.name(f"{bias}_scaled")
                    nodes.append(splice.node("Mul", [bias, scale], scaled, f"{base}_Mul"))
                    bias = scaled
            if bias:
                nodes.append(splice.node("Add", [product, bias], output, f"{base}_Add"))
            splice.after(index, *nodes)
            splice.drop(index)
            split += 1
        split += sum(_split_in_bodies(body, weights, splice.taken) for node in graph.node for body in bodies_of(node))
        done = f"split {split} Gemm node(s) into MatMul + Add"
        return _committed(
            result, splice, replaced, done if split else None, "no Gemm with a constant 2D weight: nothing to split"
        )


@register
@dataclass
class EinsumToMatMul(Surgeon):
    """Rewrite ``Einsum(x, W)`` with a constant weight as a MatMul where the equation is one: ``x``'s last
    letters are contracted with ``W``'s first, in the same order, and the output is ``x``'s other letters then
    ``W``'s (Keras' EinsumDense: ``abc,cde->abde`` for attention's Q/K/V, ``abcd,cde->abe`` for its output).

    ``x`` is reshaped to ``[..., K]`` (K the contracted size, 0 copying each leading dim, so a dynamic batch
    stays dynamic), ``W`` becomes ``[K, N]`` and the product is reshaped back to the output's letters. ONNX
    Runtime's quantizer, pruning and sparsity know MatMul; an Einsum no pass touched. Exact up to float
    rounding order. A weight in a data file is not read here: its Einsum stays.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        weights = initializers(graph)
        inputs = {item.name for item in graph.input}
        splice = Splice(result)
        replaced: set[str] = set()
        rewritten = 0
        for index, node in enumerate(graph.node):
            if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
                continue
            if node.input[1] not in weights or node.input[1] in inputs:
                continue  # a weight a feed may replace stays what the node reads
            if weights[node.input[1]].data_location == onnx.TensorProto.EXTERNAL:
                continue  # in a data file, not read here
            weight = numpy_helper.to_array(weights[node.input[1]])
            equation = attribute(node, "equation", b"")
            split = _matmul_letters(equation.decode() if isinstance(equation, bytes) else str(equation), weight.ndim)
            if split is None or weight.dtype.kind != "f":
                continue
            kept_letters, contracted = split
            size = math.prod(weight.shape[:contracted])
            columns = weight.shape[contracted:]
            base = node.name or "Einsum"
            matrix = splice.const(f"{node.input[1]}_matrix", weight.reshape(size, math.prod(columns)))
            nodes, rows = [], node.input[0]
            if contracted != 1:
                rows = splice.name(f"{base}_rows")
                shape = splice.const(f"{base}_rows_shape", np.array([0] * kept_letters + [size], dtype=np.int64))
                nodes.append(splice.node("Reshape", [node.input[0], shape], rows, f"{base}_Reshape_rows"))
            product = node.output[0] if len(columns) == 1 else splice.name(f"{base}_product")
            nodes.append(splice.node("MatMul", [rows, matrix], product, f"{base}_MatMul"))
            if len(columns) != 1:
                back = splice.const(f"{base}_out_shape", np.array([0] * kept_letters + list(columns), dtype=np.int64))
                nodes.append(splice.node("Reshape", [product, back], node.output[0], f"{base}_Reshape_out"))
            replaced.add(node.input[1])
            splice.after(index, *nodes)
            splice.drop(index)
            rewritten += 1
        done = f"rewrote {rewritten} Einsum node(s) as MatMul"
        nothing = "no Einsum on a constant weight that is a MatMul: nothing to rewrite"
        return _committed(result, splice, replaced, done if rewritten else None, nothing)


def plain_gemm(node: onnx.NodeProto) -> bool:
    """A Gemm that is ``A @ B + C`` as written (no transposes, alpha and beta 1): it splits into MatMul + Add
    reading the same weight, with no copy of it (inside a body, where a new weight has no place)."""
    scaled = any(float(attribute(node, key, 1.0)) != 1.0 for key in ("alpha", "beta"))
    return not scaled and not any(attribute(node, key, 0) for key in ("transA", "transB"))


def _split_in_bodies(graph: onnx.GraphProto, outer: dict[str, onnx.TensorProto], taken: set[str]) -> int:
    """In place, in an If, Loop or Scan body and those inside it: each plain Gemm (no transposes, alpha and
    beta 1) of a constant 2D weight, the body's or the main graph's, as MatMul + Add reading the same weight,
    named as in the main graph. A merged KV-cache decoder holds every Linear in its two branches; left as
    Gemms, 4-bit quantization (which takes MatMuls) passed them all by. Others stay: a transposed or scaled
    weight would need a copy of it."""
    weights = {**outer, **initializers(graph)}
    split = 0
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        for body in bodies_of(node):
            split += _split_in_bodies(body, weights, taken)
        stored = weights.get(node.input[1]) if node.op_type == "Gemm" and len(node.input) > 1 else None
        if (
            stored is None
            or node.domain not in ("", "ai.onnx")
            or not plain_gemm(node)
            or len(stored.dims) != 2
            or stored.data_type not in FLOAT_TYPES
        ):
            nodes.append(node)
            continue
        base, output = node.name or "Gemm", node.output[0]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        product = unique_name(graph, f"{output}_MatMul", taken) if bias else output
        # node names as ORT's dynamic quantizer gives its own split (a branch's twin may have the same)
        nodes.append(onnx.helper.make_node("MatMul", node.input[:2], [product], name=f"{base}_MatMul"))
        if bias:
            nodes.append(onnx.helper.make_node("Add", [product, bias], [output], name=f"{base}_Add"))
        split += 1
    if split:
        del graph.node[:]
        graph.node.extend(nodes)
    return split


def _committed(
    result: onnx.ModelProto, splice: Splice, replaced: set[str], done: str | None, nothing: str
) -> SurgeryOutcome:
    """The outcome of a rewrite: the splice committed and the weights it replaced dropped where nothing reads
    them any more (another node, a body, a graph output), said by ``done``; or, when it did nothing (``done``
    None), the model unchanged, said by ``nothing``."""
    if done is None:
        return SurgeryOutcome(result, False, nothing)
    splice.commit()
    drop_unused_initializers(result.graph, among=replaced)
    return SurgeryOutcome(result, True, done)


def _matmul_letters(equation: str, weight_rank: int) -> tuple[int, int] | None:
    """(x's letters kept, W's letters contracted) when ``equation`` (``x,W->out``) is a MatMul as
    ``EinsumToMatMul`` says, else None."""
    equation = equation.replace(" ", "")
    if "->" not in equation or "." in equation or equation.count(",") != 1:
        return None
    inputs, out = equation.split("->")
    x, w = inputs.split(",")
    if len(w) != weight_rank or len(set(x)) != len(x) or len(set(w)) != len(w) or len(set(out)) != len(out):
        return None
    contracted = [letter for letter in w if letter in x and letter not in out]
    count = len(contracted)
    if not count or w[:count] != "".join(contracted) or x[len(x) - count :] != w[:count]:
        return None
    kept = x[: len(x) - count]
    if set(kept) & set(w) or out != kept + w[count:] or len(w) == count:
        return None
    return len(kept), count


@register
@dataclass
class MatMulToTransposeConvTranspose(Surgeon):
    """Compute ``MatMul(A, W)`` / ``Gemm(A, W, bias)`` with a constant 2D weight as a 1x1 Conv:
    A (2D ``[M, K]``, 3D ``[B, M, K]`` or 4D with one channel ``[B, 1, M, K]``) is lifted to
    ``[B, 1, M, K]``, transposed to ``[B, K, M, 1]`` (channels = K), convolved with the weight
    reshaped to ``[N, K, 1, 1]``, transposed back and squeezed to the original rank. Gemms with
    alpha/beta other than 1 or transA, and 4D inputs with more than one channel, are left alone.
    Exact up to float rounding order.
    """

    def apply(self, model: onnx.ModelProto) -> SurgeryOutcome:
        result = copy_model(model)
        graph = result.graph
        shapes = inferred_shapes(result)
        splice = Splice(result)
        converted = 0
        for index, node in enumerate(graph.node):
            if node.op_type not in ("MatMul", "Gemm"):
                continue
            weight = constant_value(graph, node.input[1])
            a = shapes.get(node.input[0])
            if (
                weight is None
                or weight.ndim != 2
                or a is None
                or len(a) not in (2, 3, 4)
                or (len(a) == 4 and a[1] != 1)
            ):
                continue
            if node.op_type == "Gemm":
                if (
                    attribute(node, "alpha", 1.0) != 1.0
                    or attribute(node, "beta", 1.0) != 1.0
                    or attribute(node, "transA", 0)
                ):
                    continue
                weight = weight if attribute(node, "transB", 0) else weight.T
            else:
                weight = weight.T
            conv_inputs = [splice.const(f"{node.input[1]}_conv", weight.reshape(*weight.shape, 1, 1))]
            if len(node.input) > 2 and node.input[2]:
                bias = constant_value(graph, node.input[2])
                if bias is None or bias.size not in (1, weight.shape[0]) or bias.ndim > 1:
                    continue
                conv_inputs.append(
                    splice.const(f"{node.input[2]}_conv", np.broadcast_to(bias.ravel(), weight.shape[:1]).copy())
                )
            base = node.name or node.op_type
            lift = {2: [0, 1], 3: [1], 4: []}[len(a)]
            lifted = splice.name(f"{base}_4d") if lift else node.input[0]
            channels, convolved, after = (splice.name(f"{base}_{part}") for part in ("nkm1", "conv", "back"))
            nodes = [splice.axes_node("Unsqueeze", node.input[0], lifted, lift, f"{base}_lift")] if lift else []
            nodes += [
                splice.node("Transpose", [lifted], channels, f"{base}_transpose_before", perm=[0, 3, 2, 1]),
                splice.node("Conv", [channels, *conv_inputs], convolved, f"{base}_conv"),
                splice.node(
                    "Transpose",
                    [convolved],
                    after if lift else node.output[0],
                    f"{base}_transpose_after",
                    perm=[0, 3, 2, 1],
                ),
            ]
            if lift:
                nodes.append(splice.axes_node("Squeeze", after, node.output[0], lift, f"{base}_back"))
            splice.after(index, *nodes)
            splice.drop(index)
            converted += 1
        if not converted:
            return SurgeryOutcome(result, False, "no MatMul/Gemm with a constant 2D weight: nothing to convert")
        splice.commit()
        return SurgeryOutcome(result, True, f"converted {converted} MatMul/Gemm node(s) to Transpose-Conv-Transpose")
