"""The registries rules are scheduled and decoded through: rule families, weight and attribute kernels,
attribute and value flags.

Pins each target's schedule (families and their order, which affect results), the registered names,
and that a misspelt or doubly registered name fails when the rule or module is loaded, not at decode.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from egglog import Ruleset, eq, rule, ruleset
from onnx import helper

import onnxsat.eqsat.rules as rules_package
from onnxsat.eqsat.attributes import ATTRIBUTE_KERNELS, attribute_kernel
from onnxsat.eqsat.facts import FLAG_PREDICATES, flag_predicate
from onnxsat.eqsat.language import Args, Attrs, Tensor, args_of
from onnxsat.eqsat.registry import RegistryError
from onnxsat.eqsat.rules import (
    FAMILIES,
    TARGETS,
    RuleSchedule,
    activation_fusion,
    applicable,
    bn_folding,
    register_family,
    rulesets_for,
)
from onnxsat.eqsat.rules.families import STANDARD, family_of
from onnxsat.eqsat.rules.patterns import attr_flag, computed, derived, value_flag
from onnxsat.eqsat.weights import FOLDING_KERNELS, KERNELS, weight_kernel

PORTABLE_SIMPLIFY = [
    "constant_folding",
    "noop_removal",
    "consecutive",
    "layout_sinking",
    "slice_composition",
    "cse",
    "bn_folding",
    "weight_folding",
    "pad_folding",
    "linear",
    "reassociation",
    "lrn_decomposition",
    "clamp_forms",
    "composite_forms",
]
"""The portable target's simplifying families in run order, as listed by hand before the registry."""
OP_GATED = ("clamp_forms", "composite_forms")
"""Families for a Max, and a ReduceMean or an Erf: ops neither test graph below holds."""


def _names(rulesets: tuple[Ruleset, ...]) -> list[str]:
    return [r.ident.name for r in rulesets]


def test_each_target_runs_the_same_families_in_the_same_order() -> None:
    assert list(TARGETS) == ["none", "portable", "ort"]
    assert rulesets_for("none").empty
    assert _names(TARGETS["portable"].simplify) == PORTABLE_SIMPLIFY
    assert _names(TARGETS["portable"].grow) == ["parallel_merge"]
    assert _names(TARGETS["ort"].simplify) == [*PORTABLE_SIMPLIFY, "activation_fusion", "attention", "ort_guards"]
    assert _names(TARGETS["ort"].grow) == ["parallel_merge"]


def test_family_rulesets_stay_importable_from_the_package() -> None:
    assert activation_fusion is FAMILIES["activation_fusion"].ruleset
    assert bn_folding is FAMILIES["bn_folding"].ruleset


def test_every_ruleset_of_the_package_is_a_registered_family() -> None:
    """A family module that forgets ``register_family`` would silently never run."""
    for module in pkgutil.iter_modules(rules_package.__path__):
        loaded = importlib.import_module(f"{rules_package.__name__}.{module.name}")
        for name, value in vars(loaded).items():
            if isinstance(value, Ruleset) and name != "analysis":
                assert family_of(value) is not None, f"{module.name}.{name} is not registered"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_builds_with_registered_names_only(name: str) -> None:
    """Builds the family's deferred rules, where every kernel and flag name is checked."""
    assert FAMILIES[name].ruleset.__egg_decls__ is not None


def test_registered_kernel_and_flag_names() -> None:
    assert set(KERNELS) == {
        "lrn_window_weight",
        "lrn_bias",
        "lrn_exponent",
        "bn_scale",
        "bn_fold_bias",
        "bn_shift",
        "scale_conv_weight",
        "scale_convtranspose_weight",
        "channel_vector",
        "scale_vector",
        "add_channel_bias",
        "subtract_channel_bias",
        "scale_conv_input_channels",
        "conv_input_shift_bias",
        "scale_columns",
        "add_values",
        "multiply_values",
        "concat_last",
        "concat_first",
        "composed_slice_starts",
        "composed_slice_ends",
        "composed_slice_axes",
        "composed_slice_steps",
        "transpose_constant",
    }
    assert {"scale_conv_weight", "scale_convtranspose_weight"} == FOLDING_KERNELS
    assert set(ATTRIBUTE_KERNELS) == {
        "cast_to",
        "tanh_approximation",
        "hard_sigmoid_sixth",
        "compose_perm",
        "gemm_flip_a",
        "gemm_flip_b",
        "add_spatial_pads",
        "add_counted_pads",
        "last_axis",
        "channel_axis",
    }
    assert {key: set(flags) for key, flags in FLAG_PREDICATES.items()} == {
        ("", "BatchNormalization"): {"inference"},
        ("", "Conv"): {"no_padding", "unit_strides", "explicit_padding"},
        ("", "Transpose"): {"identity_perm", "swap_2d", "explicit_perm"},
        ("", "Pad"): {"constant_mode", "zero_attribute_pads"},
        ("", "Gemm"): {"plain"},
    }


def test_unknown_names_are_refused_when_the_term_is_built() -> None:
    with pytest.raises(RegistryError, match="did you mean 'scale_conv_weight'"):
        derived("scale_conv_wieght", Args.nil(), Attrs.none())
    with pytest.raises(RegistryError, match="unknown attribute kernel"):
        computed("compose_perms", Attrs.none(), Attrs.none(), Args.nil())
    with pytest.raises(RegistryError, match="unknown attribute flag"):
        attr_flag(Attrs.none(), "inferense")
    with pytest.raises(RegistryError, match="unknown value flag"):
        value_flag(Tensor.absent(), "zero")


def test_a_misspelt_kernel_fails_when_its_family_is_built() -> None:
    broken = ruleset(name="test_registries_broken")

    @broken.register
    def _typo(t: Tensor) -> object:
        yield rule(eq(t).to(derived("bn_sacle", args_of(t), Attrs.none())), name="typo")

    with pytest.raises(RegistryError, match="bn_sacle"):
        _ = broken.__egg_decls__


def test_duplicate_names_are_refused() -> None:
    before = dict(KERNELS)
    with pytest.raises(RegistryError, match="registered twice"):
        weight_kernel("scale_conv_weight")(lambda args, attrs: np.zeros(1))
    assert before == KERNELS
    with pytest.raises(RegistryError, match="registered twice"):
        attribute_kernel("compose_perm")(lambda first, second, values: [])
    with pytest.raises(RegistryError, match="registered twice"):
        flag_predicate("Conv", "no_padding")(lambda attrs, opset: True)
    families = dict(FAMILIES)
    with pytest.raises(RegistryError, match="registered twice"):
        register_family(FAMILIES["bn_folding"].ruleset, stage="simplify", order=999, targets=STANDARD)
    with pytest.raises(RegistryError, match="order 70 is taken by 'bn_folding'"):
        register_family(ruleset(name="test_registries_order"), stage="simplify", order=70, targets=STANDARD)
    with pytest.raises(RegistryError, match="targets"):
        register_family(ruleset(name="test_registries_target"), stage="simplify", order=998, targets=("portabel",))
    assert families == FAMILIES


def test_rules_name_kernels_and_flags_only_through_the_checked_constructors() -> None:
    """``Tensor.derived``/``Attrs.computed`` with a literal name, or the unchecked flag relations, would
    bypass the registry checks; only the constructors themselves and ``analysis`` (which matches any
    kernel) may use them."""
    allowed = {"patterns.py", "analysis.py"}
    for path in sorted(Path(rules_package.__file__).parent.glob("*.py")):
        if path.name in allowed:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                assert (node.value.id, node.attr) not in {("Tensor", "derived"), ("Attrs", "computed")}, path.name
            if isinstance(node, ast.ImportFrom) and node.module == "onnxsat.eqsat.language":
                imported = {alias.name for alias in node.names}
                assert not imported & {"attr_flag", "value_flag"}, path.name


def _graph(*op_types: str) -> onnx.GraphProto:
    nodes = [helper.make_node(op, ["x"], [f"y{i}"]) for i, op in enumerate(op_types)]
    return helper.make_graph(nodes, "g", [], [])


def test_applicable_skips_families_a_model_cannot_use() -> None:
    plain = applicable(TARGETS["ort"], _graph("Relu"), has_parallel_pairs=False)
    skipped = {"layout_sinking", "slice_composition", "bn_folding", "lrn_decomposition", *OP_GATED}
    expected = [n for n in PORTABLE_SIMPLIFY if n not in skipped]
    assert _names(plain.simplify) == [*expected, "activation_fusion", "ort_guards"]
    assert plain.grow == ()
    full = applicable(TARGETS["portable"], _graph("Slice", "BatchNormalization", "LRN"), has_parallel_pairs=True)
    assert _names(full.simplify) == [n for n in PORTABLE_SIMPLIFY if n not in ("layout_sinking", *OP_GATED)]
    assert _names(full.grow) == ["parallel_merge"]


def test_applicable_keeps_rulesets_that_are_no_family() -> None:
    own = ruleset(name="test_registries_own")
    assert applicable(RuleSchedule(simplify=(own,)), _graph("Relu"), has_parallel_pairs=False).simplify == (own,)
