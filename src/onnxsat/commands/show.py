"""``onnxsat show`` and ``onnxsat show-egraph``: pictures of a model's graph and of its e-graph."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from onnxsat import model_io
from onnxsat.eqsat.rules import TARGETS
from onnxsat.errors import SettingsError
from onnxsat.show.egraph import DEFAULT_MAX_NODES, check_size, egraph_picture
from onnxsat.show.graph import compare_dot, model_dot
from onnxsat.show.render import picture_format, render

DEFAULT_MAX_GRAPH_NODES = 1500
"""Nodes per graph ``show`` draws by default: Graphviz lays out a ResNet-50 (about 120 nodes) in a
second, a 1,500-node transformer in under a minute; larger graphs take minutes and print as a smear."""

ORDER = 100


def add_show_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "show", help="draw a model's graph (PNG or SVG); with --compare, two graphs side by side, fusions highlighted"
    )
    parser.add_argument("model", help=".onnx file (never modified)")
    parser.add_argument("--compare", metavar="OTHER", help="a second model (e.g. ONNXSat's result) drawn beside it")
    parser.add_argument("-o", "--output", required=True, help="picture to write: .png or .svg")
    parser.add_argument(
        "--report",
        metavar="JSON",
        help="with --compare: `onnxsat optimize --report` of OTHER; the fusions it lists are highlighted too",
    )
    parser.add_argument(
        "--max-nodes",
        type=int,
        default=DEFAULT_MAX_GRAPH_NODES,
        help="refuse graphs with more nodes than this (default %(default)d)",
    )
    parser.set_defaults(handler=run_show)


def add_show_egraph_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "show-egraph", help="draw the e-graph of a small model after equality saturation (PNG or SVG)"
    )
    parser.add_argument("model", help=".onnx file with a few nodes (never modified)")
    parser.add_argument("-o", "--output", required=True, help="picture to write: .png or .svg")
    parser.add_argument("--target", choices=sorted(TARGETS), default="ort", help="rule sets to saturate with")
    parser.add_argument(
        "--max-nodes",
        type=int,
        default=DEFAULT_MAX_NODES,
        help="refuse models with more nodes than this; larger e-graphs cannot be read (default %(default)d)",
    )
    parser.add_argument(
        "--raw", action="store_true", help="egglog's own drawing: every table, analysis relations included"
    )
    parser.set_defaults(handler=run_show_egraph)


def _fusions(report_path: str) -> dict[str, int]:
    """The ``fusions`` of an ``onnxsat optimize --report`` file."""
    try:
        data = json.loads(Path(report_path).read_text(encoding="utf-8"))
        fusions = data["fusions"]
        return {str(label): int(count) for label, count in fusions.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise SettingsError(
            f"--report must be a JSON report of `onnxsat optimize` (with its fusions): {report_path}: {error}"
        ) from None


def _check_graph_size(model_path: str, nodes: int, limit: int) -> None:
    if nodes > limit:
        raise SettingsError(
            f"{model_path} has {nodes} nodes; `show` draws at most {limit} (laying out more takes minutes and "
            "cannot be read); raise --max-nodes to draw it anyway"
        )


def run_show(args: argparse.Namespace) -> int:
    fmt = picture_format(args.output)
    inputs = [args.model] if args.compare is None else [args.model, args.compare]
    for path in inputs:
        model_io.check_input_path(path)
        model_io.check_output_path(path, args.output)
    if args.report and args.compare is None:
        raise SettingsError("--report names the fusions of the --compare model; give --compare too")
    fusions = _fusions(args.report) if args.report else None
    models = [model_io.load_model(path) for path in inputs]
    for path, model in zip(inputs, models, strict=True):
        _check_graph_size(path, len(model.graph.node), args.max_nodes)
    titles = [f"{Path(p).name} ({len(m.graph.node)} nodes)" for p, m in zip(inputs, models, strict=True)]
    if args.compare is None:
        picture = render(model_dot(models[0], titles[0]), fmt)
        summary = f"{titles[0]}"
    else:
        dot, highlights = compare_dot(models[0], models[1], titles, fusions)
        picture = render(dot, fmt)
        summary = (
            f"{titles[0]} beside {titles[1]}: {len(highlights.fused)} fused nodes highlighted, "
            f"{len(highlights.removed)} original nodes absent from the result"
        )
    model_io.write_bytes_atomic(picture, args.output)
    print(f"wrote {args.output}: {summary}")
    return 0


def run_show_egraph(args: argparse.Namespace) -> int:
    fmt = picture_format(args.output)
    model_io.check_output_path(args.model, args.output)
    model = model_io.load_model(args.model)
    check_size(model, args.max_nodes)
    picture = egraph_picture(model, args.target, raw=args.raw, base_dir=model_io.model_folder(args.model))
    model_io.write_bytes_atomic(render(picture.dot, fmt), args.output)
    view = "every table, as egglog draws it" if args.raw else "terms reachable from the outputs"
    print(
        f"wrote {args.output}: {picture.eclasses} e-classes, {picture.enodes} e-nodes ({view}); saturation ran "
        f"{picture.iterations} iterations, stopped: {picture.stop_reason}"
    )
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    add_show_parser(commands)
    add_show_egraph_parser(commands)
