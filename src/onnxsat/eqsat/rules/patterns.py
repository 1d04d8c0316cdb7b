"""Small constructors shared by the rule families: a plain single-output node and its output, and the
terms that name a decode-time kernel or a Python-computed flag.

Rules match nodes of the default domain without subgraphs; writing that once keeps every rule to
the part that differs (op type, inputs, conditions). Kernel and flag names are strings inside egglog
terms, so nothing would notice a misspelt one until a decoded graph held it: the constructors here
check each name against its registry when the rule is built (the first time the family runs, and in
``tests/eqsat/test_registries.py`` for every family), and rules use them instead of ``Tensor.derived``,
``Attrs.computed``, ``language.attr_flag`` and ``language.value_flag``.
"""

from __future__ import annotations

from collections import Counter

from egglog import StringLike, Unit

from onnxsat.eqsat import language
from onnxsat.eqsat.attributes import ATTRIBUTE_KERNELS
from onnxsat.eqsat.facts import VALUE_FLAGS, attribute_flag_names
from onnxsat.eqsat.language import Args, Attrs, Node, Tensor, out
from onnxsat.eqsat.registry import require
from onnxsat.eqsat.weights import KERNELS


def plain(op_type: StringLike, attrs: Attrs, inputs: Args, node_id: StringLike) -> Node:
    """A default-domain node with one output and no subgraph captures."""
    return Node(op_type, "", attrs, inputs, Args.nil(), node_id, 1)


def result(op_type: StringLike, attrs: Attrs, inputs: Args, node_id: StringLike) -> Tensor:
    """The output of :func:`plain`."""
    return out(plain(op_type, attrs, inputs, node_id), 0)


def derived(kernel: str, args: Args, attrs: Attrs) -> Tensor:
    """``Tensor.derived`` with a registered weight kernel (``@weight_kernel``), computed at decode time."""
    return Tensor.derived(require(KERNELS, kernel, "weight kernel"), args, attrs)


def computed(kernel: str, first: Attrs, second: Attrs, values: Args) -> Attrs:
    """``Attrs.computed`` with a registered attribute kernel (``@attribute_kernel``)."""
    return Attrs.computed(require(ATTRIBUTE_KERNELS, kernel, "attribute kernel"), first, second, values)


def attr_flag(attrs: Attrs, flag: str) -> Unit:
    """The ``AttrFlag`` fact for a flag some ``@flag_predicate`` computes (or ``pure``)."""
    return language.attr_flag(attrs, require(attribute_flag_names(), flag, "attribute flag"))


def value_flag(tensor: Tensor, flag: str) -> Unit:
    """The ``ValueFlag`` fact for one of the flags ``facts`` computes on small constants."""
    return language.value_flag(tensor, require(VALUE_FLAGS, flag, "value flag"))


_NAMES: Counter[str] = Counter()


def unique(name: str) -> str:
    """``name``, made unique for egglog (which refuses two rules of one name) by a `` [k]`` suffix.

    One rewrite is often several egglog rules (operand orders, optional inputs); they share a name in
    reports, where :func:`report_name` strips the suffix again.
    """
    _NAMES[name] += 1
    count = _NAMES[name]
    return name if count == 1 else f"{name} [{count}]"


def report_name(name: str) -> str:
    """The rewrite a rule belongs to: its name without :func:`unique`'s suffix."""
    base, bracket, rest = name.rpartition(" [")
    return base if bracket and rest.endswith("]") and rest[:-1].isdigit() else name
