"""Targets, exact counts, the four scoring methods and their registry (sparsity/targets.py, methods.py,
calibration.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsat.errors import SettingsError
from onnxsat.sparsity.calibration import channel_norms
from onnxsat.sparsity.methods import (
    METHODS,
    SparsityMethod,
    get_method,
    register_method,
    smallest,
    sparsity_masks,
)
from onnxsat.sparsity.sparsify import SparsifyOptions
from onnxsat.sparsity.targets import select, sparsity_targets

RNG = np.random.default_rng(7)


def weight(name: str, *shape: int, scale: float = 1.0) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.normal(size=shape) * scale).astype(np.float32), name)


def cnn(*, group: int = 2) -> onnx.ModelProto:
    """x[2,4,6,6] -> Conv(group) -> ConvTranspose -> Flatten -> Gemm(transB) -> MatMul -> y, plus decoys."""
    nodes = [
        helper.make_node("Conv", ["x", "wc"], ["c"], name="conv", group=group, pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["c", "wt"], ["t"], name="deconv"),
        helper.make_node("Flatten", ["t"], ["f"]),
        helper.make_node("Gemm", ["f", "wg"], ["g"], name="fc", transB=1),
        helper.make_node("MatMul", ["g", "wm"], ["m"], name="head"),
        helper.make_node("MatMul", ["m", "runtime_w"], ["y"], name="runtime"),
    ]
    initializers = [
        weight("wc", 6, 4 // group, 3, 3),
        weight("wt", 6, 2, 3, 3),
        weight("wg", 5, 2 * 8 * 8),
        weight("wm", 5, 3),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6, 6]),
            helper.make_tensor_value_info("runtime_w", TensorProto.FLOAT, [3, 2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t).copy() for t in model.graph.initializer}


def test_targets_are_the_constant_weights_of_products_in_graph_order() -> None:
    targets = sparsity_targets(cnn())
    assert [(t.name, t.op_type, t.channel_axis) for t in targets] == [
        ("wc", "Conv", 1),
        ("wt", "ConvTranspose", 0),
        ("wg", "Gemm", 1),
        ("wm", "MatMul", -2),
    ]
    assert [t.name for t in select(targets, ["fc", "wm"])] == ["wc", "wt"]
    with pytest.raises(SettingsError, match="names no prunable weight"):
        select(targets, ["nope"])


def test_grouped_conv_elements_map_to_their_group_input_channels() -> None:
    (conv,) = [t for t in sparsity_targets(cnn(group=2)) if t.name == "wc"]
    channels = conv.channel_of_elements()  # W[6, 2, 3, 3]: outputs 0-2 read inputs 0-1, outputs 3-5 inputs 2-3
    assert channels[0, :, 0, 0].tolist() == [0, 1]
    assert channels[5, :, 2, 2].tolist() == [2, 3]


def test_smallest_takes_exactly_k_with_ties_broken_by_position() -> None:
    scores = np.array([3.0, 1.0, 1.0, 1.0, 0.0, 2.0])
    assert smallest(scores, 3).tolist() == [False, True, True, False, True, False]
    assert smallest(scores, 0).sum() == 0 and smallest(scores, 6).all()


@pytest.mark.parametrize("method", ["relative", "flat", "triangular"])
@pytest.mark.parametrize("level", [0.0, 0.3, 0.5, 0.85])
def test_requested_level_is_reached_exactly_even_with_ties_and_zeros(method: str, level: float) -> None:
    model = cnn()
    weights = values(model)
    weights["wg"][:, :40] = 0.25  # ties
    weights["wm"][0] = 0.0  # already zero
    targets = sparsity_targets(model)
    result = sparsity_masks(method, targets, weights, level)
    if method == "relative":
        for layer in result.layers:
            assert layer.zeros_after == max(round(level * layer.size), layer.zeros_before)
    else:
        assert result.zeros == max(round(level * result.total), sum(x.zeros_before for x in result.layers))


def test_flat_uses_one_threshold_for_every_layer() -> None:
    model = cnn()
    weights, targets = values(model), sparsity_targets(model)
    result = sparsity_masks("flat", targets, weights, 0.4)
    zeroed = np.concatenate([np.abs(weights[n])[m] for n, m in result.masks.items()])
    kept = np.concatenate([np.abs(weights[n])[~m] for n, m in result.masks.items()])
    assert zeroed.max() <= kept.min()
    spans = [float(w.max() - w.min()) for w in (weights[t.name] for t in targets)]
    assert result.span_fraction == pytest.approx(zeroed.max() / min(spans))


def test_triangular_thresholds_grow_from_the_first_layer_span_to_the_last() -> None:
    model = cnn()
    weights = values(model)
    weights["wc"] *= 0.5  # narrow first layer, wide last
    weights["wm"] *= 4.0
    targets = sparsity_targets(model)
    result = sparsity_masks("triangular", targets, weights, 0.5)
    wide = {t.name: weights[t.name].astype(np.float64) for t in targets}  # the method measures spans in float64
    spans = [float(wide[t.name].max() - wide[t.name].min()) for t in targets]
    references = np.linspace(spans[0], spans[-1], len(spans))
    for target, reference in zip(targets, references, strict=True):
        mask, magnitude = result.masks[target.name], np.abs(weights[target.name])
        if mask.any():
            assert magnitude[mask].max() <= result.span_fraction * reference * (1 + 1e-9)
        assert magnitude[~mask].min() >= result.span_fraction * reference * (1 - 1e-9)
    first, last = result.layers[0], result.layers[-1]
    assert first.threshold < last.threshold


def test_calibrated_scores_weights_by_their_input_channel_norm() -> None:
    """Channel 0 of x is silent: every weight reading it is pruned first, however large."""
    model = cnn(group=1)
    targets = [t for t in sparsity_targets(model) if t.name == "wc"]
    x = RNG.normal(size=(2, 4, 6, 6)).astype(np.float32)
    x[:, 0] = 0.0
    norms = channel_norms(model, targets, [{"x": x, "runtime_w": np.ones((3, 2), np.float32)}])
    assert np.allclose(norms["wc"], np.sqrt((x.astype(np.float64) ** 2).sum(axis=(0, 2, 3))))
    weights = values(model)
    weights["wc"][:, 0] = 10.0
    result = sparsity_masks("calibrated", targets, weights, 0.25, norms)  # 25% = exactly the channel-0 weights
    assert result.masks["wc"][:, 0].all() and not result.masks["wc"][:, 1:].any()


@pytest.mark.parametrize("level", [-0.1, 1.0, 1.5])
def test_levels_outside_zero_to_one_are_refused(level: float) -> None:
    model = cnn()
    with pytest.raises(SettingsError, match=r"must be in \[0, 1\)"):
        sparsity_masks("relative", sparsity_targets(model), values(model), level)


def test_per_layer_levels_need_a_per_layer_method() -> None:
    model = cnn()
    with pytest.raises(SettingsError, match="per-layer method"):
        sparsity_masks("flat", sparsity_targets(model), values(model), {"wc": 0.5})


def test_fused_ops_onnxsat_writes_are_targets_too() -> None:
    """An ``onnxsat optimize --target ort`` result carries FusedConv/FusedGemm: their weights are pruned."""
    from onnxsat.eqsat.optimizer import optimize_model
    from onnxsat.zoo.synthetic import demo_cnn

    optimized, _ = optimize_model(demo_cnn())
    targets = sparsity_targets(optimized)
    assert {"FusedConv", "FusedGemm"} <= {t.op_type for t in targets}
    result = sparsity_masks("relative", targets, {t.name: values(optimized)[t.name] for t in targets}, 0.5)
    assert result.sparsity == pytest.approx(0.5, abs=0.01)


@pytest.fixture
def temporary_method() -> Iterator[SparsityMethod]:
    """A method registered the way the README says (one object), removed again after the test."""
    # keeps the largest |w| instead of the smallest: easy to tell apart from every built-in method
    method = register_method(
        SparsityMethod("largest-first", layer_scores=lambda target, magnitudes, norms: -magnitudes)
    )
    yield method
    del METHODS[method.name]


def test_a_registered_method_works_everywhere_a_method_is_named(temporary_method: SparsityMethod) -> None:
    model = cnn()
    weights = values(model)
    result = sparsity_masks("largest-first", sparsity_targets(model), weights, 0.5)
    mask, magnitude = result.masks["wm"], np.abs(weights["wm"])
    assert magnitude[mask].min() >= magnitude[~mask].max()  # the largest half went
    assert "largest-first" in SparsifyOptions.__dataclass_fields__["method"].metadata["cli"]["choices"]()
    SparsifyOptions(method="largest-first").check()
    assert get_method("largest-first").per_layer and not get_method("largest-first").needs_activations


def test_a_method_needs_one_scoring_rule_and_its_own_name() -> None:
    with pytest.raises(TypeError, match="exactly one of layer_scores and references"):
        register_method(SparsityMethod("neither"))
    with pytest.raises(TypeError, match="sparsity method 'relative' is registered twice"):
        register_method(SparsityMethod("relative", references=lambda spans: np.ones(len(spans))))
    with pytest.raises(SettingsError, match="unknown method 'dense'; choose from flat, triangular, relative"):
        get_method("dense")
    assert [name for name, method in METHODS.items() if method.per_layer] == ["relative", "calibrated"]
    assert [name for name, method in METHODS.items() if method.needs_activations] == ["calibrated"]


def test_calibration_batches_are_sized_by_memory_unless_the_model_fixes_its_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The calibrated method keeps a batch's activations whole: one sample, then two, then what memory allows
    (a run of two adding 900 MiB: one at a time); a model's own fixed batch is taken as it is."""
    from onnxsat import memory
    from onnxsat.data.sources import Dataset
    from onnxsat.sparsity.sparsify import _calibration_batches

    def matmul(batch: int | str) -> onnx.ModelProto:
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="product")],
            "product",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
            [weight("w", 4, 3)],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    data = Dataset(RNG.normal(size=(7, 4)).astype(np.float32), None, "seven")

    def sizes(model: onnx.ModelProto) -> list[int]:
        return [len(feeds["x"]) for feeds in _calibration_batches(model, data, SparsifyOptions())]

    assert sizes(matmul(2)) == [2, 2, 2, 1]
    resident = iter([100.0, 1000.0])
    monkeypatch.setattr(memory, "resident_mib", lambda: next(resident))
    assert sizes(matmul("N")) == [1, 2, 1, 1, 1, 1]
    monkeypatch.setattr(memory, "resident_mib", lambda: 100.0)
    assert sizes(matmul("N")) == [1, 2, 4]
