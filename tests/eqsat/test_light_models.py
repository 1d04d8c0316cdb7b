"""The classic architectures bundled with the onnx package go through every rule family and come back.

They are Caffe2 conversions (BatchNormalization followed by Mul and Add, LRN, Sum residuals, Concat
blocks): graphs unlike today's exports, on which a rule's join plan can blow up. Each must saturate
well inside the default time limit (light DenseNet-121 once ran 774 s into the limit), verify against
the original under ONNX Runtime, and match the output the onnx package ships with it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from eqsat_helpers import session
from onnx import numpy_helper
from onnxsat.eqsat.optimizer import OptimizeOptions, optimize_model

from onnxsat.zoo.bundled import bundled_models

LIGHT = bundled_models()

EXPECTED_FUSIONS = {
    "densenet121": "Conv+BatchNormalization+Relu -> com.microsoft::FusedConv",
    "resnet50": "Conv+BatchNormalization+Relu -> com.microsoft::FusedConv",
    "inception_v1": "LRN -> Conv",
}
"""A fusion each of these must show: what the model is there to exercise."""


@pytest.mark.skipif(not LIGHT, reason="this onnx build ships without backend test data")
@pytest.mark.parametrize("name", sorted(LIGHT))
def test_light_model_saturates_verifies_and_matches_its_reference(name: str) -> None:
    path: Path = LIGHT[name]
    model = onnx.load(str(path))
    optimized, report = optimize_model(model, OptimizeOptions(target="ort"))

    assert report.egraph["stop_reason"] == "saturated"
    assert report.verification.ok
    assert sum(report.nodes_after.values()) <= sum(report.nodes_before.values())
    if name in EXPECTED_FUSIONS:
        assert report.fusions.get(EXPECTED_FUSIONS[name], 0) > 0, report.fusions
    (image,) = [v for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
    dims = [d.dim_value for d in image.type.tensor_type.shape.dim]
    reference = numpy_helper.to_array(onnx.load_tensor(str(path.with_name(f"{path.stem}_output_0.pb"))))
    # The reference was computed on an all-zero image (the weights are constants, so any input of the
    # right shape gives the same degenerate output).
    (actual,) = session(optimized).run(None, {image.name: np.zeros(dims, np.float32)})
    np.testing.assert_allclose(actual, reference, rtol=1e-4, atol=1e-6)
