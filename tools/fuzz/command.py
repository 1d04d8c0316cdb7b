"""``python -m tools.fuzz graphs|bodies|bytes|opsets``: run a reliability campaign and print its counts.

The options and output are those of the former ``onnxsat fuzz`` command. A bad setting is one
``onnxsat: error: ...`` line and the exit code of :class:`~onnxsat.errors.SettingsError` (9), like
every ONNXSat command; a campaign with a failure exits 1. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onnxsat.errors import OnnxSatError, SettingsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.fuzz", description="reliability campaigns: differential, byte-mutation, opset sweep"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    which = parser.add_subparsers(dest="fuzz", required=True)
    graphs = which.add_parser("graphs", help="random valid graphs through every target, compared under ORT")
    graphs.add_argument("--count", type=int, default=1000, help="graphs to generate")
    graphs.add_argument("--seed", type=int, default=0, help="first graph seed (graph i uses seed + i)")
    graphs.add_argument("--failures-dir", default=None, help="where to keep each failure, shrunk, as .onnx")
    graphs.set_defaults(handler=run_graphs, kind="graph")
    bodies = which.add_parser("bodies", help="random graphs with If/Loop/Scan bodies through every target, under ORT")
    bodies.add_argument("--count", type=int, default=500, help="graphs to generate")
    bodies.add_argument("--seed", type=int, default=0, help="first graph seed (graph i uses seed + i)")
    bodies.add_argument("--failures-dir", default=None, help="where to keep each failure, shrunk, as .onnx")
    bodies.set_defaults(handler=run_graphs, kind="bodies")
    mutations = which.add_parser("bytes", help="random byte mutations of model files through `onnxsat optimize`")
    mutations.add_argument("--count", type=int, default=1000, help="mutated files to try")
    mutations.add_argument("--seed", type=int, default=0, help="campaign seed (case i is seeded by (seed, i))")
    mutations.add_argument("--timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    mutations.add_argument("--failures-dir", default=None, help="where to keep each failing file")
    mutations.set_defaults(handler=run_bytes)
    opsets = which.add_parser("opsets", help="convert test models to every opset, optimize, check opset and outputs")
    opsets.add_argument("--opsets", default=None, metavar="FIRST-LAST", help="opset range (default: 7 to newest)")
    opsets.add_argument("--table", action="store_true", help="also print the per-opset table (Markdown)")
    opsets.add_argument("--limit", type=int, default=None, help="only the first N test models (default: all)")
    opsets.set_defaults(handler=run_opsets)
    return parser


def run_graphs(args: argparse.Namespace) -> int:
    from onnxsat.model_io import output_folder
    from tools.fuzz.graph_campaign import run_graph_campaign

    if args.count < 1:
        raise SettingsError(f"--count must be at least 1 (got {args.count})")
    failures = output_folder(args.failures_dir, "--failures-dir")
    result = run_graph_campaign(args.count, args.seed, failures, kind=args.kind)
    census = ", ".join(f"{name} {count}" for name, count in sorted(result.patterns.items()))
    print(f"graphs containing each pattern or near-miss: {census}")
    if result.control:
        control = ", ".join(f"{name} {count}" for name, count in sorted(result.control.items()))
        print(f"control flow (nodes, bodies, or graphs for 'nested N deep'): {control}")
    for reason, count in result.invalid_reasons.most_common(5):
        print(f"invalid x{count}: {reason}")
    for failure in result.failures:
        kept = f" (shrunk to {failure.shrunk_nodes} nodes: {failure.path})" if failure.path else ""
        print(f"FAILED seed {failure.seed} target {failure.target} {failure.kind}: {failure.detail[:200]}{kept}")
    print(result.summary_line())
    return 0 if result.failed == 0 else 1


def run_bytes(args: argparse.Namespace) -> int:
    from onnxsat.model_io import output_folder
    from tools.fuzz.mutation_campaign import run_mutation_campaign

    if args.count < 1 or args.timeout <= 0:
        raise SettingsError(f"--count must be at least 1 and --timeout positive (got {args.count}, {args.timeout})")
    failures = output_folder(args.failures_dir, "--failures-dir")
    result = run_mutation_campaign(args.count, args.seed, timeout=args.timeout, failures_dir=failures)
    for signature, items in result.failure_classes().items():
        print(f"FAILED x{len(items)}: {signature}")
    print(result.summary_line())
    return 0 if result.failed == 0 else 1


def opset_range(text: str | None) -> list[int] | None:
    """``"7-21"`` (or ``"17"``) as the list of opsets it names; None for the default range."""
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


def run_opsets(args: argparse.Namespace) -> int:
    from tools.fuzz.opsets import default_models, run_opset_sweep

    opsets = opset_range(args.opsets)
    if args.limit is not None and args.limit < 1:
        raise SettingsError(f"--limit must be at least 1 (got {args.limit})")
    result = run_opset_sweep(default_models()[: args.limit], opsets=opsets)
    if args.table:
        print(result.to_table())
    for case in result.failures:
        print(f"FAILED {case.model} opset {case.opset} target {case.target}: {case.detail}")
    print(result.summary_line())
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the campaign; a user error is one ``onnxsat: error:`` line and its exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except OnnxSatError as error:
        if args.debug:
            raise
        print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("onnxsat: interrupted", file=sys.stderr)
        return 130
