"""The ``onnxsat`` command: parse arguments, call the library, print. No logic of its own.

Every user error ends as one line on stderr and a distinct exit code (see ``errors.py``);
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from onnxsat.commands.arguments import DYNAMIC_DIMS_ARE_ONE, add_input_shape_option, float_list, percent
from onnxsat.errors import OnnxSatError, OutOfMemoryError

if TYPE_CHECKING:
    from onnxsat.bench.sparsity.common import ExperimentResult


def _add_optimize(commands: argparse._SubParsersAction) -> None:
    from onnxsat.eqsat.costs import COST_MODELS, DEFAULT_COST_MODEL
    from onnxsat.eqsat.rules import TARGETS
    from onnxsat.eqsat.saturate import SaturationLimits
    from onnxsat.verification import DEFAULT_RUN_TIMEOUT, Tolerance

    limits, tolerance = SaturationLimits(), Tolerance()
    parser = commands.add_parser("optimize", help="fuse operators by equality saturation, verify, write, report")
    parser.add_argument("model", help="input .onnx file (never modified)")
    parser.add_argument("-o", "--output", required=True, help="where to write the optimized model")
    parser.add_argument(
        "--target",
        choices=sorted(TARGETS),
        default="ort",
        help="ort: may emit com.microsoft fused ops; portable: standard ONNX only",
    )
    parser.add_argument(
        "--cost",
        choices=sorted(COST_MODELS),
        default=DEFAULT_COST_MODEL,
        help="cost model for extraction: uniform (fewest nodes), analytic (flops and bytes), "
        "measured (ONNX Runtime micro-benchmarks, cached per machine)",
    )
    parser.add_argument("--report", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--html", metavar="PATH", help="also write the report as one self-contained HTML page")
    add_input_shape_option(parser, DYNAMIC_DIMS_ARE_ONE)
    parser.add_argument("--rtol", type=float, default=tolerance.rtol, help="relative tolerance of the verification")
    parser.add_argument("--atol", type=float, default=tolerance.atol, help="absolute tolerance of the verification")
    parser.add_argument("--force", action="store_true", help="write the result even if verification fails")
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=DEFAULT_RUN_TIMEOUT,
        help="seconds each verification run under ONNX Runtime may take (default %(default)g)",
    )
    parser.add_argument("--max-iterations", type=int, default=limits.max_iterations)
    parser.add_argument("--max-enodes", type=int, default=limits.max_enodes)
    parser.add_argument("--max-seconds", type=float, default=limits.max_seconds)
    parser.add_argument(
        "--max-memory-mib",
        type=float,
        default=limits.max_memory_mib,
        help="stop the e-graph search when the process's resident memory exceeds this",
    )
    parser.add_argument(
        "--latency", action="store_true", help="also time original vs optimized side by side under ONNX Runtime"
    )
    parser.set_defaults(handler=_run_optimize)


def _run_optimize(args: argparse.Namespace) -> int:
    from onnxsat.eqsat.optimizer import OptimizeOptions, optimize
    from onnxsat.eqsat.saturate import SaturationLimits
    from onnxsat.errors import SettingsError, VerificationFailedError
    from onnxsat.html import check_html_path, write_page
    from onnxsat.html.optimize import optimize_page_from_files
    from onnxsat.latency import compare_latency_levels
    from onnxsat.model_io import check_report_path, write_text_atomic
    from onnxsat.verification import Tolerance, parse_input_shapes

    if args.run_timeout <= 0:
        raise SettingsError(f"--run-timeout must be positive (got {args.run_timeout:g})")
    options = OptimizeOptions(
        target=args.target,
        cost_model=args.cost,
        input_shapes=parse_input_shapes(args.input_shape),
        tolerance=Tolerance(rtol=args.rtol, atol=args.atol),
        limits=SaturationLimits(args.max_iterations, args.max_enodes, args.max_seconds, args.max_memory_mib),
        force=args.force,
        run_timeout=args.run_timeout,
    )
    if args.report:
        check_report_path(args.report, args.model, args.output)
    if args.html:
        check_html_path(args.html, [args.model], [args.output, args.report])
    try:
        report = optimize(args.model, args.output, options, report_path=None)
    except VerificationFailedError as error:
        print(error.report.to_table())  # type: ignore[attr-defined]
        if args.report:
            write_text_atomic(error.report.to_json() + "\n", args.report)  # type: ignore[attr-defined]
        if args.html:
            write_page(optimize_page_from_files(error.report), args.html)  # type: ignore[attr-defined]
        raise
    if args.latency:
        report.latency = compare_latency_levels(Path(args.model), Path(args.output), options.input_shapes)
    if args.report:
        write_text_atomic(report.to_json() + "\n", args.report)
    if args.html:
        write_page(optimize_page_from_files(report), args.html)
    print(report.to_table())
    if not report.verification or not report.verification.ok:
        print("onnxsat: warning: verification failed; the result was written because of --force", file=sys.stderr)
        return 8
    return 0


def _add_sparsify(commands: argparse._SubParsersAction) -> None:
    from onnxsat.sparsity.methods import METHODS
    from onnxsat.sparsity.search import METRICS

    parser = commands.add_parser(
        "sparsify", help="zero small weights (unstructured), optionally inside an accuracy budget"
    )
    parser.add_argument("model", help="input .onnx file (never modified)")
    parser.add_argument("-o", "--output", required=True, help="where to write the sparsified model")
    parser.add_argument(
        "--method", choices=METHODS, default="relative", help="how weights are scored (default relative)"
    )
    parser.add_argument("--sparsity", type=percent, help="fraction of prunable weights to zero, e.g. 0.5 or 50%%")
    parser.add_argument("--max-drop", type=percent, help="search the highest sparsity whose drop stays within this")
    parser.add_argument("--metric", choices=METRICS, default="top1", help="metric of the budget (default top1)")
    parser.add_argument(
        "--data", help="digits, an image folder, a CIFAR-10 batches folder, an .npz (inputs, labels), or random"
    )
    parser.add_argument("--fidelity", action="store_true", help="ignore labels: agreement with the dense model")
    parser.add_argument("--limit", type=int, help="use at most this many samples of the data")
    parser.add_argument("--mean", type=float_list, help="per-channel mean subtracted from images scaled to [0, 1]")
    parser.add_argument("--std", type=float_list, help="per-channel std images are divided by")
    parser.add_argument("--uniform-only", action="store_true", help="budget search: one level for every layer only")
    parser.add_argument("--step", type=percent, default=0.05, help="budget search: level step (default 0.05)")
    parser.add_argument("--exclude", nargs="+", default=[], metavar="NAME", help="weights or nodes to leave dense")
    parser.add_argument("--sparse-initializers", action="store_true", help="store sparse weights in COO form")
    parser.add_argument("--min-sparsity", type=percent, default=0.5, help="COO only at or above this (default 0.5)")
    add_input_shape_option(parser)
    parser.add_argument("--report", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--html", metavar="PATH", help="also write the report as one self-contained HTML page")
    parser.add_argument("--force", action="store_true", help="write the result even if verification fails")
    parser.set_defaults(handler=_run_sparsify)


def _run_sparsify(args: argparse.Namespace) -> int:
    from onnxsat.html import with_page
    from onnxsat.html.sparsify import sparsify_page
    from onnxsat.passes import print_report
    from onnxsat.sparsity.sparsify import SparsifyOptions, sparsify
    from onnxsat.verification import parse_input_shapes

    options = SparsifyOptions(
        method=args.method,
        sparsity=args.sparsity,
        max_drop=args.max_drop,
        metric=args.metric,
        data=args.data,
        limit=args.limit,
        fidelity=args.fidelity,
        per_layer=not args.uniform_only,
        step=args.step,
        exclude=args.exclude,
        sparse_initializers=args.sparse_initializers,
        min_sparsity=args.min_sparsity,
        mean=args.mean,
        std=args.std,
        input_shapes=parse_input_shapes(args.input_shape),
    )
    run = with_page(
        lambda: sparsify(args.model, args.output, options, args.report, force=args.force),
        args.html,
        sparsify_page,
        [args.model],
        [args.output, args.report],
    )
    return print_report(run)


def _add_demo(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="build a small CNN, optimize it and show the report and latency")
    parser.add_argument("--output-dir", default="out/demo", help="where the demo writes its models")
    parser.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from onnxsat.demo import run_demo

    return run_demo(args.output_dir)


def _add_bench(commands: argparse._SubParsersAction) -> None:
    from onnxsat.pruning.command import add_bench_prune_parser

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
    add_bench_prune_parser(which)


def _add_bench_experiment(which: argparse._SubParsersAction) -> None:
    from onnxsat.sparsity.methods import METHODS

    parser = which.add_parser(
        "experiment",
        help="the seed's experiments: 1 operator fusion, 2 accuracy drop vs sparsity, 3 latency of the sparsest "
        "in budget",
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
    add_input_shape_option(parser)
    parser.add_argument("--out", help="folder for the PNG plots, CSV, Markdown and settings (default out/experimentN)")
    parser.add_argument("--html", metavar="PATH", help="also write the write-up and plots as one HTML page")
    parser.set_defaults(handler=_run_bench_experiment)


def _run_bench_experiment(args: argparse.Namespace) -> int:
    from onnxsat.bench.default_models import DEFAULT_DATA, experiment_models
    from onnxsat.bench.sparsity import SparsityExperimentSettings, experiment_three, experiment_two
    from onnxsat.html import check_html_path, write_page
    from onnxsat.html.bench import experiment_page

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
    from onnxsat.bench.fusion import FusionSettings, experiment_one
    from onnxsat.verification import parse_input_shapes

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
    from onnxsat.bench.compare import DEFAULT_PAIRS, DEFAULT_WARMUP
    from onnxsat.eqsat.rules import TARGETS

    compare = which.add_parser(
        "compare",
        help="time ONNXSat's result against the original under ORT and against other ONNX optimizers, side by side",
    )
    compare.add_argument("models", nargs="+", metavar="MODEL", help=".onnx files (never modified)")
    add_input_shape_option(compare, DYNAMIC_DIMS_ARE_ONE, metavar="NAME=D1,D2,...")
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
    from onnxsat.bench.scale import run_scale_benchmark

    return run_scale_benchmark(args.blocks, args.dense_layers)


def _run_bench_large(args: argparse.Namespace) -> int:
    from onnxsat.bench.large import run_large_benchmark

    return run_large_benchmark(args.size_gb, args.dir)


def _run_bench_compare(args: argparse.Namespace) -> int:
    from onnxsat.bench.compare import run_compare

    return run_compare(
        args.models,
        args.input_shape,
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


def _add_fuzz(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("fuzz", help="reliability campaigns: differential, byte-mutation, opset sweep")
    which = parser.add_subparsers(dest="fuzz", required=True)
    graphs = which.add_parser("graphs", help="random valid graphs through every target, compared under ORT")
    graphs.add_argument("--count", type=int, default=1000, help="graphs to generate")
    graphs.add_argument("--seed", type=int, default=0, help="first graph seed (graph i uses seed + i)")
    graphs.add_argument("--failures-dir", default=None, help="where to keep each failure, shrunk, as .onnx")
    graphs.set_defaults(handler=_run_fuzz_graphs)
    mutations = which.add_parser("bytes", help="random byte mutations of model files through `onnxsat optimize`")
    mutations.add_argument("--count", type=int, default=1000, help="mutated files to try")
    mutations.add_argument("--seed", type=int, default=0, help="campaign seed (case i is seeded by (seed, i))")
    mutations.add_argument("--timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    mutations.add_argument("--failures-dir", default=None, help="where to keep each failing file")
    mutations.set_defaults(handler=_run_fuzz_bytes)
    opsets = which.add_parser("opsets", help="convert test models to every opset, optimize, check opset and outputs")
    opsets.add_argument("--opsets", default=None, metavar="FIRST-LAST", help="opset range (default: 7 to newest)")
    opsets.add_argument("--table", action="store_true", help="also print the per-opset table (Markdown)")
    opsets.set_defaults(handler=_run_fuzz_opsets)


def _run_fuzz_graphs(args: argparse.Namespace) -> int:
    from onnxsat.errors import SettingsError
    from onnxsat.fuzz.graph_campaign import run_graph_campaign

    if args.count < 1:
        raise SettingsError(f"--count must be at least 1 (got {args.count})")
    from onnxsat.model_io import output_folder

    failures = output_folder(args.failures_dir, "--failures-dir")
    result = run_graph_campaign(args.count, args.seed, failures)
    census = ", ".join(f"{name} {count}" for name, count in sorted(result.patterns.items()))
    print(f"graphs containing each pattern or near-miss: {census}")
    for failure in result.failures:
        kept = f" (shrunk to {failure.shrunk_nodes} nodes: {failure.path})" if failure.path else ""
        print(f"FAILED seed {failure.seed} target {failure.target} {failure.kind}: {failure.detail[:200]}{kept}")
    print(result.summary_line())
    return 0 if result.failed == 0 else 1


def _run_fuzz_bytes(args: argparse.Namespace) -> int:
    from onnxsat.errors import SettingsError
    from onnxsat.fuzz.mutation_campaign import run_mutation_campaign

    if args.count < 1 or args.timeout <= 0:
        raise SettingsError(f"--count must be at least 1 and --timeout positive (got {args.count}, {args.timeout})")
    from onnxsat.model_io import output_folder

    failures = output_folder(args.failures_dir, "--failures-dir")
    result = run_mutation_campaign(args.count, args.seed, timeout=args.timeout, failures_dir=failures)
    for signature, items in result.failure_classes().items():
        print(f"FAILED x{len(items)}: {signature}")
    print(result.summary_line())
    return 0 if result.failed == 0 else 1


def _opset_range(text: str | None) -> list[int] | None:
    from onnxsat.errors import SettingsError

    if text is None:
        return None
    first, sep, last = text.partition("-")
    try:
        low, high = int(first), int(last if sep else first)
    except ValueError:
        raise SettingsError(f"--opsets expects FIRST-LAST, e.g. 7-21 (got {text!r})") from None
    if not 1 <= low <= high:
        raise SettingsError(f"--opsets expects 1 <= FIRST <= LAST (got {text!r})")
    return list(range(low, high + 1))


def _run_fuzz_opsets(args: argparse.Namespace) -> int:
    from onnxsat.fuzz.opsets import run_opset_sweep

    result = run_opset_sweep(opsets=_opset_range(args.opsets))
    if args.table:
        print(result.to_table())
    for case in result.failures:
        print(f"FAILED {case.model} opset {case.opset} target {case.target}: {case.detail}")
    print(result.summary_line())
    return 0 if result.ok else 1


def build_parser() -> argparse.ArgumentParser:
    from onnxsat.commands.prune import add_parser as add_prune_parser
    from onnxsat.pipelines.command import add_run_parser
    from onnxsat.profile.command import add_profile_parser
    from onnxsat.runtime.command import add_tune_parser
    from onnxsat.show.command import add_show_egraph_parser, add_show_parser
    from onnxsat.zoo.command import add_zoo_parser

    parser = argparse.ArgumentParser(prog="onnxsat", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_optimize(commands)
    _add_sparsify(commands)
    add_prune_parser(commands)
    add_run_parser(commands)
    add_tune_parser(commands)
    _add_demo(commands)
    _add_bench(commands)
    _add_fuzz(commands)
    add_profile_parser(commands)
    add_zoo_parser(commands)
    add_show_parser(commands)
    add_show_egraph_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        try:
            return int(args.handler(args))
        except MemoryError:
            raise OutOfMemoryError(
                "ran out of memory; the model or the inputs made to verify it are too large for this machine "
                "(a smaller --input-shape helps when dynamic dims are the cause)"
            ) from None
    except OnnxSatError as error:
        if args.debug:
            raise
        print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:  # output piped into `head` and closed: not an error of ours
        sys.stderr.close()
        return 141
    except KeyboardInterrupt:
        print("onnxsat: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if args.debug:
            raise
        print(
            f"onnxsat: internal error: {type(error).__name__}: {error} (rerun with --debug for details)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
