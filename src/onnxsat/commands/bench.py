"""``onnxsat bench``: benchmarks that print measured figures (scale, large, compare, experiment, prune)."""

from __future__ import annotations

import argparse
from pathlib import Path

from onnxsat.bench.compare import DEFAULT_PAIRS, DEFAULT_WARMUP, run_compare
from onnxsat.bench.default_models import DEFAULT_DATA, experiment_models
from onnxsat.bench.fusion import FusionSettings, experiment_one
from onnxsat.bench.large import run_large_benchmark
from onnxsat.bench.scale import run_scale_benchmark
from onnxsat.bench.sparsity import SparsityExperimentSettings, experiment_three, experiment_two
from onnxsat.bench.sparsity.common import ExperimentResult
from onnxsat.commands.arguments import DYNAMIC_DIMS_ARE_ONE, add_input_options, float_list, percent
from onnxsat.data.metrics import evaluate
from onnxsat.eqsat.rules import TARGETS
from onnxsat.errors import SettingsError
from onnxsat.html import check_html_path, write_page
from onnxsat.html.bench import experiment_page
from onnxsat.html.prune import BenchPruneSection, bench_prune_page
from onnxsat.inputs import parse_input_shapes
from onnxsat.model_io import load_runnable, write_text_atomic
from onnxsat.pruning.bench import bench_prune, dataset_for, evaluation_for, to_markdown
from onnxsat.pruning.importance import CRITERIA
from onnxsat.sparsity.methods import METHODS

ORDER = 70


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="benchmarks that print measured figures")
    which = parser.add_subparsers(dest="bench", required=True)
    scale = which.add_parser("scale", help="encode/saturate/extract/decode times and peak memory on synthetic graphs")
    scale.add_argument("--blocks", type=int, default=2000, help="Conv-BN-Relu blocks in the chain (3 nodes each)")
    scale.add_argument("--dense-layers", type=int, default=120, help="layers of the DenseNet-like DAG")
    scale.set_defaults(handler=_run_bench_scale)
    large = which.add_parser(
        "large", help="build a model over 2 GB with external data, optimize it, measure peak memory vs. its size"
    )
    large.add_argument("--size-gb", type=float, default=2.2, help="weights to generate, in GB (10^9 bytes)")
    large.add_argument("--dir", default=None, help="where to build it (default: the system's temp folder)")
    large.set_defaults(handler=_run_bench_large)
    _add_bench_compare(which)
    _add_bench_experiment(which)
    _add_bench_prune(which)


def _add_bench_experiment(which: argparse._SubParsersAction) -> None:

    parser = which.add_parser(
        "experiment",
        help="experiments: 1 operator fusion, 2 accuracy drop vs sparsity, 3 latency of the sparsest in budget",
    )
    parser.add_argument("number", type=int, choices=(1, 2, 3), help="which experiment")
    parser.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        help=".onnx files (never modified); default: built-in models (1: digits CNN, SimpleClassifier, demo CNN, "
        "onnx's SqueezeNet and ShuffleNet; 2, 3: the digits CNN on its held-out digits)",
    )
    parser.add_argument(
        "--methods", nargs="+", choices=METHODS, default=["relative"], help="experiment 3 uses the first"
    )
    parser.add_argument("--data", help="as for sparsify (default: seeded random inputs, fidelity)")
    parser.add_argument("--samples", type=int, default=256, help="samples of the data used (default 256)")
    parser.add_argument("--budget", type=percent, default=0.05, help="largest allowed drop (default 5%%)")
    parser.add_argument("--metric", choices=("top1", "top5"), default="top5", help="metric of the budget")
    parser.add_argument("--levels", type=float_list, help="comma-separated levels (default 0.10 to 0.85 by 0.05)")
    parser.add_argument("--threads", type=int, default=1, help="ORT intra-op threads (default 1)")
    parser.add_argument("--rounds", type=int, default=50, help="experiments 1, 3: timed rounds (default 50)")
    parser.add_argument("--warmup", type=int, default=10, help="experiments 1, 3: untimed rounds first (default 10)")
    parser.add_argument("--batch-size", type=int, default=32, help="evaluation and throughput batch (default 32)")
    parser.add_argument(
        "--ort-level", default="all", help="experiment 1: ORT's offline level, basic/extended/all (default all)"
    )
    parser.add_argument("--target", default="ort", help="experiment 1: ONNXSat's target (default ort)")
    add_input_options(parser, feeds=False)
    parser.add_argument("--out", help="folder for the PNG plots, CSV, Markdown and settings (default out/experimentN)")
    parser.add_argument("--html", metavar="PATH", help="also write the write-up and plots as one HTML page")
    parser.set_defaults(handler=_run_bench_experiment)


def _run_bench_experiment(args: argparse.Namespace) -> int:

    out = Path(args.out or f"out/experiment{args.number}")
    models = [Path(m) for m in args.models] if args.models else experiment_models(args.number, out)
    if args.html:
        check_html_path(args.html, models)
    if args.number == 1:
        result = _experiment_one(args, models, out)
    else:
        settings = SparsityExperimentSettings(
            models=models,
            out=out,
            methods=args.methods,
            data=args.data or (None if args.models else DEFAULT_DATA),
            samples=args.samples,
            budget=args.budget,
            metric=args.metric,
            threads=args.threads,
            rounds=args.rounds,
            warmup=args.warmup,
            batch_size=args.batch_size,
        )
        if args.levels:
            settings.levels = args.levels
        result = (experiment_two if args.number == 2 else experiment_three)(settings)
    if args.html:
        figures = [(path.name, path.read_bytes()) for path in result.paths if path.suffix == ".png"]
        write_page(experiment_page(result.markdown, figures), args.html)
    print(result.markdown)
    return 0


def _experiment_one(args: argparse.Namespace, models: list[Path], out: Path) -> ExperimentResult:

    settings = FusionSettings(
        models=models,
        out=out,
        threads=args.threads,
        rounds=args.rounds,
        warmup=args.warmup,
        batch_size=args.batch_size,
        ort_level=args.ort_level,
        target=args.target,
        input_shapes=parse_input_shapes(args.input_shape),
    )
    return experiment_one(settings)


def _add_bench_compare(which: argparse._SubParsersAction) -> None:

    compare = which.add_parser(
        "compare",
        help="time ONNXSat's result against the original under ORT and against other ONNX optimizers, side by side",
    )
    compare.add_argument("models", nargs="+", metavar="MODEL", help=".onnx files (never modified)")
    add_input_options(compare, DYNAMIC_DIMS_ARE_ONE)
    compare.add_argument("--threads", type=int, default=1, help="ORT intra-op threads of every session (default 1)")
    compare.add_argument(
        "--pairs",
        type=int,
        default=DEFAULT_PAIRS,
        help="timed rounds per model; each runs every variant once (default %(default)d)",
    )
    compare.add_argument(
        "--warmup", type=int, default=DEFAULT_WARMUP, help="untimed rounds first (default %(default)d)"
    )
    compare.add_argument("--target", choices=sorted(TARGETS), default="ort", help="ONNXSat's target")
    compare.add_argument(
        "--cost", default=None, metavar="NAME", help="ONNXSat's cost model (default: OptimizeOptions' default)"
    )
    compare.add_argument("--csv", metavar="PATH", help="also write every row as CSV")
    compare.add_argument("--markdown", metavar="PATH", help="also write the tables as Markdown")
    compare.add_argument("--html", metavar="PATH", help="also write the tables and charts as one HTML page")
    compare.add_argument("--keep", metavar="DIR", help="save each variant's model here for inspection")
    compare.add_argument(
        "--session-settings",
        metavar="JSON",
        help="session settings `onnxsat tune` wrote, for every session (replaces --threads; rows keep their level)",
    )
    compare.set_defaults(handler=_run_bench_compare)


def _run_bench_scale(args: argparse.Namespace) -> int:

    return run_scale_benchmark(args.blocks, args.dense_layers)


def _run_bench_large(args: argparse.Namespace) -> int:

    return run_large_benchmark(args.size_gb, args.dir)


def _run_bench_compare(args: argparse.Namespace) -> int:

    return run_compare(
        args.models,
        args.input_shape,
        args.inputs,
        threads=args.threads,
        pairs=args.pairs,
        warmup=args.warmup,
        target=args.target,
        cost_model=args.cost,
        csv_path=args.csv,
        markdown_path=args.markdown,
        html_path=args.html,
        keep=args.keep,
        session_settings=args.session_settings,
    )


def _add_bench_prune(which: argparse._SubParsersAction) -> None:
    parser = which.add_parser(
        "prune", help="params, MACs, latency and accuracy of structured pruning at several rates, side by side"
    )
    parser.add_argument("models", nargs="+", metavar="MODEL", help=".onnx files (never modified)")
    parser.add_argument("--rates", type=float_list, default=[0.3, 0.5, 0.7], help="default 0.3,0.5,0.7")
    parser.add_argument("--criterion", choices=CRITERIA, default="l1", help="channel importance (default l1)")
    parser.add_argument("--data", help="evaluation data (default: seeded random inputs, fidelity)")
    parser.add_argument("--calibration", help="calibration data for hrank and reconstruction (default: --data)")
    parser.add_argument(
        "--samples",
        type=int,
        help="samples of each dataset used (default: all of --data and --calibration; 64 random inputs without)",
    )
    parser.add_argument("--no-reconstruct", action="store_true", help="skip the rows with reconstruction")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per setting; 0 skips timing")
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables as Markdown")
    parser.add_argument("--html", metavar="PATH", help="also write the tables and charts as one HTML page")
    parser.set_defaults(handler=_run_bench_prune)


def _run_bench_prune(args: argparse.Namespace) -> int:

    if args.samples is not None and args.samples < 1:
        raise SettingsError(f"--samples must be at least 1, got {args.samples}")
    if args.html:
        check_html_path(args.html, args.models)
    sections, pages = [], []
    for path in args.models:
        model, _ = load_runnable(path)
        evaluation = evaluation_for(model, args.data, args.samples)
        calibration = dataset_for(model, args.calibration or args.data, args.samples)
        rows = bench_prune(
            model,
            evaluation,
            calibration,
            rates=args.rates,
            criterion=args.criterion,
            reconstruct=(False,) if args.no_reconstruct else (False, True),
            rounds=args.rounds,
        )
        labelled = evaluation.dataset is not None and evaluation.dataset.labels is not None
        baseline = evaluate(model, evaluation.dataset).top1 if labelled else None
        measured = (
            f"{evaluation.kind} on {evaluation.name} ({len(evaluation.dataset or evaluation.feeds)} samples), "
            f"criterion {args.criterion}; rel. error: median ||y - y_dense|| / ||y_dense||, cosine: mean "
            "cosine similarity to the dense model's first output"
        )
        section = f"## {Path(path).stem}\n\n{measured}\n\n"
        sections.append(section + to_markdown(rows, baseline))
        pages.append(BenchPruneSection(Path(path).stem, measured, rows, baseline))
        print(sections[-1] + "\n", flush=True)
    if args.markdown:
        write_text_atomic("# onnxsat bench prune\n\n" + "\n\n".join(sections) + "\n", args.markdown)
    if args.html:
        write_page(bench_prune_page(pages), args.html)
    return 0
