"""``onnxsat profile MODEL [--compare OTHER]``: parse, load, profile, print."""

from __future__ import annotations

import argparse
from dataclasses import replace

import onnx

from onnxsat.commands.arguments import add_input_options, input_spec
from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec, declared_dims, fixed_dim
from onnxsat.model_io import load_runnable, model_folder
from onnxsat.profile.counting import profile_model
from onnxsat.profile.table import Comparison, comparison_json, comparison_table, profile_json, profile_table

DEFAULT_LAYERS = 20

ORDER = 80


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "profile",
        help="MACs, parameters and memory (weights + activations) per layer and in total; two models side by side",
    )
    parser.add_argument("model", help=".onnx file (never modified)")
    parser.add_argument(
        "--compare",
        metavar="OTHER",
        help="a second model (e.g. the optimized one): operators fused, MACs, params and memory side by side",
    )
    add_input_options(
        parser, "shape for an input with dynamic dims (repeatable; a dynamic batch alone is 1, others required)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON (every layer) instead of tables")
    parser.add_argument(
        "--layers",
        type=int,
        default=DEFAULT_LAYERS,
        metavar="N",
        help="tables show the N layers with the most MACs, in graph order (default %(default)d; 0: totals only)",
    )
    parser.set_defaults(handler=run_profile)


def with_batch_of_one(model: onnx.ModelProto, inputs: InputSpec) -> tuple[InputSpec, list[str]]:
    """``inputs`` with a size for every input whose first dim is its only dynamic one (almost every export's
    batch), and those inputs' names: per-sample figures need no question asked. Other dynamic dims (a
    sequence length, an image size) change the figures too much to guess; the profile asks for them."""
    initializers = {t.name for t in model.graph.initializer}
    shapes = dict(inputs.shapes)
    batch = []
    for value in model.graph.input:
        dims = declared_dims(value)
        if value.name in initializers or value.name in shapes or value.name in inputs.given or not dims:
            continue
        if fixed_dim(dims[0]) is None and all(fixed_dim(d) is not None for d in dims[1:]):
            shapes[value.name] = [1, *(d.dim_value for d in dims[1:])]
            batch.append(value.name)
    return (replace(inputs, shapes=shapes) if batch else inputs), batch


def run_profile(args: argparse.Namespace) -> int:

    if args.layers < 0:
        raise SettingsError(f"--layers must be 0 or more (got {args.layers})")
    given = input_spec(args)
    model = load_runnable(args.model)[0]
    inputs, batch = with_batch_of_one(model, given)
    if batch and not args.json:
        print(f"batch 1 for {', '.join(batch)} (dynamic batch dim; --input-shape sets another)")
    profile = profile_model(model, inputs, base_dir=model_folder(args.model))
    if args.compare is None:
        print(profile_json(profile, args.model) if args.json else profile_table(profile, args.model, args.layers))
        return 0
    other_model = load_runnable(args.compare)[0]
    other_inputs, _ = with_batch_of_one(other_model, given)
    other = profile_model(other_model, other_inputs, base_dir=model_folder(args.compare))
    comparison = Comparison(profile, other)
    if args.json:
        print(comparison_json(comparison, args.model, args.compare))
    else:
        print(comparison_table(comparison, args.model, args.compare, args.layers))
    return 0
