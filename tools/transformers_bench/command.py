"""``python -m tools.transformers_bench``: build (optionally), optimize in measured children, time, print.

A developer tool rather than an ``onnxsat bench`` subcommand: its models come from torch and
transformers through ``tools.zoo`` (not installed with onnxsat), and the peers run through this
checkout's ``tools.transformers_bench.peer``. The timing is ``bench compare``'s own loop
(``compare_model`` given the children's results), so its figures mean what ``bench compare``'s mean.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from onnxsat import model_io
from onnxsat.bench import peers
from onnxsat.bench.compare import (
    DEFAULT_PAIRS,
    DEFAULT_WARMUP,
    CompareSettings,
    Made,
    compare_model,
    peer_versions,
)
from onnxsat.bench.compare import settings_line as compare_settings_line
from onnxsat.errors import OnnxSatError, SettingsError
from onnxsat.timing import environment_line
from tools.transformers_bench.produce import Produced, produce_onnxsat, produce_peer
from tools.transformers_bench.table import ModelBench, geomean_line, goal_lines, markdown_table, notes, phase_lines
from tools.zoo.transformers_zoo import GEOMEAN_MODELS, TRANSFORMER_MODELS, build_transformers, model_path

PEERS = ("ort-transformers", "onnxslim")
DEFAULT_DIR = Path("out/transformers")


def model_bytes(path: Path) -> int:
    """The model's size on disk: its file plus every external data file it refers to."""
    model = onnx.load(str(path), load_external_data=False)
    locations = {
        entry.value
        for tensor in model.graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data
        if entry.key == "location"
    }
    return path.stat().st_size + sum((path.parent / location).stat().st_size for location in locations)


def bench_model(
    path: Path,
    settings: CompareSettings,
    work: Path,
    label: str | None = None,
    peer_names: Sequence[str] = PEERS,
    model_types: dict[str, str] | None = None,
) -> ModelBench:
    """One model: each tool in its own child (one after another), then every result timed side by side."""
    label = label or path.stem
    model_types = model_types or {}
    produced: list[Produced] = [produce_onnxsat(path, work)]
    produced += [produce_peer(name, path, work, model_types.get(name)) for name in peer_names]
    made = {p.source: _made(p) for p in produced}
    registry = {name: peers.PEERS[name] for name in peer_names}
    comparison = compare_model(path, settings, registry, label, made)
    return ModelBench(label, model_bytes(path), produced, comparison, model_types)


def _made(produced: Produced) -> Made:
    """The child's model for the timing loop, or why there is none.

    Loaded as written, without the ONNX checker: ORT's transformers optimizer puts contrib ops such as
    SimplifiedLayerNormalization in the default domain, which ORT runs but the checker refuses.
    """
    if produced.path is None or produced.run is None:
        return produced.reason
    try:
        return onnx.load(str(produced.path)), produced.run.seconds
    except Exception as error:  # a tool may write anything; its row says what
        return f"its result cannot be loaded: {type(error).__name__}: {error}"[:240]


def report(benches: Sequence[ModelBench], settings: CompareSettings, peer_names: Sequence[str]) -> str:
    """The whole Markdown report: environment, settings, the table, goals, geometric means, phases, noise."""
    registry = {name: peers.PEERS[name] for name in peer_names}
    lines = [
        "# Transformers benchmark",
        "",
        f"environment: {environment_line()}",
        "",
        compare_settings_line(settings),
        "",
        f"peers: {peer_versions(registry)}",
        "",
        *markdown_table(benches),
        "",
        "optimize s: wall time of the tool's own child process (start, load, optimize, save); in brackets its "
        "optimization alone (ONNXSat: every phase but load and save, from its report; a peer: its call). Peak RSS: "
        "that child's own (os.wait4). Speedup: median over interleaved rounds of (original under ORT all) / (variant "
        "under ORT all), 1 intra-op thread; outputs: against the original under ORT off on the same seeded inputs.",
        "",
        "## Goals (ONNXSat)",
        "",
        *(f"- {line}" for line in goal_lines(benches)),
        "",
        "## Geometric means",
        "",
    ]
    labels = [bench.label for bench in benches if bench.label in GEOMEAN_MODELS] or [b.label for b in benches]
    for source in ("onnxsat", *peer_names):
        line = geomean_line(benches, labels, source)
        lines.append(f"- {line}" if line else f"- {source}: not timed on any of {', '.join(labels)}")
    lines += ["", "## ONNXSat phases (seconds, from --report)", "", *(f"- {line}" for line in phase_lines(benches))]
    lines += ["", "## Noise", "", *(f"- {line}" for line in notes(benches)), ""]
    return "\n".join(lines)


def find_models(folder: Path, names: Sequence[str], build: bool, log: Callable[[str], object]) -> dict[str, Path]:
    """The catalogue's models in ``folder`` (built first with ``build``), in catalogue order."""
    wanted = list(names) or list(TRANSFORMER_MODELS)
    unknown = [name for name in wanted if name not in TRANSFORMER_MODELS]
    if unknown:
        raise SettingsError(f"unknown model {', '.join(unknown)}: choose from {', '.join(TRANSFORMER_MODELS)}")
    if build:
        return build_transformers(folder, wanted, log=log)
    found = {name: model_path(folder, name) for name in wanted if model_path(folder, name).exists()}
    if not found:
        raise SettingsError(
            f"none of {', '.join(wanted)} is in {folder}: pass --build to export them (needs the zoo extra)"
        )
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.transformers_bench",
        description="ONNXSat, ORT's transformers optimizer and onnxslim on BERT, ViT, GPT-2 and a tiny Llama",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"models (default: {', '.join(TRANSFORMER_MODELS)})")
    parser.add_argument("--models", type=Path, default=DEFAULT_DIR, help="folder of NAME.onnx (default %(default)s)")
    parser.add_argument("--build", action="store_true", help="export the models missing from --models first")
    parser.add_argument("--markdown", metavar="FILE", help="also write the report here")
    parser.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help="timed rounds (default %(default)d)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed rounds (default %(default)d)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    settings = CompareSettings(threads=1, pairs=args.pairs, warmup=args.warmup)
    settings.check()
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731 (progress, not the report)
    models = find_models(args.models, args.names, args.build, log)
    benches = []
    with tempfile.TemporaryDirectory(prefix="onnxsat-transformers-") as work:
        for name, path in models.items():
            log(f"{name}: optimizing in child processes, then timing")
            types = {"ort-transformers": TRANSFORMER_MODELS[name].ort_model_type}
            benches.append(bench_model(path, settings, Path(work), name, PEERS, types))
            for produced in Path(work).iterdir():
                produced.unlink()  # the next model's sessions need the room more than these files
    text = report(benches, settings, PEERS)
    print(text)
    if args.markdown:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = shlex.join(["python", "-m", "tools.transformers_bench", *argv])
        model_io.write_text_atomic(f"<!-- {command} ; run {when} -->\n{text}", args.markdown)
    failed = [bench.label for bench in benches if not bench.comparison.onnxsat_ok]
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return run(args, argv)
    except OnnxSatError as error:
        if args.debug:
            raise
        print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code
