"""``onnxsat demo``: the main jobs on built-in models, end to end, as a user would run them: operator
fusion on a small CNN, then an accuracy-budgeted sparsification of the bundled trained digits CNN."""

from __future__ import annotations

from pathlib import Path

from onnxsat.api import optimize, sparsify
from onnxsat.errors import MissingExtraError
from onnxsat.latency import compare_latency_levels
from onnxsat.model_io import save_model
from onnxsat.zoo.digits_cnn import bundled_digits_cnn
from onnxsat.zoo.synthetic import demo_cnn


def run_demo(output_dir: str) -> int:
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    original_path, optimized_path = folder / "demo_cnn.onnx", folder / "demo_cnn.opt.onnx"
    save_model(demo_cnn(), original_path)
    print(f"built {original_path}: a small CNN with Conv+BN+Relu, Conv+BN+Clip, depthwise Conv, MaxPool, Gemm+Relu\n")
    report = optimize(original_path, optimized_path, target="ort", report=folder / "report.json")
    report.latency = compare_latency_levels(original_path, optimized_path)
    (folder / "report.json").write_text(report.to_json() + "\n")
    print(report.to_table())
    print(f"\nwrote {optimized_path} and {folder / 'report.json'}")
    if report.latency[0].speedup < 1.02:
        print(
            "note: under ORT_ENABLE_ALL, ONNX Runtime performs these same fusions itself, so the fusions\n"
            "above gain little there; the ORT_DISABLE_ALL line shows what they buy on their own."
        )
    try:
        _sparsify_demo(folder)
    except MissingExtraError as error:  # the digits are scikit-learn's: a core-only install skips this job
        print(f"skipped the sparsify demo: {error}")
    return 0


def _sparsify_demo(folder: Path) -> None:
    """Second job: how sparse the bundled trained digits CNN can go within one point of held-out top-1."""
    print("\n" + "-" * 100 + "\n")
    target = folder / "digits_cnn.sparse.onnx"
    report = sparsify(
        bundled_digits_cnn(),
        target,
        method="relative",
        sparsity=None,
        max_drop=0.01,
        metric="top1",
        data="digits-test",
        report=folder / "sparsify_report.json",
    )
    print(report.to_table())
    print(f"\nwrote {target} and {folder / 'sparsify_report.json'}")
