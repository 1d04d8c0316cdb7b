"""What optimize's report says about its result beside the input."""

from __future__ import annotations

from onnxsat.report import OptimizeReport


def test_a_result_grown_by_folding_constants_the_input_builds_says_why() -> None:
    """The onnx package's light DenseNet builds its weights with ConstantOfShape: 214 KB as given, 21 MB once
    optimized, said with no reason (a CI size gate would trip)."""
    report = OptimizeReport("m.onnx", "o.onnx", "ort", "analytic", nodes_before={"ConstantOfShape": 3, "Conv": 2})
    report.sizes = {"original": 214_344, "optimized": 21_390_082}
    (line,) = report._size_line()
    assert "the input builds constants as it runs (ConstantOfShape)" in line
    report.nodes_before = {"Conv": 2}
    assert "builds constants" not in report._size_line()[0]
