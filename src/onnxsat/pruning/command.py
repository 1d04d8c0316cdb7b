"""``onnxsat prune``: the argument parser and handler, for ``cli.py`` to register.

``cli.build_parser`` calls ``add_prune_parser(commands)``; the handler prints the report (or the trees
with ``--show-trees``) and returns the exit code, like ``sparsify``'s.
"""

from __future__ import annotations

import argparse

from onnxsat.commands.arguments import add_input_shape_option, float_list, percent
from onnxsat.pruning.importance import CRITERIA


def add_prune_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "prune", help="remove whole channels (structured pruning along node association trees)"
    )
    parser.add_argument("model", help="input .onnx file (never modified)")
    parser.add_argument("-o", "--output", help="where to write the pruned model (not needed with --show-trees)")
    parser.add_argument("--rate", type=percent, default=0.5, help="fraction of each group's channels to remove")
    parser.add_argument("--criterion", choices=CRITERIA, default="l1", help="channel importance (default l1)")
    parser.add_argument("--single-node", action="store_true", help="score root filters only, not the whole tree")
    parser.add_argument("--exclude", nargs="+", default=[], metavar="NAME", help="root nodes whose group stays whole")
    parser.add_argument("--rates", nargs="+", default=[], metavar="NAME=RATE", help="per-root-node rates")
    parser.add_argument("--reconstruct", action="store_true", help="refit the next layers by least squares")
    parser.add_argument(
        "--channel-multiple",
        type=int,
        default=8,
        help="round kept channel counts up to multiples of this (ORT's blocked layouts; 1: exact rate)",
    )
    parser.add_argument("--data", help="calibration data for hrank/--reconstruct: digits, a folder, CIFAR, an .npz")
    parser.add_argument("--limit", type=int, help="use at most this many calibration samples")
    parser.add_argument("--mean", type=float_list, help="per-channel mean subtracted from images scaled to [0, 1]")
    parser.add_argument("--std", type=float_list, help="per-channel std images are divided by")
    parser.add_argument("--library", metavar="JSON", help='extra node attribute library: {"OpType": "category"}')
    add_input_shape_option(parser)
    parser.add_argument("--show-trees", action="store_true", help="print the node association trees and stop")
    parser.add_argument("--trees-image", metavar="PATH", help="with --show-trees: also draw them (PNG, SVG)")
    parser.add_argument("--report", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--html", metavar="PATH", help="also write the report as one self-contained HTML page")
    parser.add_argument("--force", action="store_true", help="write the result even if verification fails")
    parser.set_defaults(handler=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    from onnxsat.errors import SettingsError
    from onnxsat.html import with_page
    from onnxsat.html.prune import prune_page
    from onnxsat.passes import print_report
    from onnxsat.pruning.prune import PruneOptions, parse_rates, prune, show_trees
    from onnxsat.verification import parse_input_shapes

    if args.show_trees:
        print(show_trees(args.model, args.library, args.trees_image))
        return 0
    if args.output is None:
        raise SettingsError("give -o/--output for the pruned model (or --show-trees to only list the trees)")
    options = PruneOptions(
        rate=args.rate,
        criterion=args.criterion,
        single_node=args.single_node,
        exclude=args.exclude,
        rates=parse_rates(args.rates),
        reconstruct=args.reconstruct,
        channel_multiple=args.channel_multiple,
        data=args.data,
        limit=args.limit,
        library=args.library,
        input_shapes=parse_input_shapes(args.input_shape),
        mean=args.mean,
        std=args.std,
    )
    run = with_page(
        lambda: prune(args.model, args.output, options, args.report, force=args.force),
        args.html,
        prune_page,
        [args.model],
        [args.output, args.report],
    )
    return print_report(run)


def add_bench_prune_parser(which: argparse._SubParsersAction) -> None:
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
    parser.set_defaults(handler=run_bench_prune)


def run_bench_prune(args: argparse.Namespace) -> int:
    from pathlib import Path

    from onnxsat.data.metrics import evaluate
    from onnxsat.errors import SettingsError
    from onnxsat.html import check_html_path, write_page
    from onnxsat.html.prune import BenchPruneSection, bench_prune_page
    from onnxsat.model_io import load_model, write_text_atomic
    from onnxsat.pruning.bench import bench_prune, dataset_for, evaluation_for, to_markdown

    if args.samples is not None and args.samples < 1:
        raise SettingsError(f"--samples must be at least 1, got {args.samples}")
    if args.html:
        check_html_path(args.html, args.models)
    sections, pages = [], []
    for path in args.models:
        model = load_model(path)
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
