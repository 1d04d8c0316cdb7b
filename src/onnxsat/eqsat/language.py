"""The term language ONNX graphs are written in inside the e-graph.

One generic node form keeps the engine lossless for every op, known or not: a node is its op type,
domain, interned attributes, explicit inputs, the outer-scope tensors its subgraphs capture, an id
and its output count. Rules match on the op-type string. Derived weights (a folded BatchNorm, for
instance) are terms too, computed with numpy only when the extracted graph is decoded.

Every constructor has an explicit egglog name (``egg_fn``) because the bulk encoder speaks egglog's
command layer directly (see ``encode.py``) and the extractor reads the frozen tables by these names.
"""

from __future__ import annotations

from egglog import Expr, String, StringLike, function, i64, i64Like, method, relation


class Dims(Expr, egg_sort="Dims"):
    """A tensor's shape as a cons list of dimensions; -1 stands for a dimension shape inference left open."""

    @method(egg_fn="DimsNil")
    @classmethod
    def nil(cls) -> Dims: ...

    @method(egg_fn="DimsCons")
    @classmethod
    def cons(cls, dim: i64Like, tail: Dims) -> Dims: ...


class Attrs(Expr, egg_sort="Attrs"):
    """A node's attributes: a key into the encoder's attribute table, or one built by a rule."""

    @method(egg_fn="AttrsTable")
    @classmethod
    def table(cls, key: i64Like) -> Attrs: ...

    @method(egg_fn="AttrsNone")
    @classmethod
    def none(cls) -> Attrs:
        """No attributes: every attribute of the node takes its default."""

    @method(egg_fn="AttrsComputed")
    @classmethod
    def computed(cls, kernel: StringLike, first: Attrs, second: Attrs, values: Args) -> Attrs:
        """Attributes computed at decode time by ``attributes.ATTRIBUTE_KERNELS[kernel]`` from two attribute
        sets and the values of some static tensors (a composed permutation, a Conv's merged padding);
        rules write it as ``patterns.computed``, which checks the name."""

    @method(egg_fn="AttrsWithActivation")
    def with_activation(self, act_op: StringLike, act_attrs: Attrs, act_args: Args) -> Attrs:
        """These attributes plus those of a fused activation (op, its attributes, its extra inputs)."""


class Args(Expr, egg_sort="Args"):
    """An ordered list of tensors, as a cons list so that rules can match on its elements."""

    @method(egg_fn="ArgsNil")
    @classmethod
    def nil(cls) -> Args: ...

    @method(egg_fn="ArgsCons")
    @classmethod
    def cons(cls, head: Tensor, tail: Args) -> Args: ...


class Tensor(Expr, egg_sort="Tensor"):
    """A value flowing through the graph."""

    @method(egg_fn="TensorInput")
    @classmethod
    def input(cls, name: StringLike) -> Tensor: ...

    @method(egg_fn="TensorInitializer")
    @classmethod
    def initializer(cls, name: StringLike) -> Tensor: ...

    @method(egg_fn="TensorAbsent")
    @classmethod
    def absent(cls) -> Tensor:
        """An omitted optional input (an empty name in ONNX)."""

    @method(egg_fn="TensorRef")
    @classmethod
    def ref(cls, tensor_id: i64Like) -> Tensor:
        """The original tensor number ``tensor_id``: a handle so the encoder adds one shallow command per node."""

    @method(egg_fn="TensorDerived")
    @classmethod
    def derived(cls, kernel: StringLike, args: Args, attrs: Attrs) -> Tensor:
        """A constant computed at decode time by the numpy kernel named ``kernel`` (``weights.KERNELS``);
        rules write it as ``patterns.derived``, which checks the name."""

    @method(egg_fn="TensorFolded")
    @classmethod
    def folded(cls, node: Node, index: i64Like) -> Tensor:
        """Output ``index`` of ``node``, whose inputs are all static: computed once at decode time, never run."""

    @method(egg_fn="TensorShapeOf")
    @classmethod
    def shape_of(cls, dims: Dims, attrs: Attrs) -> Tensor:
        """What ``Shape`` (with attributes ``attrs``: start, end) returns for a tensor of static shape ``dims``."""

    @method(egg_fn="TensorPureKey")
    @classmethod
    def pure_key(cls, op_type: StringLike, attrs: Attrs, inputs: Args, n_outputs: i64Like, index: i64Like) -> Tensor:
        """Output ``index`` of a pure node named by what it computes, not by its id: two nodes with equal
        keys land in one e-class by hash-consing (common subexpressions). Never extracted."""

    @method(egg_fn="TensorInts")
    @classmethod
    def ints(cls, dims: Dims) -> Tensor:
        """A constant 1-D int64 tensor holding ``dims`` (a Reshape target, Split sizes)."""


class Node(Expr, egg_sort="OnnxNode"):
    """One ONNX node. ``node_id`` names the original node it stands for (or replaces)."""

    @method(egg_fn="Node")
    def __init__(
        self,
        op_type: StringLike,
        domain: StringLike,
        attrs: Attrs,
        inputs: Args,
        captures: Args,
        node_id: StringLike,
        n_outputs: i64Like,
    ) -> None: ...


@function(egg_fn="Out")
def out(node: Node, index: i64Like) -> Tensor:
    """Output ``index`` of ``node``."""


# Facts the encoder asserts (see facts.py) and rules require.
static_value = relation("StaticValue", Tensor, egg_fn="StaticValue")
"""The tensor is known at optimization time: a non-overridable initializer, a Constant, or absent."""
static_args = relation("StaticArgs", Args, egg_fn="StaticArgs")
"""Every tensor of the list is static (derived by the analysis rules)."""
sole_use = relation("SoleUse", Tensor, egg_fn="SoleUse")
"""The tensor has exactly one consumer and is not a graph output, so fusing it away loses nothing."""
is_float32 = relation("IsFloat32", Tensor, egg_fn="IsFloat32")
"""Shape inference says the tensor is float32 (the only type ORT's fused CPU kernels take)."""
attr_flag = relation("AttrFlag", Attrs, String, egg_fn="AttrFlag")
"""A semantic property of a node's attributes, computed in Python (e.g. BatchNormalization in inference mode)."""
attr_int = relation("AttrInt", Attrs, String, i64, egg_fn="AttrInt")
"""An integer attribute's value (``to`` of a Cast, ``axis`` of a Concat), or its default when it is omitted."""
has_shape = relation("HasShape", Tensor, Dims, egg_fn="HasShape")
"""Shape inference's shape for the tensor (asserted by the encoder; rules assert it for tensors they create)."""
has_type = relation("HasType", Tensor, i64, egg_fn="HasType")
"""The tensor's element type (an ``onnx.TensorProto`` data type number)."""
static_dims = relation("StaticDims", Dims, egg_fn="StaticDims")
"""Every dimension of the shape is known and at least 1 (derived by the analysis rules)."""
value_flag = relation("ValueFlag", Tensor, String, egg_fn="ValueFlag")
"""A property of a small constant's value, computed in Python: ``zeros``, ``ones``, ``spatial_pads``..."""
foldable = relation("Foldable", Tensor, egg_fn="Foldable")
"""The tensor may be computed at optimization time if its inputs are static: a deterministic standard op
with a known, bounded output size (see ``facts.FOLD_MAX_ELEMENTS``)."""
parallel_pair = relation("ParallelPair", Tensor, Tensor, egg_fn="ParallelPair")
"""Outputs of two MatMuls (or two ungrouped Convs) that read the same input with initializer weights,
found in Python at encode time (``facts.parallel_pairs``) so the merge rules join from a short list."""
same_shape = relation("SameShape", Tensor, Tensor, i64, egg_fn="SameShape")
"""Shape inference gives the output of a binary elementwise node (first) the same fully known shape, of
this rank, as one of its operands (second). Computed in Python: a rule that joined two ``HasShape`` facts
on a shared ``Dims`` makes egglog's join planner pair up every two tensors of equal shape. ``layout_sinking``
also asserts it for the binary node it writes below a Transpose, where an open dim (a dynamic batch) may
remain: its constant operand has size 1 along every such dim, so the output keeps the operand's shape."""
foldable_batchnorm = relation("FoldableBatchNorm", Tensor, Tensor, Attrs, Args, egg_fn="FoldableBatchNorm")
"""The first tensor is the output of an inference-mode BatchNormalization of the second, with these
attributes and these static parameters (scale, bias, mean, var). A stage of its own (``bn_folding``):
egglog's join planner, given the BatchNormalization, the convolution and the static checks in one rule
body, chose plans that took minutes per iteration on DenseNet; joined from this short relation it does not."""
inverse_perms = relation("InversePerms", Attrs, Attrs, egg_fn="InversePerms")
"""Two Transpose attribute tables of the model whose permutations undo each other (the first applied
after the second is the identity). Computed in Python at encode time: the composed perm of a
Transpose pair is an ``Attrs.computed`` known only at decode, so no rule could see the identity."""
pad_into_pool = relation("PadIntoPool", Tensor, egg_fn="PadIntoPool")
"""The output of a constant-mode Pad whose only reader, a pool, can take the padding into its own: every
condition (pad value, kernel width, ceil mode, the pool's divisor) is checked in Python (``window_pads``)."""
returns_input = relation("ReturnsInput", Tensor, Tensor, egg_fn="ReturnsInput")
"""(output, data input) of a Reshape or Expand that returns its input unchanged, shown in Python from the
input's known dims and the constant target (``facts.shape_keepers``) where shape inference left a dim open.
The input is named because facts sit on e-classes: once the output's class merges with another, a node of
that class reading some other tensor must not match (an ``Expand(s, [2])`` of a scalar met an
``Expand(t, [2])`` of a ``[2]`` tensor that way)."""
attention_site = relation("AttentionSite", Tensor, Args, Attrs, Dims, Dims, String, String, egg_fn="AttentionSite")
"""(output, fused inputs, fused attributes, fused output shape, output shape, fused node id, merging Reshape's
id): a scaled dot-product attention found in Python at encode time (``attention_sites``), which one
com.microsoft MultiHeadAttention computes; the pattern spans too many nodes for one rule body."""
attention_projection = relation(
    "AttentionProjection", Tensor, Tensor, Args, Args, i64, i64, egg_fn="AttentionProjection"
)
"""(merged output of an ``AttentionSite``, x, [Wq, Wk, Wv], [bq, bk, bv], K, 3H): its Q, K and V are
``x @ W + b`` with constant weights, so com.microsoft Attention with the weights side by side computes it too."""
permuted_constant = relation("PermutedConstant", Tensor, Tensor, Attrs, Dims, i64, egg_fn="PermutedConstant")
"""(x, c, Transpose attributes, dims, rank): ``c`` is the constant operand of a binary elementwise node whose
other operand is ``x`` (of this rank), it broadcasts into ``x`` without growing it, and lined up with leading
1s and transposed by the inverse of the attributes' perm it has these dims. Computed in Python at encode time
(``layout_sinking.permuted_constants``): egglog cannot permute a shape list by a perm it cannot read."""
op_kind = relation("OpKind", String, String, egg_fn="OpKind")
"""(op type, kind): the op belongs to a class a rule family treats alike (``layout_sinking.OP_KINDS``)."""
layer_norm_site = relation("LayerNormSite", Tensor, Args, Attrs, String, egg_fn="LayerNormSite")
"""(output, [x, scale(, bias)], attributes with ``epsilon``, the fused node's id): a layer normalization written
out elementwise, found in Python at encode time (``layer_norm_sites``), which one LayerNormalization computes."""
gelu_site = relation("GeluSite", Tensor, Tensor, i64, String, egg_fn="GeluSite")
"""(output, x, 1 for the tanh approximation else 0, the fused node's id): a GELU written out elementwise,
found in Python at encode time (``gelu_sites``), which one Gelu computes."""
hard_site = relation("HardSite", Tensor, Tensor, i64, String, egg_fn="HardSite")
"""(output, x, 1 for the swish (x times the gate) else 0, the fused node's id): a hard sigmoid or hard swish
written out elementwise, found in Python at encode time (``hard_sites``), which HardSigmoid (or HardSwish)
computes."""
opset_at_least = relation("OpsetAtLeast", i64, egg_fn="OpsetAtLeast")
"""The model imports the default domain at this version or later (asserted for each version up to its own)."""


def node_id_at(position: int) -> str:
    """The id the encoder gives the node at ``position`` of the main graph (a fused node takes the id of the
    node whose place it takes, so the decoder can restore its name)."""
    return f"n{position}"


def dims_of(*dims: i64Like) -> Dims:
    """Build a ``Dims`` list from integers or rule variables (rules and tests; the encoder uses commands)."""
    result = Dims.nil()
    for dim in reversed(dims):
        result = Dims.cons(dim, result)
    return result


def args_of(*tensors: Tensor) -> Args:
    """Build an ``Args`` list (used by rules; the encoder builds lists with commands)."""
    result = Args.nil()
    for tensor in reversed(tensors):
        result = Args.cons(tensor, result)
    return result
