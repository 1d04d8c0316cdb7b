"""Effective FLOPs of one node, from shapes alone: the compute half of the analytic roofline.

Counts are *effective* flops: one unit takes ``1 / FLOPS_PER_US`` microseconds, where ``FLOPS_PER_US`` is
the fp32 GEMM rate of ONNX Runtime on one core. GEMM-like ops (Conv, MatMul, Gemm, attention) count
2 flops per multiply-add. Everything that is slower per arithmetic operation than a GEMM is weighted up
so that it prices right against the same constant: a transcendental function costs tens to thousands of
effective flops per element (``ELEMENTWISE_FLOPS``, measured against ORT 1.31 kernels on this machine,
see ``analytic.py``), and a grouped convolution with few channels per group, which MLAS runs far below
GEMM peak, counts ``GROUPED_CONV_PENALTY`` times its arithmetic.

Every op not listed counts 1 effective flop per output element (data movement is priced by bytes, not
here). Shapes with unknowns use the defaults of ``tensors.py``; nothing here raises on odd signatures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from onnxsat.eqsat.costs.signature import NodeSignature, TensorInfo
from onnxsat.eqsat.costs.tensors import DEFAULT_DIM, DEFAULT_NUMEL, numel, resolve_shape

_MEMORY_BOUND_OPS = """Add Sub Mul Sum Mean Relu Abs Neg Clip Where Equal Less Greater LessOrEqual GreaterOrEqual
And Or Xor Not BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot ThresholdedRelu IsNaN IsInf BiasAdd"""

# Effective flops per output element, measured as (time of the op - time of Relu) on 2**20 float32
# elements with one ORT thread, converted at FLOPS_PER_US. Rounded; "1" means memory-bound at any size.
ELEMENTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys(_MEMORY_BOUND_OPS.split(), 1.0),
    "HardSigmoid": 2.0,
    "PRelu": 2.0,
    "Cast": 4.0,  # float->half is memory-bound; float->int64 measured ~40
    "Exp": 5.0,
    "Div": 14.0,
    "Reciprocal": 16.0,
    "Softsign": 18.0,
    "Round": 18.0,
    "Max": 20.0,
    "Min": 20.0,
    "LeakyRelu": 22.0,
    "Floor": 30.0,
    "Ceil": 38.0,
    "HardSwish": 31.0,
    "Tanh": 31.0,
    "Sigmoid": 36.0,
    "Sqrt": 47.0,
    "Erf": 55.0,
    "FastGelu": 70.0,
    "QuickGelu": 73.0,
    "Gelu": 75.0,
    "BiasGelu": 76.0,
    "Acos": 87.0,
    "Sign": 150.0,
    "Atan": 157.0,
    "Asin": 194.0,
    "Sin": 267.0,
    "Cos": 267.0,
    "Pow": 300.0,  # a general exponent measured ~700; ORT special-cases a constant 2 (~35)
    "Log": 310.0,
    "Elu": 322.0,
    "Selu": 322.0,
    "Celu": 390.0,
    "Mod": 1200.0,
    "Shrink": 1300.0,
    "Cosh": 1490.0,
    "Acosh": 1490.0,
    "Softplus": 2240.0,
    "Mish": 2270.0,
    "Tan": 2465.0,
    "Sinh": 3520.0,
    "Atanh": 3690.0,
    "Asinh": 4190.0,
}

GROUPED_CONV_PENALTY = 4.0
"""A depthwise 3x3 conv ran at ~60 000 flop/us against ~240 000 for dense convs (one thread, MLAS)."""

GROUPED_CONV_MAX_CHANNELS = 16
"""Input channels per group below which a grouped conv pays ``GROUPED_CONV_PENALTY``."""

POOL_TAP_FLOPS = 5.0
"""Effective flops per kernel tap of MaxPool / AveragePool (3x3 stride 1 measured ~4, 2x2 stride 2 ~18)."""

SOFTMAX_FLOPS = 20.0
"""Effective flops per element of Softmax (measured ~20; LogSoftmax ~29)."""

# Per input element. Normalizations read the tensor for statistics and again to normalize; the weights
# are measured on ORT 1.31 CPU kernels like the elementwise ones (shapes (1, 32..512, 256..768)). The
# contrib SkipLayerNormalization kernel is an outlier, ~11x slower than Add + LayerNormalization here:
# priced as measured, so the extractor does not "fuse" into it on this machine.
_NORMALIZATION_FLOPS: dict[str, float] = {
    "LayerNormalization": 60.0,
    "SkipLayerNormalization": 940.0,
    "SimplifiedLayerNormalization": 30.0,
    "SkipSimplifiedLayerNormalization": 125.0,
    "RMSNormalization": 30.0,
    "BatchNormalization": 2.0,  # inference: one scale and one shift
    "InstanceNormalization": 12.0,
    "GroupNormalization": 12.0,
    "MeanVarianceNormalization": 12.0,
    "LpNormalization": 4.0,
    # ORT's LRN kernel: ~62 ns per element at (1, 96, 55, 55) on this machine (17.9 ms), 12x the
    # Mul + banded 1x1 Conv + Pow + Mul it decomposes into (rules/lrn_decomposition.py).
    "LRN": 15000.0,
}

# Per input element.
_REDUCTION_FLOPS: dict[str, float] = {
    "ReduceSum": 1.0,
    "ReduceMean": 1.0,
    "ReduceMax": 1.0,
    "ReduceMin": 1.0,
    "ReduceProd": 1.0,
    "ReduceL1": 2.0,
    "ReduceL2": 2.0,
    "ReduceSumSquare": 2.0,
    "ReduceLogSum": 1.0,
    "ReduceLogSumExp": 1.0 + ELEMENTWISE_FLOPS["Exp"],
    "ArgMax": 1.0,
    "ArgMin": 1.0,
    "CumSum": 1.0,
    "GlobalAveragePool": 4.0,
    "GlobalMaxPool": 4.0,
    "GlobalLpPool": 8.0,
    "Softmax": SOFTMAX_FLOPS,
    "LogSoftmax": 29.0,
    "Hardmax": 2.0,
    "BiasSoftmax": SOFTMAX_FLOPS + 1.0,
    "TopK": 4.0,
}

VIEW_OPS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Dropout", "Constant"})
"""Ops ORT runs without touching the data (the output aliases the input, or becomes an initializer)."""

METADATA_OPS = frozenset({"Shape", "Size"})
"""Ops that read only the input's shape, never its data."""

GATHER_OPS = frozenset({"Gather", "GatherElements", "GatherND"})
"""Ops that read only the parts of their data input they copy out (an embedding lookup reads a few rows)."""


@dataclass(frozen=True)
class Shapes:
    """Resolves a signature's shapes with the caller's defaults for unknowns."""

    node: NodeSignature
    default_dim: int = DEFAULT_DIM
    default_numel: int = DEFAULT_NUMEL

    def input(self, index: int) -> TensorInfo | None:
        return self.node.inputs[index] if index < len(self.node.inputs) else None

    def output(self, index: int) -> TensorInfo | None:
        return self.node.outputs[index] if index < len(self.node.outputs) else None

    def in_shape(self, index: int) -> tuple[int, ...] | None:
        return resolve_shape(self.input(index), self.default_dim)

    def out_shape(self, index: int = 0) -> tuple[int, ...] | None:
        return resolve_shape(self.output(index), self.default_dim)

    def in_numel(self, index: int) -> int:
        return numel(self.input(index), self.default_dim, self.default_numel)

    def out_numel(self, index: int = 0) -> int:
        """Elements of an output; of unknown rank, guessed as the largest input of known rank (elementwise)."""
        info = self.output(index)
        if info is not None and info.shape is not None:
            return numel(info, self.default_dim)
        known = [numel(t, self.default_dim) for t in self.node.inputs if t is not None and t.shape is not None]
        return max(known) if known else self.default_numel

    def has_input(self, index: int) -> bool:
        return self.input(index) is not None


def _int_attr(node: NodeSignature, name: str, default: int) -> int:
    value = node.attribute(name, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _activation_flops(node: NodeSignature) -> float:
    """Per-element cost of the ``activation`` attribute of FusedConv / FusedGemm (com.microsoft)."""
    activation = node.attribute("activation")
    if isinstance(activation, bytes):
        activation = activation.decode("utf-8", "replace")
    if not isinstance(activation, str) or not activation:
        return 0.0
    return ELEMENTWISE_FLOPS.get(activation, 1.0)


def _conv(s: Shapes) -> float:
    node = s.node
    group = max(_int_attr(node, "group", 1), 1)
    weight, x = s.in_shape(1), s.in_shape(0)
    if weight is not None and len(weight) >= 2:
        channels_per_group, kernel = weight[1], math.prod(weight[2:])
    else:
        channels_per_group = x[1] // group if x is not None and len(x) >= 2 else 1
        kernel_shape = node.attribute("kernel_shape")
        kernel = math.prod(kernel_shape) if isinstance(kernel_shape, list) else 1
    out = s.out_numel(0)
    flops = 2.0 * out * max(channels_per_group, 1) * kernel
    if group > 1 and channels_per_group < GROUPED_CONV_MAX_CHANNELS:
        flops *= GROUPED_CONV_PENALTY
    if s.has_input(2):  # bias
        flops += out
    return flops


def _fused_conv(s: Shapes) -> float:
    flops = _conv(s) + s.out_numel(0) * _activation_flops(s.node)
    if s.has_input(3):  # Z, added before the activation
        flops += s.out_numel(0)
    return flops


def _conv_transpose(s: Shapes) -> float:
    weight = s.in_shape(1)
    per_input = 2.0 * math.prod(weight[1:]) if weight is not None and len(weight) >= 2 else 2.0
    flops = s.in_numel(0) * per_input
    if s.has_input(2):
        flops += s.out_numel(0)
    return flops


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def _matmul_out_numel(s: Shapes, a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> int:
    out = s.output(0)
    if out is not None and out.shape is not None:
        return s.out_numel(0)
    if a is None or b is None:
        return s.default_numel
    rows = a[-2] if len(a) >= 2 else 1
    cols = b[-1] if len(b) >= 2 else 1
    return math.prod(_broadcast(a[:-2], b[:-2])) * rows * cols


def _matmul(s: Shapes) -> float:
    a, b = s.in_shape(0), s.in_shape(1)
    trans_a = _int_attr(s.node, "transA", 0)
    if a:
        inner = a[-2] if trans_a and len(a) >= 2 else a[-1]
    elif b:
        inner = b[0] if len(b) == 1 else b[-2]
    else:
        inner = s.default_dim
    inner = _int_attr(s.node, "K", inner)  # MatMulNBits states K; its B is packed
    return 2.0 * _matmul_out_numel(s, a, b) * inner


def _fused_matmul(s: Shapes) -> float:
    return _matmul(s) + s.out_numel(0)  # alpha scaling


def _gemm(s: Shapes) -> float:
    a = s.in_shape(0)
    two_d = a is not None and len(a) == 2
    inner = (a[0] if _int_attr(s.node, "transA", 0) else a[1]) if a is not None and two_d else s.default_dim
    b, info = s.in_shape(1), s.output(0)
    if (info is None or info.shape is None) and a is not None and two_d and b is not None and len(b) == 2:
        out = (a[1] if _int_attr(s.node, "transA", 0) else a[0]) * (b[0] if _int_attr(s.node, "transB", 0) else b[1])
    else:
        out = s.out_numel(0)
    flops = 2.0 * out * inner
    if s.has_input(2):
        flops += out
    return flops


def _fused_gemm(s: Shapes) -> float:
    return _gemm(s) + s.out_numel(0) * _activation_flops(s.node)


def _attention(s: Shapes) -> float:
    """com.microsoft Attention: QKV projection, QK^T, softmax, times V (past state ignored)."""
    x, weight = s.in_shape(0), s.in_shape(1)
    heads = max(_int_attr(s.node, "num_heads", 1), 1)
    if x is None or len(x) != 3:
        return 1.0 * s.out_numel(0)
    batch, seq, hidden_in = x
    qkv = weight[1] if weight is not None and len(weight) == 2 else 3 * hidden_in
    hidden = qkv / 3
    projection = 2.0 * batch * seq * hidden_in * qkv
    scores = 2.0 * 2.0 * batch * seq * seq * hidden
    return projection + scores + SOFTMAX_FLOPS * batch * heads * seq * seq


def _multi_head_attention(s: Shapes) -> float:
    """com.microsoft MultiHeadAttention on projected Q, K, V: QK^T, softmax, times V."""
    query, key = s.in_shape(0), s.in_shape(1)
    heads = max(_int_attr(s.node, "num_heads", 1), 1)
    if query is None or len(query) not in (3, 5):
        return 1.0 * s.out_numel(0)
    batch, seq = query[0], query[1]
    hidden = query[2] if len(query) == 3 else query[2] * query[4]  # (B, S, N, 3, H) packed QKV
    if key is not None and len(key) == 3:
        kv_len = key[1]
    elif key is not None and len(key) == 4:
        kv_len = key[2]  # (B, N, L, H)
    else:
        kv_len = seq
    return 4.0 * batch * seq * kv_len * hidden + SOFTMAX_FLOPS * batch * heads * seq * kv_len


def _pool(s: Shapes) -> float:
    kernel_shape = s.node.attribute("kernel_shape")
    kernel = math.prod(kernel_shape) if isinstance(kernel_shape, list) and kernel_shape else 1
    per_tap = POOL_TAP_FLOPS * (2.0 if s.node.op_type == "LpPool" else 1.0)
    return s.out_numel(0) * kernel * per_tap


def _rnn(s: Shapes) -> float:
    """LSTM / GRU / RNN: input and recurrent GEMMs for every step plus the gate nonlinearities."""
    x, w, r = s.in_shape(0), s.in_shape(1), s.in_shape(2)
    if x is None or w is None or r is None or len(x) != 3:
        return 1.0 * s.out_numel(0)
    steps, batch = (x[1], x[0]) if _int_attr(s.node, "layout", 0) else (x[0], x[1])
    gates = 2.0 * steps * batch * (math.prod(w) + math.prod(r))
    gate_units = math.prod(w[:2]) if len(w) >= 2 else 1  # directions x gates x hidden
    return gates + ELEMENTWISE_FLOPS["Sigmoid"] * steps * batch * gate_units


def _einsum(s: Shapes) -> float:
    """2 x the product of every index size (one multiply-add per point of the iteration space)."""
    equation = s.node.attribute("equation")
    if isinstance(equation, bytes):
        equation = equation.decode("utf-8", "replace")
    if not isinstance(equation, str):
        return 1.0 * s.out_numel(0)
    terms = equation.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for index, term in enumerate(terms):
        shape = s.in_shape(index)
        if shape is None or "..." in term or len(term) != len(shape):
            return 2.0 * max(s.out_numel(0), max((s.in_numel(i) for i in range(len(terms))), default=1))
        for letter, dim in zip(term, shape, strict=True):
            sizes[letter] = max(sizes.get(letter, 1), dim)
    return 2.0 * math.prod(sizes.values())


RESIZE_FLOPS = {b"nearest": 64.0, b"linear": 250.0, b"cubic": 13_000.0}
"""Per output element, measured for a 2x upsampling of (1, 64, 56, 56) float32."""


def _resize(s: Shapes) -> float:
    mode = s.node.attribute("mode", b"nearest")
    mode = mode.encode() if isinstance(mode, str) else mode
    return s.out_numel(0) * RESIZE_FLOPS.get(mode, RESIZE_FLOPS[b"linear"])  # type: ignore[arg-type]


def _per_input(weight: float) -> Callable[[Shapes], float]:
    return lambda s: weight * s.in_numel(0)


_HANDLERS: dict[str, Callable[[Shapes], float]] = {
    "Conv": _conv,
    "ConvInteger": _conv,
    "QLinearConv": lambda s: _conv(Shapes(_shift_qlinear_conv(s.node), s.default_dim, s.default_numel)),
    "NhwcConv": _conv,
    "FusedConv": _fused_conv,
    "ConvTranspose": _conv_transpose,
    "MatMul": _matmul,
    "MatMulInteger": _matmul,
    "MatMulIntegerToFloat": _matmul,
    "DynamicQuantizeMatMul": _matmul,
    "MatMulNBits": _matmul,
    "FusedMatMul": _fused_matmul,
    "Gemm": _gemm,
    "FusedGemm": _fused_gemm,
    "Attention": _attention,
    "MultiHeadAttention": _multi_head_attention,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "LpPool": _pool,
    "LSTM": _rnn,
    "GRU": _rnn,
    "RNN": _rnn,
    "Einsum": _einsum,
    "Resize": _resize,
    "Upsample": _resize,
    **{op: _per_input(w) for op, w in _NORMALIZATION_FLOPS.items()},
    **{op: _per_input(w) for op, w in _REDUCTION_FLOPS.items()},
}


def _shift_qlinear_conv(node: NodeSignature) -> NodeSignature:
    """QLinearConv's inputs are (x, x_scale, x_zero, w, ...): present the weight at index 1 like Conv."""
    inputs = node.inputs
    shifted = (inputs[0], inputs[3] if len(inputs) > 3 else None, inputs[8] if len(inputs) > 8 else None)
    return NodeSignature(node.op_type, node.domain, node.attributes, shifted, node.outputs, node.opset)


def count_flops(node: NodeSignature, default_dim: int = DEFAULT_DIM, default_numel: int = DEFAULT_NUMEL) -> float:
    """Effective flops of ``node`` (see the module docstring); 0 for ops that move no data."""
    if node.op_type in VIEW_OPS or node.op_type in METADATA_OPS:
        return 0.0
    shapes = Shapes(node, default_dim, default_numel)
    handler = _HANDLERS.get(node.op_type)
    if handler is not None:
        return max(float(handler(shapes)), 0.0)
    per_element = ELEMENTWISE_FLOPS.get(node.op_type, 1.0)
    return per_element * sum(shapes.out_numel(i) for i in range(max(len(node.outputs), 1)))
