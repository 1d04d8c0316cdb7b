"""The term language ONNX graphs are written in inside the e-graph.

One generic node form keeps the engine lossless for every op, known or not: a node is its op type,
domain, interned attributes, explicit inputs, the outer-scope tensors its subgraphs capture, an id
and its output count. Rules match on the op-type string. Derived weights (a folded BatchNorm, for
instance) are terms too, computed with numpy only when the extracted graph is decoded.

Every constructor has an explicit egglog name (``egg_fn``) because the bulk encoder speaks egglog's
command layer directly (see ``encode.py``) and the extractor reads the frozen tables by these names.
"""

from __future__ import annotations

from egglog import Expr, String, StringLike, function, i64Like, method, relation


class Attrs(Expr, egg_sort="Attrs"):
    """A node's attributes: a key into the encoder's attribute table, or one built by a rule."""

    @method(egg_fn="AttrsTable")
    @classmethod
    def table(cls, key: i64Like) -> Attrs: ...

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
        """A constant computed at decode time by the numpy kernel named ``kernel`` (see ``weights.py``)."""


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


def args_of(*tensors: Tensor) -> Args:
    """Build an ``Args`` list (used by rules; the encoder builds lists with commands)."""
    result = Args.nil()
    for tensor in reversed(tensors):
        result = Args.cons(tensor, result)
    return result
